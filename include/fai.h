/*
 * fai.h - FlashAttention inference on CPUs.
 *
 *     S = scale * Q K^T (+ mask)     P = softmax(S)     O = P V     LSE = log(sum exp S)
 *
 * Score modifiers, each optional: soft-capping (S <- c tanh(S / c)), ALiBi (S -= slope x
 * distance), attention sinks (a per-head logit in every row's denominator) and bit-packed keep
 * masks; see fai_problem.softcap, alibi and sinks and FAI_MASK_KEEP_BITS.
 *
 * The only public header of libfai. Usage is plan, then run:
 *
 *     fai_problem pb;  fai_problem_init(&pb);   // describe shapes, masks, lengths, dtypes
 *     ... fill pb ...
 *     fai_plan *plan;
 *     if (fai_plan_create(&pb, &plan) != FAI_OK) puts(fai_last_error());
 *     void *ws = malloc(fai_plan_workspace_size(plan));              // any alignment
 *     fai_tensors t = {...};                                         // pointers and strides
 *     fai_run(plan, &t, ws, fai_plan_workspace_size(plan));          // allocates nothing
 *     fai_plan_free(plan);
 *
 * Layout: Q [B, Sq, Hq, D], K [B, Skv, Hkv, D], V [B, Skv, Hkv, Dv], O [B, Sq, Hq, Dv] by
 * default; any other layout is expressed by element strides for batch, sequence and head. The
 * last (d) dimension is always contiguous.
 *
 * All sizes and strides are counted in elements of the tensor's dtype, never in bytes.
 */
#ifndef FAI_H
#define FAI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FAI_VERSION_MAJOR 0
#define FAI_VERSION_MINOR 1
#define FAI_VERSION_PATCH 0

/* FAI_API marks the functions libfai exports. The library is compiled with hidden visibility and
 * FAI_BUILDING_LIBRARY defined, so libfai.so exports these and nothing else; for a program that
 * includes this header the macro is empty. */
#if defined(FAI_BUILDING_LIBRARY) && (defined(__GNUC__) || defined(__clang__))
#define FAI_API __attribute__((visibility("default")))
#else
#define FAI_API
#endif

/* Largest head dimension (D or Dv) accepted: 576/512 is the MLA decode shape. */
#define FAI_MAX_HEAD_DIM 576
/* Largest number of workers a plan may split its work into. */
#define FAI_MAX_WORKERS 1024

/* Defaults of fai_problem fields, as fai_problem_init sets them. Each is a value no computation
 * of the field's quantity produces, so that a computed value is always taken as given: a scale
 * that rounds to 0 is uniform attention, a head dimension of 0 is an error.
 *
 * FAI_SCALE_DEFAULT: scale = 1/sqrt(head_dim). A quiet NaN with its own payload (the bits
 * FAI_SCALE_DEFAULT_BITS); any other NaN, or an infinity, is refused. Compare bits, not values,
 * to test for it (a NaN equals nothing). The macro uses a GCC/Clang builtin; elsewhere, store
 * the bits. */
#define FAI_SCALE_DEFAULT_BITS UINT32_C(0x7fc00fa1)
#define FAI_SCALE_DEFAULT (__builtin_nanf("0xfa1"))
/* FAI_HEAD_DIM_V_DEFAULT: head_dim_v = head_dim. */
#define FAI_HEAD_DIM_V_DEFAULT INT64_C(-1)
/* FAI_WINDOW_UNBOUNDED: no limit on that side of the sliding window (FlashAttention's -1). */
#define FAI_WINDOW_UNBOUNDED INT64_C(-1)
/* FAI_AUTO: workers, threads, tile_q and tile_kv chosen by fai. threads never changes a bit of
 * the result; workers and tiles decide which units are split and merged and how keys are
 * grouped, so they may change the last bits (always within the documented bound): a plan that
 * must give the same bits on machines with other core counts sets workers (and tiles). */
#define FAI_AUTO 0

/* ---------------------------------------------------------------------------------------------
 * Status
 * ------------------------------------------------------------------------------------------- */

/* The status codes, one X(name, value) per code: the single list the enum, fai_status_string
 * and bindings are made from (define X, expand FAI_STATUS_MAP(X), undefine X). */
#define FAI_STATUS_MAP(X)                                                                          \
    X(FAI_OK, 0)                                                                                   \
    X(FAI_ERR_INVALID_ARG, 1)         /* a problem or tensors field out of its domain */           \
    X(FAI_ERR_UNSUPPORTED, 2)         /* a valid request this build does not implement */          \
    X(FAI_ERR_WORKSPACE_TOO_SMALL, 3) /* workspace NULL or below fai_plan_workspace_size */        \
    X(FAI_ERR_NO_MEMORY, 4)           /* an allocation in plan or pool creation failed */          \
    X(FAI_ERR_ISA_UNAVAILABLE, 5)     /* FAI_ISA forces an instruction set this CPU lacks */       \
    X(FAI_ERR_OVERFLOW, 6)            /* a size computed from the problem overflows */             \
    X(FAI_ERR_IO, 7)                  /* the tuning cache could not be written */

typedef enum fai_status {
#define FAI_STATUS_ENUM_(name, value) name = value,
    FAI_STATUS_MAP(FAI_STATUS_ENUM_)
#undef FAI_STATUS_ENUM_
} fai_status;

/* Short fixed name of a status ("FAI_OK", "FAI_ERR_INVALID_ARG", ...). Never NULL; unknown
 * values give "FAI_ERR_UNKNOWN". Thread-safe. */
FAI_API const char *fai_status_string(fai_status status);

/* The message of the last failing call of this thread: it names the field and the value, e.g.
 * "heads_q = 12 is not a multiple of heads_kv = 5". Empty after a successful call. The string
 * lives in thread-local storage and is valid until this thread's next fai call. */
FAI_API const char *fai_last_error(void);

/* ---------------------------------------------------------------------------------------------
 * Problem description
 * ------------------------------------------------------------------------------------------- */

/* Element types. Q and O are f32, f16 or bf16; K and V may also be quantized (int8, e4m3,
 * e5m2): each element then stands for scale x q, the scales given at run time in
 * fai_tensors.k_scale / v_scale (see fai_scale). */
typedef enum fai_dtype {
    FAI_DTYPE_F32 = 0,  /* IEEE binary32 */
    FAI_DTYPE_F16 = 1,  /* IEEE binary16 */
    FAI_DTYPE_BF16 = 2, /* bfloat16: the upper half of a binary32 */
    FAI_DTYPE_I8 = 3,   /* two's complement int8, symmetric: value = scale x q, q in -128..127 */
    FAI_DTYPE_E4M3 = 4, /* fp8 e4m3 ("e4m3fn": bias 7, no infinities, S.1111.111 is NaN, largest
                           finite 448): value = scale x fp8 */
    FAI_DTYPE_E5M2 = 5  /* fp8 e5m2 (the upper byte of a binary16: bias 15, +-Inf and NaN,
                           largest finite 57344): value = scale x fp8 */
} fai_dtype;

/* Bytes per element of a dtype: 4 for f32, 2 for f16 and bf16, 1 for int8, e4m3 and e5m2; 0
 * for a value that is not a fai_dtype. Thread-safe. */
FAI_API size_t fai_dtype_size(fai_dtype dtype);

/* Short fixed name of a dtype: "f32", "f16", "bf16", "int8", "e4m3", "e5m2"; "unknown" for a
 * value that is not a fai_dtype. Never NULL. Thread-safe. */
FAI_API const char *fai_dtype_name(fai_dtype dtype);

/* Nonzero for the quantized dtypes (int8, e4m3, e5m2), which need scales; 0 otherwise. */
FAI_API int fai_dtype_is_quantized(fai_dtype dtype);

/* Causal masking. Query i of a sequence with lq queries and lk keys:
 *   BOTTOM_RIGHT sees keys j <= i + lk - lq (the inference convention of FlashAttention >= 2.1,
 *                vLLM, FlashInfer: the last query sees every key). This is what "causal" means
 *                in fai unless top-left is asked for.
 *   TOP_LEFT     sees keys j <= i (PyTorch's is_causal). */
typedef enum fai_causal {
    FAI_CAUSAL_NONE = 0,
    FAI_CAUSAL_BOTTOM_RIGHT = 1,
    FAI_CAUSAL_TOP_LEFT = 2
} fai_causal;

/* Explicit mask tensors, [Sq, Skv], [B, Sq, Skv] or [B, Hq, Sq, Skv] by strides (0 broadcasts).
 *   KEEP: one byte per element, nonzero = attend (PyTorch's boolean convention).
 *   DROP: one byte per element, nonzero = masked out (the seed's convention).
 *   ADD:  float32 added to the scaled logit; -inf masks the position.
 *   KEEP_BITS: one bit per element, 1 = attend: key j of a row is bit j % 8 (least significant
 *         first) of the row's byte j / 8, and each row is padded to whole bytes (at least
 *         ceil(Skv / 8) of them; the padding bits are never read). The strides count bytes.
 *         The tree masks of speculative decoding (FlashInfer's packed custom masks). Where all
 *         the bits of a kv tile's rows are 0 the tile is skipped without computing it. */
typedef enum fai_mask_kind {
    FAI_MASK_NONE = 0,
    FAI_MASK_KEEP = 1,
    FAI_MASK_DROP = 2,
    FAI_MASK_ADD = 3,
    FAI_MASK_KEEP_BITS = 4
} fai_mask_kind;

/* How fai_plan_create splits the work across workers.
 *   AUTO:   the valid kv tiles of all units are laid in one line and cut into pieces of equal
 *           cost (a tile, plus a little for every page of a paged K/V the unit walks); a unit
 *           cut by a worker boundary is computed in parts (split-KV) whose partial results are
 *           merged by their LSE in a fixed order, so the result is deterministic for a plan.
 *           Boundaries that fall close to a unit's edge snap to it, to save the merge.
 *           Worker weights are still reported in valid tiles.
 *   UNITS:  whole units in contiguous ranges by weight (no split-KV).
 *   GREEDY: the seed's ComputeSplitNBSeq: whole units; a new worker opens at a unit whose weight
 *           exceeds twice the current worker's remaining deficit to its cumulative target. Kept
 *           to compare against. */
typedef enum fai_split { FAI_SPLIT_AUTO = 0, FAI_SPLIT_UNITS = 1, FAI_SPLIT_GREEDY = 2 } fai_split;

/* Everything fai_plan_create needs to know. Start from fai_problem_init() and set what differs.
 *
 * Lengths. A padded batch stores sequence b's rows at batch index b; seqlens_q / seqlens_kv
 * (int32 [batch], optional) give its actual lengths, at most seq_q / seq_kv. A packed ("ragged")
 * batch stores all sequences back to back along the sequence axis (the batch stride is unused);
 * cu_seqlens_q / cu_seqlens_kv (int32 [batch + 1], non-decreasing, starting at 0) are the prefix
 * sums, and seq_q / seq_kv are then the number of rows in the packed tensor. Empty sequences are
 * allowed everywhere. The plan copies all length arrays: they may be freed after creation.
 *
 * Paged KV. With page_size > 0, K and V are page pools [num_pages, page_size, Hkv, D|Dv] (or
 * head-major, by strides: the tensor's batch stride is the page stride), and the run-time block
 * table (int32 [batch, pages_per_seq]) maps page p of sequence b to a pool page. seqlens_kv is
 * required and each length must fit in pages_per_seq * page_size.
 *
 * Packed rows of Q (and O) after the last sequence (cu_seqlens_q[batch] <= r < seq_q) count as
 * padding of the last sequence and are written as zeros; with batch = 0 a packed Q must have no
 * rows.
 *
 * Switches (the int fields documented "1: ..." below) are 0 or 1: other values are refused. */
typedef struct fai_problem {
    int64_t batch;      /* B >= 0 */
    int64_t heads_q;    /* Hq >= 1 */
    int64_t heads_kv;   /* Hkv >= 1, divides Hq (GQA; Hkv == 1 is MQA) */
    int64_t seq_q;      /* Sq: padded query length, or packed rows with cu_seqlens_q */
    int64_t seq_kv;     /* Skv: padded key length, or packed rows with cu_seqlens_kv; unused
                           (and not checked) when paged */
    int64_t head_dim;   /* D of Q and K, 1..FAI_MAX_HEAD_DIM */
    int64_t head_dim_v; /* Dv of V and O, 1..FAI_MAX_HEAD_DIM, or FAI_HEAD_DIM_V_DEFAULT (the
                           default): D */

    fai_dtype q_dtype, k_dtype, v_dtype, o_dtype;

    /* Multiplies Q K^T: any finite value, 0 included (every visible key then weighs the same),
     * or FAI_SCALE_DEFAULT (the default): 1/sqrt(D). */
    float scale;

    fai_causal causal;
    /* Sliding window measured from the causal diagonal (bottom-right unless causal is TOP_LEFT):
     * query i sees keys j with  diag(i) - window_left <= j <= diag(i) + window_right.
     * FAI_WINDOW_UNBOUNDED (-1, the default) leaves that side unbounded; other negative values
     * and values above INT32_MAX are refused. With causal, window_right is 0 whatever is given.
     * With q_positions / kv_positions (below) the diagonal is where the global positions meet. */
    int64_t window_left, window_right;

    fai_mask_kind mask_kind; /* the mask data and strides come with the tensors at run time */

    const int32_t *seqlens_q;     /* [batch] or NULL (all rows valid) */
    const int32_t *seqlens_kv;    /* [batch] or NULL; required when paged */
    const int32_t *cu_seqlens_q;  /* [batch + 1] or NULL; excludes seqlens_q */
    const int32_t *cu_seqlens_kv; /* [batch + 1] or NULL; excludes seqlens_kv and paging */

    int64_t page_size;     /* 0: K/V are dense; >= 1: paged */
    int64_t num_pages;     /* pages in each pool (paged only; 0 when dense) */
    int64_t pages_per_seq; /* width of the block table (paged only; 0 when dense) */
    /* 1: fai_run does not check the block-table entries a run reads (they must then be
     * inside the pool: a bad entry is undefined behaviour). For callers that guarantee them and
     * want to save the check, which reads ceil(length / page_size) entries per sequence (`fai
     * bench` prints its cost). Everything else is checked regardless. */
    int trust_block_table;

    /* Execution. workers: how many contiguous pieces the work is split into (FAI_AUTO: one per
     * online CPU); the result is bitwise identical for any number of threads running them.
     * threads: how many threads run them (FAI_AUTO: the pool's threads, fewer for small
     * problems, where waking a thread costs more than it saves; 1: only the calling thread). */
    int64_t workers;
    int64_t threads;
    fai_split split; /* how the work is split (default AUTO) */
    /* Tile shape override (FAI_AUTO: the planner chooses): query positions and keys per tile. */
    int64_t tile_q, tile_kv;

    /* Global positions, for a shard of a longer sequence (sequence-parallel attention across
     * processes, ring attention): int32 [batch], both set or both NULL; the plan copies them.
     * Each in [0, INT32_MAX] (refused otherwise, naming the sequence and the value).
     * Query i of sequence b stands at position q_positions[b] + i and key j at
     * kv_positions[b] + j, and causal and window masks compare these positions: the query at
     * position p sees keys at positions  p - window_left .. p + window_right,  and with causal
     * (either corner: positions fix the diagonal) at most p. Lengths, padding and explicit mask
     * tensors stay local to the shard. NULL: the diagonal of causal above. */
    const int32_t *q_positions;
    const int32_t *kv_positions;

    /* 1: the planner ignores the tuning cache (see fai_tuning_store) and chooses the tile
     * by its own rule. */
    int ignore_tuning;

    /* 1: where O = P V multiplies P in bf16 (plan info p_parts: the matrix engine, or
     * bf16 dot products for all-bf16 Q, K and V), P is rounded to bf16 first, as PyTorch's and
     * vLLM's CPU kernels do: one pass fewer, and each element of O may differ by up to
     * 2^-8 sum_j p_j |v_j| (p the row's normalised weights) more than the documented tolerances
     * allow; docs/design.md gives the measured error. 0 (the default): P is held to 2^-16
     * relative and the tolerances hold. Where PV runs in f32, P is exact either way. */
    int round_p_bf16;

    /* Score modifiers. The scores of a row are formed as
     *     s_j = softcap(scale q.k_j) - slope_h |pos(j) - pos(i)| (+ additive mask)
     * and masked keys (causal, window, mask tensors) are removed after that; P and LSE then
     * include the sink (below). */

    /* Logit soft-capping (Gemma 2): each scaled score s becomes softcap * tanh(s / softcap),
     * before ALiBi and the masks (+-Inf scores become +-softcap, NaN stays NaN). 0 (the
     * default): off. Otherwise finite and positive, with a finite reciprocal (about 2.9e-39 or
     * more: the scores are multiplied by 1 / softcap); other values are refused. */
    float softcap;

    /* 1: ALiBi (BLOOM, MPT). Query head h's score for key j of query i gains
     * -alibi_slopes[h] x |pos(j) - pos(i)|, the slopes (f32 [heads_q], finite) given at run
     * time in fai_tensors.alibi_slopes (fai_alibi_slopes fills the standard ones). Positions
     * are those of the causal diagonal: key j at j, query i at i + lk - lq (bottom-right),
     * at i with causal TOP_LEFT, or the global positions of q_positions / kv_positions, so a
     * chunk of queries, a shard or a cache of any length gets the same bias as the whole
     * sequence. 0 (the default): off. */
    int alibi;

    /* 1: attention sinks (gpt-oss). Query head h's softmax denominator gains
     * exp(sinks[h] - m) (m the row's max), the sink logits (f32 [heads_q]) given at run time in
     * fai_tensors.sinks: P_j = exp(s_j) / (exp(sink_h) + sum_k exp(s_k)), and LSE = log(exp
     * (sink_h) + sum_k exp(s_k)). The sink carries no value. A sink of -inf is no sink for
     * that head; NaN and +inf are refused. A row with no visible key gets O = 0 and LSE =
     * sink_h. With split-KV the sink is counted once, when the parts are merged. Results
     * computed with sinks must not be merged by fai_merge_states (each part would count the
     * sink): compute the parts without sinks, merge them, then add the sinks once with
     * fai_apply_sinks. 0 (the default): off. */
    int sinks;

    /* 1: fai_run does not read the scales of a quantized K/V (fai_scale) to check them
     * before computing, which costs a pass over them (about 3 % of an int8 decode step). For
     * callers whose scales come from fai_cache_write or are otherwise known to be finite and >
     * 0: a bad scale then gives wrong values (NaN or Inf where it is NaN, 0 or Inf), never a read
     * outside the scales the strides address. fai_check_tensors checks them regardless. 0 (the
     * default): checked. */
    int trust_scales;

    /* 1: a quantized K (k_dtype int8, e4m3 or e5m2) also has a scale per kv head and
     * channel, given at run time in fai_tensors.k_channel_scale, as KIVI and OpenVINO keep for
     * keys: element d of a key of kv head h is code x its scale (fai_scale) x the channel's.
     * fai multiplies Q by the channels' scales once per unit instead (q . (c x codes) =
     * (q x c) . codes, one more f32 rounding of each Q element), so it costs no pass over K;
     * each product q x c must then lie within f32's range (below 3.4e38, and above 1e-38 where
     * it matters), as it does for any scale a model stores. Refused for f32, f16 and bf16 K. 0
     * (the default): none. */
    int k_channel_scales;

    /* The seed's KERNEL_TASK_NUM on the matrix engine: how many kv tiles a unit has in flight.
     * 1: each tile's QK runs just before its softmax; 2: the next tile's QK is issued behind this
     * tile's PV, row block by row block, its K and V packed into a second buffer of the
     * workspace. FAI_AUTO: the planner chooses (1 where one row block's operands fit L1d, whose
     * second K/V buffer would push them out; else 2). The vector tables compute one tile at a
     * time whatever it says (plan info pipeline_tiles: 1). The results are the same bits either
     * way. Otherwise 0, 1 or 2. */
    int pipeline_tiles;
} fai_problem;

/* Fills a problem with the defaults: every count 0, head_dim_v FAI_HEAD_DIM_V_DEFAULT (D),
 * dtypes Q f32, K/V f16, O f32, scale FAI_SCALE_DEFAULT (1/sqrt(D)), no causal mask, window
 * FAI_WINDOW_UNBOUNDED on both sides, no mask tensor, dense KV, FAI_AUTO workers, threads and
 * tiles, no score modifiers (softcap 0, alibi 0, sinks 0). A problem zeroed some other way is not a
 * default one (its scale 0 and window (0, 0) are taken as given, its head_dim_v 0 is refused). */
FAI_API void fai_problem_init(fai_problem *problem);

/* ---------------------------------------------------------------------------------------------
 * Tensors (given at run time)
 * ------------------------------------------------------------------------------------------- */

/* One strided tensor. Element (b, s, h, d) lives at data[b*stride_batch + s*stride_seq +
 * h*stride_head + d]. For a packed (cu_seqlens) tensor stride_batch is ignored and s is the
 * packed row; for a page pool stride_batch is the page stride and s the slot in the page.
 * Strides are never negative. stride_dim is the stride of d: it must be 1 (0 is read as 1),
 * because the head dimension is contiguous. data is aligned to the element size, as an array of
 * the dtype is (2 bytes for f16 and bf16, 4 for f32): a misaligned one is refused. */
typedef struct fai_tensor {
    void *data;
    fai_dtype dtype;
    int64_t stride_batch, stride_seq, stride_head;
    int64_t stride_dim;
} fai_tensor;

/* An explicit mask: element (b, h, i, j) for query i and key j of sequence b (positions inside
 * the sequence, also for packed batches) lives at data[b*stride_batch + h*stride_head +
 * i*stride_q + j]. A zero stride broadcasts: [Sq, Skv] is stride_batch = stride_head = 0.
 * Bytes for KEEP and DROP, float32 for ADD (data then 4-byte aligned). For KEEP_BITS the strides
 * count bytes and element (b, h, i, j) is bit j % 8 of byte data[b*stride_batch + h*stride_head +
 * i*stride_q + j / 8] (a row of Skv keys needs stride_q >= ceil(Skv / 8)). */
typedef struct fai_mask {
    const void *data;
    int64_t stride_batch, stride_head, stride_q;
} fai_mask;

/* The dequantization scales of a quantized K or V (fai_dtype int8, e4m3 or e5m2), f32: the
 * scale of (b, s, h) lives at data[b*stride_batch + s*stride_seq + h*stride_head], (b, s, h)
 * addressed as the tensor's rows are (a page pool's page and slot; a packed row with
 * cu_seqlens, stride_batch then unused). Zero strides broadcast: one scale per token and kv head
 * is [B, Skv, Hkv] (or the page pool's [num_pages, page_size, Hkv]); one per kv head is
 * stride_batch = stride_seq = 0, stride_head = 1; one for the whole tensor all strides 0. The
 * scales of every key within the length of a sequence that has queries (keys a window or a
 * mask hides too) must be finite and > 0: fai_run refuses the run otherwise, naming the
 * scale. Keys and values may have scales of different shapes. */
typedef struct fai_scale {
    float *data;
    int64_t stride_batch, stride_seq, stride_head;
} fai_scale;

/* Per-channel scales of a quantized K (fai_problem.k_channel_scales), f32: the scale of channel
 * d of kv head h lives at data[h*stride_head + d] (stride_head 0: the same channels' scales for
 * every head). Every scale must be finite and > 0 (checked unless the problem trusts its
 * scales). */
typedef struct fai_channel_scale {
    float *data;
    int64_t stride_head;
} fai_channel_scale;

typedef struct fai_tensors {
    fai_tensor q, k, v; /* inputs, read only */
    fai_tensor o;       /* output; every row is written, rows past a sequence's length with 0 */
    /* Optional LSE output, f32: element (b, h, i) at data[b*stride_batch + h*stride_head +
     * i*stride_seq] ([B, Hq, Sq] is stride_batch = Hq*Sq, stride_head = Sq, stride_seq = 1);
     * for packed queries i is the packed row and stride_batch is ignored. data NULL skips it.
     * Fully masked rows and rows past the length get -inf.
     * NaN and Inf: positions a row cannot see never reach it. A NaN score the row sees (from
     * Q, K or an additive mask) makes its O and LSE NaN, also when all its visible scores are
     * NaN (never the 0 / -inf of a masked row); a +Inf score does the same, -Inf scores weigh
     * 0 (all -Inf: an empty row, 0 / -inf). Inf or NaN in V reaches O, not the LSE, of the rows
     * that weigh that key above 0. Scores are f32, formed as scale x (q.k) with q.k summed in
     * f32 (with a quantized K's scale in q.k): one whose q.k or scaled value leaves f32's range
     * (past 3.4e38; q.k can, where a small scale would have brought it back) is +-Inf and
     * follows these rules, and products q_d k_d below f32's normal range (2^-126) keep fewer
     * bits, which a scale above 1 then magnifies (up to |scale| D 2^-149 on a score). f16
     * output saturates finite values at +-65504 and keeps +-Inf and NaN. */
    fai_tensor lse;
    /* Used when the plan's mask_kind is not NONE, and refused (data not NULL) when it is. */
    fai_mask mask;
    /* Paged only: [batch, pages_per_seq], refused (not NULL) for dense K/V. */
    const int32_t *block_table;
    int64_t block_table_stride; /* elements between rows; 0 means pages_per_seq */
    /* ALiBi slopes, f32 [heads_q], finite: required when the problem has alibi, and refused
     * (not silently ignored) when it has not. */
    const float *alibi_slopes;
    /* Sink logits, f32 [heads_q], finite or -inf: required when the problem has sinks, and
     * refused when it has not. */
    const float *sinks;
    /* Scales of a quantized K and V: required when k.dtype (v.dtype) is int8, e4m3 or e5m2, and
     * refused (data not NULL) otherwise. */
    fai_scale k_scale, v_scale;
    /* K's per-channel scales: required when the problem has k_channel_scales, and refused (data
     * not NULL) when it has not. */
    fai_channel_scale k_channel_scale;
} fai_tensors;

/* Strides of a contiguous [B, S, H, Dlast] tensor (the default BSHD layout). A stride whose
 * product passes int64 is INT64_MAX, which fai_run refuses (FAI_ERR_OVERFLOW) wherever it
 * steps over more than one element (a batch stride with one sequence is never followed). */
FAI_API fai_tensor fai_tensor_bshd(void *data, fai_dtype dtype, int64_t seq, int64_t heads,
                                   int64_t dim);

/* ---------------------------------------------------------------------------------------------
 * Plan and run
 * ------------------------------------------------------------------------------------------- */

typedef struct fai_plan fai_plan;
typedef struct fai_pool fai_pool;

/* Validates every field of the problem, chooses the tile shape, counts the valid kv tiles of
 * every (batch, kv-head group, q tile) unit under the masks and lengths, splits the units across
 * workers and sizes the workspace. On success *plan owns a new plan (free it with fai_plan_free)
 * and FAI_OK is returned; on failure *plan is NULL, the status says why and fai_last_error()
 * names the field and the value. The problem and its arrays are only read during the call.
 * The micro-kernel table is the best the CPU runs, or the one FAI_ISA names (amx, avx512, avx2,
 * neon, ref, the emulations amx-emu and amx-emu-avx512; auto: the best); FAI_AMX=0 keeps the amx
 * table off and FAI_BF16_DOT=0 or 1 turns bf16 dot products off or on (switches for comparisons,
 * read by the first plan of the process), and any value of theirs other than 0, 1 or empty is
 * refused (FAI_ERR_INVALID_ARG). Thread-safe. */
FAI_API fai_status fai_plan_create(const fai_problem *problem, fai_plan **plan);

/* Releases a plan. NULL is a no-op. No run may be using the plan. */
FAI_API void fai_plan_free(fai_plan *plan);

/* Bytes of workspace fai_run needs for this plan, at any alignment (room to align it to a cache
 * line is included).
 * May be called concurrently. */
FAI_API size_t fai_plan_workspace_size(const fai_plan *plan);

/* Computes attention for the plan's problem. Checks the tensors against the plan (dtypes,
 * pointers aligned to their elements, strides not negative, the head dimension contiguous
 * (stride_dim 1), every row of O and element of LSE in a place of its own (its dimensions, by
 * increasing stride, each past all that the smaller ones span: interleaved dimensions are
 * refused even where no two rows would meet), O and LSE sharing no
 * memory with each other nor with anything the run reads (Q, K, V, the mask, the scales, the
 * ALiBi slopes, the sinks, the block table: the spans from each one's first byte to its last
 * are compared), and every block-table entry of a page that holds keys
 * inside the pool; entries past a sequence's length are never read) before anything is read or
 * written; on failure nothing is written. Allocates nothing: all scratch lives in the caller's
 * workspace of at least fai_plan_workspace_size(plan) bytes (NULL is accepted only when that size
 * is 0), at any alignment (the size includes the bytes to align it to a cache line). Runs the
 * plan's workers on the plan's pool (the process-wide default pool unless fai_plan_set_pool chose
 * another). Thread-safety: a plan is read-only, so several threads may run one plan at once, each
 * with its own tensors and workspace; runs on one pool are served one after another. */
FAI_API fai_status fai_run(const fai_plan *plan, const fai_tensors *tensors, void *workspace,
                           size_t workspace_size);

/* Stages of the kernel, for fai_run_profiled: the seed's four (QK, online softmax, PV, rescale
 * O) and the data movement around them. */
typedef enum fai_stage {
    FAI_STAGE_PACK_Q = 0, /* a unit's Q rows gathered (and converted) into its tile */
    FAI_STAGE_PACK_KV,    /* K/V rows addressed through pages, converted into tiles */
    FAI_STAGE_QK,         /* S = scale Q K^T */
    FAI_STAGE_SOFTMAX,    /* masks, running max and sum, P */
    FAI_STAGE_RESCALE,    /* O *= exp(m_old - m_new) */
    FAI_STAGE_PV,         /* O += P V */
    FAI_STAGE_STORE,      /* O / l and LSE written */
    FAI_STAGE_MERGE,      /* split-KV parts stored and merged */
    FAI_STAGE_OTHER,      /* the walk over units and tiles */
    FAI_STAGE_COUNT
} fai_stage;

/* Short name of a stage ("pack_q", "pack_kv", "qk", "softmax", "rescale", "pv", "store",
 * "merge", "other"); "?" for an unknown value. */
FAI_API const char *fai_stage_name(fai_stage stage);

/* Where a run's time went: the seed's question "who waits for whom", on a CPU. */
typedef struct fai_profile {
    double wall_seconds;                   /* the whole call, as the caller sees it */
    double stage_seconds[FAI_STAGE_COUNT]; /* summed over the threads */
    int64_t threads;                       /* threads that ran the workers */
    /* per thread (in the order the pool's threads joined the run, the caller first): time spent
     * in its workers; the rest of wall_seconds it waited (for a wake-up, or for the slowest
     * thread). A thread that woke after the others had taken every worker stays at 0. */
    double busy_seconds[FAI_MAX_WORKERS];
} fai_profile;

/* fai_run, timing each stage of every tile with the CPU's cycle counter (a copy of the kernel
 * built with the timers in: fai_run itself carries none) and each thread's busy time. The output
 * is the same as fai_run's. *profile is overwritten. */
FAI_API fai_status fai_run_profiled(const fai_plan *plan, const fai_tensors *tensors,
                                    void *workspace, size_t workspace_size, fai_profile *profile);

/* fai_run_profiled, timing a run with some of the seed's stages not computed, so that what the
 * others cost without them can be read: a stage that runs on a CPU's matrix unit (QK and PV on
 * the matrix engine) and one on its vector unit (the softmax) that cost less together than one
 * after the other hide each other's time (`fai bench --profile` reports it). left_out is any
 * combination of the FAI_LEAVE_OUT_ bits below; anything else is refused. The stages left out
 * leave 0 scores (QK), the max unmoved and no masks (the softmax: PV weighs keys by what the
 * scores hold) and O unchanged (PV). Whatever is left out, the run writes nothing to the tensors
 * (O and LSE keep their contents): its numbers are not the attention's, only its times count.
 * left_out 0 computes everything and writes nothing. */
#define FAI_LEAVE_OUT_QK (1u << FAI_STAGE_QK)
#define FAI_LEAVE_OUT_SOFTMAX (1u << FAI_STAGE_SOFTMAX)
#define FAI_LEAVE_OUT_PV (1u << FAI_STAGE_PV)
FAI_API fai_status fai_run_profiled_without(const fai_plan *plan, const fai_tensors *tensors,
                                            void *workspace, size_t workspace_size,
                                            unsigned left_out, fai_profile *profile);

/* The checks fai_run makes of the tensors, alone: FAI_OK if fai_run would accept them. The
 * block-table entries are checked even when the plan trusts them, so a caller can check a table
 * once and then run trusted. Reads the block table, writes nothing. Thread-safe. */
FAI_API fai_status fai_check_tensors(const fai_plan *plan, const fai_tensors *tensors);

/* ---------------------------------------------------------------------------------------------
 * Plan inspection
 * ------------------------------------------------------------------------------------------- */

typedef struct fai_plan_info {
    int64_t tile_q;         /* qSeqBase: query positions per tile */
    int64_t tile_kv;        /* kvSeqBase: keys per tile */
    int64_t tile_rows;      /* rows of a Q tile: tile_q x the q heads of a unit (the GQA group,
                               or a slice of at most 64 heads of a larger group) */
    int64_t units;          /* (batch, kv-head group, q tile) units */
    int64_t workers;        /* pieces the units are split into */
    int64_t threads;        /* threads that run them */
    int64_t total_weight;   /* valid (q tile, kv tile) pairs over all units */
    double imbalance;       /* max worker weight / mean worker weight (1.0 is perfect) */
    int split_kv;           /* nonzero when some unit's kv range is split across workers */
    int64_t split_units;    /* units computed in several parts */
    int64_t partials;       /* partial results those parts write and merge */
    int64_t visible_pairs;  /* (query, key) pairs left by causal, window and lengths, all heads */
    size_t workspace_bytes; /* fai_plan_workspace_size() */
    /* The tile against this core's caches (as read from the OS): the bytes the inner loops keep
     * hot and the per-thread tile slice (for decode tiles: two tiles of K/V rows in flight),
     * their capacities, and whether the tile fits them (an override may not). */
    int64_t l1d_bytes, l1d_capacity, l2_bytes, l2_capacity;
    int tile_fits;
    const char *isa; /* micro-kernel table in use: "amx", "avx512", "avx2", "neon", "ref",
                        "amx-emu", "amx-emu-avx512" */
    /* Where the tile came from: "user" (tile_q / tile_kv given), "tuned" (the tuning cache
     * holds a tile for this CPU and shape class) or "heuristic" (the planner's rule). */
    const char *tile_source;
    /* The shape class the tuning cache files this plan under (head dims, GQA group, dtypes,
     * query and key length ranges, causal, paged), e.g.
     * "d128.dv128.g4.f32.f16.f16.q2048.kv2048.causal.dense". The string lives in the plan. */
    const char *tile_class;
    /* How O = P V multiplies P: 0 in f32 (the vector tables' FMAs); in bf16 on the matrix engine
     * ("amx") or on bf16 dot products (a CPU with AVX512_BF16, all of Q, K and V bf16), as 2
     * parts, hi + lo, within 2^-16 of P (the default), or 1, P rounded to bf16 (round_p_bf16). */
    int p_parts;
    /* kv tiles in flight per unit (fai_problem.pipeline_tiles): 1 or 2 on the matrix engine, 1
     * elsewhere */
    int pipeline_tiles;
} fai_plan_info;

/* Fills *info. Thread-safe. */
FAI_API fai_status fai_plan_get_info(const fai_plan *plan, fai_plan_info *info);

/* Worker w's contiguous unit range [unit_begin, unit_end) and its weight (valid kv tiles). All
 * units' valid kv tiles, in unit order, form one line [0, total_weight); the worker computes the
 * tiles [line_begin, line_end) of it. With split-KV the first and last unit of a range may be
 * shared with the neighbouring workers. */
typedef struct fai_worker_range {
    int64_t unit_begin, unit_end;
    int64_t weight;
    int64_t line_begin, line_end;
} fai_worker_range;

FAI_API fai_status fai_plan_get_worker(const fai_plan *plan, int64_t worker,
                                       fai_worker_range *range);

/* Unit u: its batch, kv head, q heads [head_q_begin, head_q_begin + heads_q), first query
 * position, query positions and valid kv tiles. */
typedef struct fai_unit_info {
    int64_t batch, head_kv, q_begin, q_len;
    int64_t kv_tile_begin, kv_tiles;
    int64_t head_q_begin, heads_q;
} fai_unit_info;

FAI_API fai_status fai_plan_get_unit(const fai_plan *plan, int64_t unit, fai_unit_info *info);

/* ---------------------------------------------------------------------------------------------
 * Tuning cache
 *
 * A plain text file of measured tile choices, one line per (CPU model, micro-kernel table,
 * shape class): `fai tune` measures the tiles that fit a shape and stores the fastest here, and
 * fai_plan_create uses it for every later plan of that class unless the problem sets
 * ignore_tuning or gives its own tile. The file is $FAI_TUNE_CACHE if set ("off" disables the
 * cache), else $XDG_CACHE_HOME/fai/tiles.tsv, else $HOME/.cache/fai/tiles.tsv. It is read once,
 * by the first plan of the process (and again by fai_tuning_reload); lines that do not parse
 * are ignored, and so is anything at the path that is not a regular file (and past its first
 * MiB). Stores of several processes at once take turns (a lock file beside it, `.lock`).
 * ------------------------------------------------------------------------------------------- */

/* Stores tile_q x tile_kv as the tuned tile of the plan's CPU and shape class (replacing an
 * earlier one), creating the directory if needed, and makes later plans of this process use it.
 * FAI_ERR_INVALID_ARG names a bad argument, a tile out of range (1..4096), a disabled cache or
 * a path too long (with the variable it came from); FAI_ERR_IO an unwritable (read-only) or
 * unreadable file, a path ending in '/', or something other than a regular file at the path,
 * which is left as it was. A symbolic link is written through. Thread-safe. */
FAI_API fai_status fai_tuning_store(const fai_plan *plan, int64_t tile_q, int64_t tile_kv);

/* Whether fai_tuning_store could write the cache file now, checked without writing anything:
 * the path set and not a directory's name, the file fai's own (or absent, with a directory it
 * can be made in), writable. FAI_OK, or the error (and message) the store would give. For tools
 * that measure before they store. Thread-safe. */
FAI_API fai_status fai_tuning_check_store(void);

/* Forgets what was read and reads the cache file again (at the path the environment now gives)
 * on the next plan. Thread-safe. */
FAI_API void fai_tuning_reload(void);

/* The cache file's path as the environment gives it now, or "" when the cache is disabled, no
 * directory is known or the path is too long. The string is valid until the next call from this
 * thread. */
FAI_API const char *fai_tuning_path(void);

/* ---------------------------------------------------------------------------------------------
 * KV caches: writing new tokens, and memory for the cache
 * ------------------------------------------------------------------------------------------- */

/* Writes the keys (or the values) of `tokens` new tokens into a cache, as serving engines append
 * each step's K and V before attending (vLLM's reshape_and_cache). Call it once for K and once
 * for V.
 *
 * src: the new rows, [tokens, heads, dim] by src->stride_seq (between tokens) and stride_head
 *      (stride_batch unused), f32, f16 or bf16.
 * cache: `blocks` blocks of `block_rows` rows, [blocks, block_rows, heads, dim] by its strides
 *      (stride_batch between blocks): a page pool (blocks = num_pages, block_rows = page_size)
 *      or a dense [B, Skv, Hkv, D] cache (blocks = B, block_rows = Skv); any fai_dtype but Q's.
 * slots: int64 [tokens]: token t goes to row slots[t] % block_rows of block slots[t] /
 *      block_rows (vLLM's slot mapping); a slot of -1 skips the token (padding).
 * scale: required for an int8, e4m3 or e5m2 cache and refused otherwise (NULL), addressed by
 *      (block, row, head) like the cache, the shape fai_run will read it with:
 *        per token (stride_seq != 0): each token and head gets scale = max |x| / qmax (qmax =
 *          127, 448, 57344 for int8, e4m3, e5m2; 1 for a row of zeros; the smallest subnormal
 *          where max |x| / qmax rounds to 0), written here;
 *        fixed (stride_batch = stride_seq = 0): the given scales are read and values beyond
 *          qmax x scale saturate to +-qmax.
 *      Values are rounded to nearest even; f16 and bf16 caches round as fai_run's output does.
 * pool: the threads that write (NULL: the process-wide default pool).
 * Everything is checked before anything is written: shapes, dtypes, every slot (inside the
 * cache, no two tokens in one slot), strides that give every row of the cache and every
 * per-token scale its own place, a source and scales (per token or fixed) apart from the cache
 * in memory, and for quantized caches every source value of the tokens written finite (skipped
 * tokens are not read) and every fixed scale finite and > 0; on failure
 * nothing is written and fai_last_error() names the field and the value. The bytes written do
 * not depend on the number of threads. A K cache with channel scales (fai_problem.k_channel_scales)
 * is written from the tokens divided by them: each token is quantized with its own scale here. */
FAI_API fai_status fai_cache_write(int64_t tokens, int64_t heads, int64_t dim,
                                   const fai_tensor *src, const int64_t *slots, int64_t blocks,
                                   int64_t block_rows, const fai_tensor *cache,
                                   const fai_scale *scale, fai_pool *pool);

/* Memory for a K/V cache or a scale pool: `bytes` rounded up to whole 2 MiB pages, aligned to
 * 2 MiB, with transparent huge pages asked for, and first touched by the threads of `pool`
 * (NULL: the default pool), each its own share, so the pages sit near the threads that read
 * them and decode streams from huge pages (fewer TLB misses than malloc's 4 KiB pages). The
 * memory is zeroed, and committed by that first touch: where the system grants the mapping but
 * not the memory (overcommit, a cgroup's limit), the out-of-memory killer may act during the
 * call, as on any first write. On failure *memory is NULL. Free it with fai_cache_free and the
 * same byte count. */
FAI_API fai_status fai_cache_alloc(size_t bytes, fai_pool *pool, void **memory);

/* Releases memory from fai_cache_alloc; `bytes` as given to it. NULL is a no-op. */
FAI_API void fai_cache_free(void *memory, size_t bytes);

/* ---------------------------------------------------------------------------------------------
 * Merging partial results
 * ------------------------------------------------------------------------------------------- */

/* Merges `count` attention results computed over disjoint sets of keys (shared prefixes,
 * cascades, chunked contexts, sequence-parallel attention) into the result over their union:
 *     m = max_p LSE_p,  w_p = e^(LSE_p - m),  O = sum_p w_p O_p / sum_p w_p,  LSE = m + log sum w_p
 * A part with LSE = -inf (its keys were all masked) contributes nothing; a row where every part
 * is -inf gets O = 0 and LSE = -inf. A part whose LSE is NaN or +inf makes the row's O and LSE
 * NaN (with +inf the weights are inf / inf), and Inf or NaN in a part's O reaches the row (f16
 * output keeps +-Inf, as fai_run does).
 * Accumulates in double; the parts may be f32, f16 or bf16, and so may the output.
 * o_parts[p] and o_out are [batch, seq, heads, head_dim] by their strides (stride_batch is used
 * as given: for packed rows pass batch = 1); lse_parts[p] and lse_out are f32 with element
 * (b, i, h) at data[b*stride_batch + i*stride_seq + h*stride_head] (lse_out.data NULL skips it).
 * The output may be one of the parts itself (the same data, dtype and strides: each row is read
 * from every part before it is written, so a running result can absorb the next part in place),
 * and may not overlap the parts otherwise: checked by the bytes each spans (an output interleaved
 * with a part without touching it is refused too), with each output row its own place (as
 * fai_run places O's rows: interleaved dimensions are refused) and O and LSE apart. A 16-bit output
 * is the double result rounded once. Nothing is written on failure. Thread-safe. Sinks: the merge
 * treats every part's LSE as the log of its whole denominator, so parts computed with
 * fai_problem.sinks would each bring the sink and the merged row would count it once per part (its
 * O too small by that weight). Merge parts computed without sinks, then call fai_apply_sinks once
 * on the result. */
FAI_API fai_status fai_merge_states(int64_t count, const fai_tensor *o_parts,
                                    const fai_tensor *lse_parts, int64_t batch, int64_t seq,
                                    int64_t heads, int64_t head_dim, const fai_tensor *o_out,
                                    const fai_tensor *lse_out);

/* Adds attention sinks to a result computed without them, in place: for each row of query head
 * h, LSE' = log(exp(LSE) + exp(sinks[h])) and O' = O exp(LSE - LSE'). This is the sink of
 * fai_problem.sinks counted once, so the parts of a split computation (shards, cascades) are
 * computed without sinks, merged by fai_merge_states, and then given their sinks here. A row
 * with LSE = -inf (it saw nothing) gets LSE' = sinks[h] and keeps O = 0; a NaN LSE stays NaN and
 * a +inf LSE stays +inf with O kept (the sink weighs nothing beside it); a sink of -inf changes
 * nothing. o and lse are laid out as for fai_merge_states (lse is required:
 * the rescaling needs it); sinks is f32 [heads], finite or -inf. Nothing is written on failure.
 * Thread-safe. */
FAI_API fai_status fai_apply_sinks(const float *sinks, int64_t batch, int64_t seq, int64_t heads,
                                   int64_t head_dim, const fai_tensor *o, const fai_tensor *lse);

/* ---------------------------------------------------------------------------------------------
 * Score modifiers
 * ------------------------------------------------------------------------------------------- */

/* Fills slopes[0 .. heads) with the standard ALiBi slopes (Press et al.; BLOOM, MPT): for heads
 * a power of two n, slope h = 2^(-8 (h + 1) / n); otherwise the slopes of the largest power of
 * two n below heads, followed by every other slope of 2n (2^(-4 (2k + 1) / n), k = 0, 1, ...).
 * FAI_ERR_INVALID_ARG for heads < 1 or slopes NULL. Thread-safe. */
FAI_API fai_status fai_alibi_slopes(int64_t heads, float *slopes);

/* ---------------------------------------------------------------------------------------------
 * Thread pools
 * ------------------------------------------------------------------------------------------- */

/* Creates a pool of `threads` threads in all (the caller of fai_run is one of them, so threads-1
 * are started; 0 means one per online CPU). Threads sleep when idle. */
FAI_API fai_status fai_pool_create(int64_t threads, fai_pool **pool);

/* Stops and joins the pool's threads. No run may be using it. NULL is a no-op.
 * After fork, a child has none of the threads of the pools its parent made: its runs on them
 * are done by the calling thread alone, with the same results, and fai_pool_free there only
 * releases the memory. The default pool is started anew in the child on first use. */
FAI_API void fai_pool_free(fai_pool *pool);

/* Makes the plan run on `pool` (NULL: the process-wide default pool, created on first use with
 * one thread per online CPU, or half as many, and so on, where the system will not start that
 * many). The pool must outlive every run of the plan. Not thread-safe with
 * concurrent runs of the same plan. */
FAI_API void fai_plan_set_pool(fai_plan *plan, fai_pool *pool);

/* Announces a run of the plan: its pool's sleeping threads wake now and poll for the next run
 * for up to a millisecond instead of sleeping. A caller with work to do before fai_run (a
 * binding converting its arguments) overlaps their wake-up, which costs tens of microseconds on
 * some systems, with that work. A hint only: a run needs no announcement, and an announcement
 * needs no run (the threads go back to sleep). Plans with one thread and NULL are no-ops. */
FAI_API void fai_plan_wake(const fai_plan *plan);

/* Number of online CPUs as the OS reports them (at least 1). */
FAI_API int64_t fai_cpu_count(void);

/* The size in bytes of this CPU's cache of `level`, read once from the OS (sysfs, then sysconf):
 * 1, the per-core L1 data cache, and 2, the per-core L2, as the planner sizes its tiles by them
 * (32 KiB and 1 MiB where the OS does not say); 3, the L3 the core shares, for context only (0
 * where the OS does not say). Any other level gives 0. */
FAI_API int64_t fai_cpu_cache_bytes(int level);

#ifdef __cplusplus
}
#endif

#endif /* FAI_H */

/* The micro-kernel table (the context): one entry per stage of the tile loop. The kernel driver
 * never names a micro-kernel; it calls through the plan's table. Every entry works on a whole
 * tile, never on one element. A table with a matrix engine adds the mx_ entries below, with
 * layouts of their own (bf16 operands for the tile unit).
 *
 * Layouts of the vector tables (all f32). m is the rows of the Q tile (query positions x group
 * heads), n the keys of the kv tile. Scores are kept transposed, S^T [n, ld_s] with ld_s >= m a
 * multiple of the vector width: the softmax then reduces over keys with whole vectors of query rows
 * (no horizontal reductions), and the QK and PV kernels broadcast one scalar against vectors of a
 * packed tile:
 */
/* clang-format off */
/*   Q^T  [d, ld_s]     packed once per unit, transposed, columns [m, ld_s) zero
 *   K    [n, d]        the kv tile's keys, row-major
 *   V    [n, ld_o]     the kv tile's values, columns [dv, ld_o) zero
 *   S^T  [n, ld_s]     scores, then P in place
 *   O    [m, ld_o]     the f32 accumulator */
/* clang-format on */
#ifndef FAI_UKR_H
#define FAI_UKR_H

#include "fai.h"

#include <stdint.h>

/* The range of values bf16 dot and tile products take without losing a product to their reading
 * subnormal inputs as zero (why: fai__dot_products_scale_ok in fai_internal.h), as bf16 bit
 * patterns with the sign cleared: Q values 0 or in [FAI_BF16_DOT_Q_LOW, FAI_BF16_DOT_HIGH)
 * (2^-100 and 2^80), V values below FAI_BF16_DOT_HIGH. Inf and NaN lie above it. */
#define FAI_BF16_DOT_Q_LOW 0x0D80 /* 2^-100: exponent field 27 */
#define FAI_BF16_DOT_HIGH 0x6780  /* 2^80: exponent field 207 */

/* exp(r) = 1 + r + r^2 (C2 + r (C3 + r (C4 + r (C5 + r C6)))) for |r| <= ln2 / 2, the
 * coefficients fitted for relative error (3.1e-9 in exact arithmetic, against 5e-9 for the
 * degree-7 Taylor polynomial): the softmax's exp on every table. */
#define FAI_EXP_C2 4.999999404e-01f
#define FAI_EXP_C3 1.666652113e-01f
#define FAI_EXP_C4 4.166838899e-02f
#define FAI_EXP_C5 8.368710056e-03f
#define FAI_EXP_C6 1.381461276e-03f

/* Lanes of the matrix engine's running row sums (its vector width on every table). */
#define FAI_MX_SUM_LANES 16

/* How far ahead of the row being computed the decode kernels prefetch K/V rows: about
 * FAI_PREFETCH_BYTES of rows (a DRAM latency's worth of the rows' stream; short rows of int8 or
 * fp8 are computed faster per byte than f16 or f32 ones, so a fixed count of rows would arrive
 * late), at least 16 rows and at most FAI_PREFETCH_ROWS, the most the row lists carry past a
 * tile. The rows go to L2, not L1: a prefetch into L1 holds one of the core's few L1 miss
 * buffers until its line arrives from memory, and a DRAM latency's worth of rows asked into L1
 * filled them, so the stream waited on them; the L2 keeps more misses in flight, and a row's
 * loads then find it a few cycles away. */
#ifndef FAI_PREFETCH_LOCALITY
#define FAI_PREFETCH_LOCALITY 2
#endif
#ifndef FAI_PREFETCH_BYTES
#define FAI_PREFETCH_BYTES 6144
#endif
#ifndef FAI_PREFETCH_ROWS
#define FAI_PREFETCH_ROWS 64
#endif
/* The rows of the other stream (fai_row_fetch) go to L2: a tile's worth arrives well before it
 * is read, and into L1 it would push out the rows being computed. */
#ifndef FAI_FETCH_LOCALITY
#define FAI_FETCH_LOCALITY 2
#endif

/* How many rows of row_bytes ahead to prefetch (see FAI_PREFETCH_BYTES). */
static inline int64_t fai__prefetch_ahead(int64_t row_bytes) {
    const int64_t rows = FAI_PREFETCH_BYTES / (row_bytes > 0 ? row_bytes : 1);
    return rows < 16 ? 16 : rows > FAI_PREFETCH_ROWS ? FAI_PREFETCH_ROWS : rows;
}

/* The prefetch helpers are always inlined: GCC finds that a function whose only effect is a
 * prefetch changes nothing, and deletes the calls it has not inlined by then (a helper grown past
 * its early inliner's size lost every prefetch: a decode step with its K/V in cache ran 1.1-1.5x
 * slower). */
#define FAI_PREFETCH_HELPER static inline __attribute__((always_inline))

FAI_PREFETCH_HELPER void fai__prefetch_row(const void *row, int64_t bytes) {
    for (int64_t offset = 0; offset < bytes; offset += 64)
        __builtin_prefetch((const char *)row + offset, 0, FAI_PREFETCH_LOCALITY);
}

/* How a decode kernel splits its m query rows: blocks of 4, then the 1 or 2 rows left (returned)
 * in blocks of their own, which read the tile's K/V rows again from the cache; 3 left join the
 * 4-row blocks, one row repeated costing less than a second pass. */
static inline int64_t fai__decode_rows_left(int64_t m) { return m % 4 == 3 ? 0 : m % 4; }

/* The rows a decode kernel asks into L2 while it computes a tile: those of the stream its caller
 * reads next (during QK the tile's V rows, during PV the K rows of the tile computed after this
 * one). Decode alternates between the two streams; with each kernel reading only its own, the
 * other waited on memory at every switch, and a tile's worth of rows asked for at once overruns
 * the misses a core keeps in flight. Spread over the keys, one row for each key computed, both
 * streams stay in flight: the caches' counterpart of the seed's double-buffered K/V. A table may
 * ignore it (the reference does): it changes no result. */
typedef struct fai_row_fetch {
    const void *const *rows;
    int64_t count;
    int64_t row_bytes;
} fai_row_fetch;

/* The share of `fetch` that goes with keys [j_begin, j_end) of a kernel's n: row j for key j,
 * and the rows past n with its last keys. */
FAI_PREFETCH_HELPER void fai__fetch_for_keys(const fai_row_fetch *fetch, int64_t j_begin,
                                             int64_t j_end, int64_t n) {
    if (!fetch) return;
    const int64_t end = j_end < n ? (j_end < fetch->count ? j_end : fetch->count) : fetch->count;
    for (int64_t j = j_begin; j < end; j++)
        for (int64_t offset = 0; offset < fetch->row_bytes; offset += 64)
            __builtin_prefetch((const char *)fetch->rows[j] + offset, 0, FAI_FETCH_LOCALITY);
}

/* The score modifiers of one tile (fai_problem.softcap and alibi), for the mods_ entries: each
 * score s of row r and key c becomes
 *     s = s * scale;   s = softcap * tanh(s / softcap) if softcap > 0;
 *     s = s - slope[r] * |c + offset[r]|                 if slope is not NULL
 * offset[r] is the tile's first key minus the query's position on the key axis, so |c +
 * offset[r]| is the query-key distance. */
typedef struct fai_score_mods {
    float scale;         /* 1 when the scores are scaled already */
    float softcap;       /* 0: none */
    const float *slope;  /* ALiBi slopes per row, or NULL */
    const float *offset; /* per row, as above */
} fai_score_mods;

typedef struct fai_cntx {
    const char *name;
    /* Vector width in f32 lanes: ld_s and ld_o are multiples of it. */
    int64_t simd_width;

    /* Packs m rows of d elements of `dtype` (rows[r] points at row r) transposed into f32
     * q_t [d, ld_s], zero-filling columns [m, ld_s). */
    void (*pack_q)(float *q_t, int64_t ld_s, const void *const *rows, int64_t m, int64_t d,
                   fai_dtype dtype);

    /* Converts n rows of `dim` elements of `dtype` into f32 dst [n, ld_dst], zero-filling
     * columns [dim, ld_dst), row r times scales[r] when scales is given (a quantized dtype's
     * dequantization). Packs the K and V tiles. Returns nonzero when every value is finite:
     * then a masked tile's PV may run dense (P = 0 times a finite V adds nothing). */
    int (*pack_rows)(float *dst, int64_t ld_dst, const void *const *rows, int64_t n, int64_t dim,
                     fai_dtype dtype, const float *scales);

    /* Stage 1, QK: s_t [n, ld_s] = scale * k [n, d] . q_t [d, ld_s] (all ld_s columns). */
    void (*qk)(float *s_t, int64_t ld_s, const float *q_t, const float *k, int64_t n, int64_t d,
               float scale);

    /* Stage 2, online softmax, for each query row i < m (a column of s_t): the new running max
     * m' = max(row_max, max_j s), s overwritten by P = exp(s - m'), row_sum = row_sum * alpha +
     * sum_j P with alpha = exp(row_max - m') returned in row_alpha, row_max = m'. A row still all
     * -inf keeps row_max = -inf, P = 0 and alpha = 1. Masked entries (-inf) give P = 0 exactly.
     * row_max, row_sum and row_alpha have ld_s entries; columns [m, ld_s) are scratch. */
    void (*softmax)(float *s_t, int64_t ld_s, int64_t m, int64_t n, float *row_max, float *row_sum,
                    float *row_alpha);

    /* Stage 4 (applied before PV of the same tile), rescale O: o [m, ld_o] rows with alpha != 1
     * are multiplied by alpha. */
    void (*rescale_o)(float *o, int64_t ld_o, int64_t m, const float *row_alpha);

    /* Stage 3, PV: o [m, ld_o] += p_t [n, ld_s]^T . v [n, ld_o]. With `masked` set (the tile had
     * masked positions) a zero P adds nothing, even where V holds NaN or Inf: positions a row
     * cannot see never reach it. */
    void (*pv)(float *o, int64_t ld_o, const float *p_t, int64_t ld_s, const float *v, int64_t m,
               int64_t n, int masked);

    /* Small Q tiles (decode): K and V are read straight from their rows (converted on the fly),
     * without packing; Q is row-major q [m, ld_q] (ld_q = d padded to the vector width,
     * zero-filled), and the scores are row-major s [m, ld_n] (ld_n = the kv tile padded to the
     * vector width), so the softmax reduces whole vectors of keys. Rows hold d (dv) elements:
     * nothing past them is read.
     *   qk_rows:      s = scale * q . k_rows^T, times key_scale[j] in column j when key_scale
     *                 is given (n scales: a quantized K's), and -inf in columns [n, ld_n).
     *   softmax_rows: the online softmax of `softmax` on row-major s, over all ld_n columns;
     *                 with p_scale (ld_n scales: a quantized V's), P is stored times p_scale[j]
     *                 after it joined the row sum, so PV takes V's codes as they are.
     *   pv_rows:      o [m, ld_o] += p . v_rows, with the `masked` rule of pv.
     * Each scale is one more rounded product, the same a separate pass over s would make, folded
     * into a pass that already runs.
     * k_rows / v_rows hold n + rows_ahead pointers: the rows after the tile's n (up to
     * FAI_PREFETCH_ROWS, the next tile's first rows, across pages) are only prefetched, a fixed
     * distance ahead of the rows being computed, so the stream never waits on memory. `fetch`
     * (or NULL) names the other stream's rows to ask for along the way (fai_row_fetch). */
    void (*qk_rows)(float *s, int64_t ld_n, const float *q, int64_t ld_q, int64_t m,
                    const void *const *k_rows, int64_t rows_ahead, const fai_row_fetch *fetch,
                    fai_dtype k_dtype, int64_t n, int64_t d, float scale, const float *key_scale);
    void (*softmax_rows)(float *s, int64_t ld_n, int64_t m, float *row_max, float *row_sum,
                         float *row_alpha, const float *p_scale);
    void (*pv_rows)(float *o, int64_t ld_o, const float *p, int64_t ld_n, int64_t m,
                    const void *const *v_rows, int64_t rows_ahead, const fai_row_fetch *fetch,
                    fai_dtype v_dtype, int64_t n, int64_t dv, int masked);

    /* Writes dim f32 values times mul to dst in dtype, bit for bit as fai__store_element does
     * (round to nearest even; f16 saturates finite values at +-65504 and keeps +-Inf and NaN). */
    void (*store_row)(void *dst, fai_dtype dtype, const float *src, int64_t dim, float mul);

    /* Optional (NULL when the CPU lacks bf16 dot products): QK for bf16 Q and K with an even d,
     * at the bf16 dot-product rate. pack_q_bf16 packs Q^T in pairs, q_pairs [d/2, ld_s, 2],
     * returning 0 if a value of Q is out of the products' range (FAI_BF16_DOT_Q_LOW; the caller
     * then packs Q for qk); qk_bf16 reads the K rows where they are and writes s_t as qk does. */
    int (*pack_q_bf16)(uint16_t *q_pairs, int64_t ld_s, const void *const *rows, int64_t m,
                       int64_t d);
    void (*qk_bf16)(float *s_t, int64_t ld_s, const uint16_t *q_pairs, const void *const *k_rows,
                    int64_t n, int64_t d, float scale);
    /* Optional, beside qk_bf16: qk_rows for bf16 Q and K (decode), at the same rate; q holds the
     * bf16 values of Q in f32 as qk_rows has it. Returns 0, writing nothing, if a value of Q is
     * out of the products' range (FAI_BF16_DOT_Q_LOW): qk_rows then does the tile. */
    int (*qk_rows_bf16)(float *s, int64_t ld_n, const float *q, int64_t ld_q, int64_t m,
                        const void *const *k_rows, int64_t rows_ahead, const fai_row_fetch *fetch,
                        int64_t n, int64_t d, float scale);

    /* Optional, beside qk_bf16: PV for bf16 V at the bf16 dot-product rate. pack_v_bf16 packs n
     * V rows in key pairs, v_pairs [ceil(n/2), ld_o, 2] (lane x of pair q: V[2q][x], V[2q+1][x];
     * columns [dv, ld_o) and a key after an odd n zero), returning nonzero when every value is
     * finite and below FAI_BF16_DOT_HIGH. pv_bf16 adds p_t^T V to o as pv does, with P in p_parts
     * bf16 parts (2: hi + lo, within 2^-16 of P; 1: P rounded to bf16, for round_p_bf16), which
     * it writes over p_t; with `exact` (V holds Inf, NaN or larger values) it adds only nonzero
     * P, in f32, and leaves p_t. */
    int (*pack_v_bf16)(uint16_t *v_pairs, int64_t ld_o, const void *const *rows, int64_t n,
                       int64_t dv);
    void (*pv_bf16)(float *o, int64_t ld_o, float *p_t, int64_t ld_s, const uint16_t *v_pairs,
                    int64_t m, int64_t n, int p_parts, int exact);

    /* Optional: the matrix engine (a tile unit: Intel AMX, or its emulation), NULL elsewhere.
     * QK and PV run on tiles of bf16 operands, held in `parts` bf16 parts where the input is not
     * bf16 (f16: 2, f32: 3; each part follows the one before in memory); the softmax and the
     * rescale stay on the vector unit. Layouts: see ukr/amx/fai_mx_body.h (m_pad, n_pad, d_pad,
     * dv_pad multiples of 32; S row-major [m_pad, ld_n]; O row-major [m_pad, ld_o] like the other
     * prefill tables' accumulator, so rescale_o, the split-KV merge and the final store are
     * shared; P as hi + lo, [m_pad, n_pad] each).
     *   mx_enter / mx_leave: configure this thread's tiles before a worker's first tile
     *     instruction, and release them after its last.
     *   mx_pack_q: m Q rows into Q [m_pad, d_pad]; returns 0 if a value of Q is out of the
     *     products' range (FAI_BF16_DOT_Q_LOW: Inf and NaN among them).
     *   mx_pack_k: n K rows into key pairs [d_pad / 2, n_pad, 2]; with check_finite, returns 0
     *     if a value is Inf or NaN.
     *   mx_pack_v: n V rows into value pairs [n_pad / 2, dv_pad, 2]; returns 0 if a value is
     *     Inf, NaN or of magnitude FAI_BF16_DOT_HIGH or more.
     *   mx_qk, mx_softmax, mx_pv take the keys [j_begin, j_end) of the tile (multiples of 32,
     *     j_end at most n_pad, which stays the layouts' leading dimension): the caller leaves out
     *     the first and last keys where the band masks them for every row of the block (a
     *     window's start, the diagonal), and S, P and O see nothing of those keys, as if their P
     *     were 0.
     *   mx_qk: S = Q K^T, unscaled.
     *   mx_qk_exact: the same in plain f32 for the first m rows and n keys, for tiles where Q
     *     or K holds Inf or NaN and one of them has parts (Inf x 0 between parts would be NaN
     *     where the exact score is -Inf).
     *   mx_softmax: the online softmax of the raw scores with scale > 0 folded in, writing P
     *     in p_parts parts (2: hi + lo; 1: P rounded to bf16; 0: P in f32 over the same bytes,
     *     [m_pad, n_pad], for mx_pv_sparse);
     *     row_max and row_alpha as softmax leaves them (the max may trail the true max by a
     *     bounded amount: O and l use the same one), the row sums kept FAI_MX_SUM_LANES wide in
     *     row_sums [m_pad, FAI_MX_SUM_LANES] (the driver adds the lanes after the unit's last
     *     tile).
     *   mx_pv: O += P V.
     *   mx_pv_sparse: the same in f32 where only nonzero P may reach O, for a tile whose V holds
     *     Inf, NaN or values of FAI_BF16_DOT_HIGH or more (P in any of mx_softmax's forms). */
    void (*mx_enter)(void);
    void (*mx_leave)(void);
    int (*mx_pack_q)(uint16_t *q, int parts, const void *const *rows, int64_t m, int64_t m_pad,
                     int64_t d, int64_t d_pad, fai_dtype dtype);
    int (*mx_pack_k)(uint16_t *k, int parts, const void *const *rows, int64_t n, int64_t n_pad,
                     int64_t d, int64_t d_pad, fai_dtype dtype, int check_finite);
    int (*mx_pack_v)(uint16_t *v, int parts, const void *const *rows, int64_t n, int64_t n_pad,
                     int64_t dv, int64_t dv_pad, fai_dtype dtype);
    void (*mx_qk)(float *s, int64_t ld_n, const uint16_t *q, int q_parts, const uint16_t *k,
                  int k_parts, int64_t m_pad, int64_t n_pad, int64_t j_begin, int64_t j_end,
                  int64_t d_pad);
    void (*mx_qk_exact)(float *s, int64_t ld_n, const uint16_t *q, int q_parts, const uint16_t *k,
                        int k_parts, int64_t m, int64_t n, int64_t m_pad, int64_t n_pad, int64_t d,
                        int64_t d_pad);
    void (*mx_softmax)(float *s, int64_t ld_n, int64_t m, int64_t m_pad, int64_t n, int64_t n_pad,
                       int64_t j_begin, int64_t j_end, float scale, float *row_max, float *row_sums,
                       float *row_alpha, uint16_t *p, int p_parts, const float *p_scale);
    void (*mx_pv)(float *o, int64_t ld_o, const uint16_t *p, int p_parts, const uint16_t *v,
                  int v_parts, int64_t m_pad, int64_t n_pad, int64_t j_begin, int64_t j_end,
                  int64_t dv_pad);
    void (*mx_pv_sparse)(float *o, int64_t ld_o, const uint16_t *p, int p_parts, const uint16_t *v,
                         int v_parts, int64_t m, int64_t n, int64_t m_pad, int64_t n_pad,
                         int64_t dv, int64_t dv_pad);

    /* The softmax's exp over n values (n a multiple of simd_width), for accuracy tests. */
    void (*exp_array)(float *dst, const float *src, int64_t n);

    /* Score modifiers (fai_score_mods), in the same stage as the masks and before them:
     *   mods_t:    on S^T [n, ld_s], all ld_s columns (slope and offset have ld_s entries).
     *   mods_rows: on row-major s [m, ld_n], keys [0, n) of each row only (the columns after n
     *              keep what they hold).
     *   tanh_array: the soft-capping's tanh over n values (n a multiple of simd_width), for
     *              accuracy tests. */
    void (*mods_t)(float *s_t, int64_t ld_s, int64_t n, const fai_score_mods *mods);
    void (*mods_rows)(float *s, int64_t ld_n, int64_t m, int64_t n, const fai_score_mods *mods);
    void (*tanh_array)(float *dst, const float *src, int64_t n);

    /* Quantized K and V (int8, fp8) enter every path as their own values, exact in f32 and in
     * bf16; their per-key dequantization scales are applied to the scores (K) and to P (V)
     * instead, where they cost a multiply per key and query row rather than per element:
     *   scale_keys_t:    S^T [n, ld_s] row j times scale[j], all ld_s columns.
     *   scale_keys_rows: row-major s [m, ld_n] column j times scale[j], keys j < n. */
    void (*scale_keys_t)(float *s_t, int64_t ld_s, int64_t n, const float *scale);
    void (*scale_keys_rows)(float *s, int64_t ld_n, int64_t m, int64_t n, const float *scale);
} fai_cntx;

void fai__cntx_init_ref(fai_cntx *cntx);
void fai__cntx_init_avx2(fai_cntx *cntx);
void fai__cntx_init_avx512(fai_cntx *cntx);
void fai__cntx_init_neon(fai_cntx *cntx);
void fai__cntx_add_avx512_bf16(fai_cntx *cntx);
void fai__cntx_add_avx512_bf16_pv(fai_cntx *cntx); /* called by the one above */
void fai__cntx_add_amx(fai_cntx *cntx);            /* the tile unit itself */
void fai__cntx_add_amx_emu(fai_cntx *cntx);        /* the same logic with emulated tiles */
void fai__cntx_add_amx_emu_avx512(fai_cntx *cntx); /* emulated tiles, the AMX table's AVX-512 */

/* The table chosen for this CPU (FAI_ISA may force one) into *out: FAI_OK, or
 * FAI_ERR_ISA_UNAVAILABLE if FAI_ISA names a table this build or CPU cannot run, or
 * FAI_ERR_INVALID_ARG for a switch of the environment that is not 0 or 1 (FAI_AMX,
 * FAI_BF16_DOT), with the message saying which. */
fai_status fai__cntx_select(const fai_cntx **out);

/* The table of one ISA by name ("amx", "avx512", "avx2", "neon", "ref", "amx-emu",
 * "amx-emu-avx512"), or NULL if this build or CPU cannot run it. For tests that compare tables. */
const fai_cntx *fai__cntx_by_name(const char *name);

#endif

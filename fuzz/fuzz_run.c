/* fuzz_run.c - small arbitrary problems run through fai_plan_create and fai_run, checked against
 * the fp64 oracle.
 *
 * The input decodes into a case spec (ref/fai_cases.h): shapes capped so that one run
 * takes milliseconds, every dtype, causal and window, every mask kind and shape, padded, packed
 * and paged lengths (with explicit per-sequence lengths from the input), layouts, workers,
 * threads, tiles, the split strategy, LSE, the workspace's misalignment and the micro-kernel
 * table (FAI_ISA: each one this machine runs), NaN and Inf in K and V at the keys no row sees, a
 * trusted block table, or one entry out of the pool (which fai_run must refuse when a length
 * reaches it, and never read otherwise). The case builder fills everything the library must not
 * read (rows past the lengths, page tails, unreferenced pages, stride gaps, O and LSE before the
 * run) with NaN and Inf; fai_case_check compares O and LSE with the oracle within the documented
 * tolerances and checks that nothing outside O and LSE was written. Any difference aborts. */
#include "fai.h"
#include "fai_cases.h"
#include "fuzz_input.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Cap of B * Hq * Sq * max(Skv, 8) * (D + Dv): a few milliseconds per run under the sanitizers. */
#define WORK_CAP 4e5

static const char *isas[] = {"ref", "avx2", "avx512", "neon", "amx", "amx-emu", "amx-emu-avx512"};
#define ISA_COUNT 7
static int isa_ok[ISA_COUNT];
static fai_pool *pools[2]; /* 1 and 2 threads; the default pool is the third choice */

static int isa_available(const char *name) {
    setenv("FAI_ISA", name, 1);
    fai_problem pb;
    fai_problem_init(&pb);
    pb.heads_q = pb.heads_kv = pb.head_dim = 1;
    fai_plan *plan = NULL;
    const fai_status status = fai_plan_create(&pb, &plan);
    fai_plan_free(plan);
    return status == FAI_OK;
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    for (int i = 0; i < ISA_COUNT; i++)
        isa_ok[i] = isa_available(isas[i]);
    unsetenv("FAI_ISA");
    fuzz_pools_create(pools, "fuzz_run");
    return 0;
}

/* The input's layout: one byte per field (FIELD_*), then up to 8 bytes of the case seed. Missing
 * bytes read as zero. */
enum {
    F_BATCH,
    F_HEADS_KV,
    F_GROUP,
    F_SEQ_Q,
    F_SEQ_KV,
    F_DIM_KIND,
    F_DIM,
    F_DIM_V_SAME,
    F_DIM_V_KIND,
    F_DIM_V,
    F_Q_DTYPE,
    F_K_DTYPE,
    F_V_DTYPE,
    F_O_DTYPE,
    F_CAUSAL,
    F_WINDOW_LEFT,
    F_WINDOW_RIGHT,
    F_MASK_KIND,
    F_MASK_SHAPE,
    F_MASK_DENSITY,
    F_Q_LENS,
    F_KV_LENS,
    F_PAGE_SIZE,
    F_LAYOUT,
    F_PACKED_EXTRA,
    F_WORKERS,
    F_THREADS,
    F_TILE_Q,
    F_TILE_KV,
    F_SPLIT,
    F_LSE,
    F_SCALE,
    F_AMPLITUDE,
    F_EXPLICIT_LENS,
    F_LENS_Q,                 /* 4 bytes */
    F_LENS_KV = F_LENS_Q + 4, /* 4 bytes */
    F_WS_OFFSET = F_LENS_KV + 4,
    F_ISA,
    F_POOL,
    F_TRUST_TABLE, /* odd: trust_block_table (the table is valid) */
    F_BAD_ENTRY,   /* < 64 (paged, table not trusted): one block-table entry out of the pool */
    F_BAD_BATCH,   /* its sequence */
    F_BAD_PAGE,    /* its page */
    F_BAD_VALUE,   /* its value */
    F_POISON,      /* < 128: NaN and Inf in K and V at every key no row of its sequence sees */
    F_MODIFIERS,   /* softcap (and its size), ALiBi and sinks, by bits */
    F_COUNT        /* then the seed */
};

/* A block-table entry that a sequence's length reaches lies outside the pool: fai_run and
 * fai_check_tensors refuse the tensors with a message naming the entry, and nothing is
 * written. */
static void bad_entry_is_refused(fai_case *c, int64_t b, int64_t page) {
    fai_plan *plan = NULL;
    CHECK(fai_plan_create(&c->problem, &plan) == FAI_OK);
    CHECK(fai_check_tensors(plan, &c->tensors) == FAI_ERR_INVALID_ARG);
    CHECK(fai_last_error()[0] != '\0');
    const size_t size = fai_plan_workspace_size(plan);
    void *ws = malloc(size + 1);
    CHECK(ws != NULL);
    const fai_status status = fai_run(plan, &c->tensors, ws, size);
    if (status != FAI_ERR_INVALID_ARG || !strstr(fai_last_error(), "block_table")) {
        fprintf(stderr, "fuzz_run: block_table[%lld][%lld] out of the pool: %s \"%s\"\n%s\n",
                (long long)b, (long long)page, fai_status_string(status), fai_last_error(),
                c->desc);
        abort();
    }
    CHECK(memcmp(c->buf[FAI_CASE_BUF_O], c->init[FAI_CASE_BUF_O], c->bytes[FAI_CASE_BUF_O]) == 0);
    if (c->buf[FAI_CASE_BUF_LSE])
        CHECK(memcmp(c->buf[FAI_CASE_BUF_LSE], c->init[FAI_CASE_BUF_LSE],
                     c->bytes[FAI_CASE_BUF_LSE]) == 0);
    free(ws);
    fai_plan_free(plan);
}

/* Whether query i of sequence b (head h) sees key j: causal, window (at global positions when
 * the problem has them) and the explicit mask. */
static int row_sees(const fai_case *c, int64_t b, int64_t h, int64_t i, int64_t j) {
    const fai_problem *pb = &c->problem;
    const int64_t lq = c->len_q[b], lk = c->len_kv[b];
    /* the key index at the query's position: global positions when given, else the corner */
    const int64_t shift = pb->q_positions ? (int64_t)pb->q_positions[b] - pb->kv_positions[b]
                          : pb->causal == FAI_CAUSAL_TOP_LEFT ? 0
                                                              : lk - lq;
    const int64_t diag = i + shift;
    const int64_t wr = pb->causal != FAI_CAUSAL_NONE ? 0 : pb->window_right;
    if (pb->window_left >= 0 && j < diag - pb->window_left) return 0;
    if (wr >= 0 && j > diag + wr) return 0;
    if (pb->mask_kind == FAI_MASK_NONE) return 1;
    const fai_mask *m = &c->tensors.mask;
    const int64_t at = b * m->stride_batch + h * m->stride_head + i * m->stride_q + j;
    if (pb->mask_kind == FAI_MASK_KEEP_BITS) /* bit j % 8 of the row's byte j / 8 */
        return (((const unsigned char *)m->data)[at - j + j / 8] >> (j % 8)) & 1;
    if (pb->mask_kind == FAI_MASK_ADD) {
        float add;
        memcpy(&add, (const unsigned char *)m->data + at * 4, 4);
        return add != -INFINITY;
    }
    const unsigned char byte = ((const unsigned char *)m->data)[at];
    return pb->mask_kind == FAI_MASK_KEEP ? byte != 0 : byte == 0;
}

/* Positions inside the lengths that no query of the sequence's kv-head group can see (outside
 * every row's causal band or window, or masked out for all of them) get NaN, +Inf or -Inf in K
 * and V: they must contribute nothing, so the case still matches the oracle. */
static void poison_unseen_keys(fai_case *c) {
    const fai_problem *pb = &c->problem;
    const int64_t group = pb->heads_q / pb->heads_kv;
    const int64_t dv = fai_oracle_head_dim_v(pb);
    static const double values[] = {NAN, INFINITY, -INFINITY};
    int64_t poisoned = 0;
    for (int64_t b = 0; b < pb->batch; b++)
        for (int64_t hk = 0; hk < pb->heads_kv; hk++)
            for (int64_t j = 0; j < c->len_kv[b]; j++) {
                int seen = 0;
                for (int64_t h = hk * group; h < (hk + 1) * group && !seen; h++)
                    for (int64_t i = 0; i < c->len_q[b] && !seen; i++)
                        seen = row_sees(c, b, h, i, j);
                if (seen) continue;
                /* the key's row in the tensor: packed, paged or padded */
                int64_t tb = b, ts = j;
                if (pb->cu_seqlens_kv) {
                    tb = 0;
                    ts = pb->cu_seqlens_kv[b] + j;
                } else if (pb->page_size > 0) {
                    const int64_t stride = c->tensors.block_table_stride
                                               ? c->tensors.block_table_stride
                                               : pb->pages_per_seq;
                    tb = c->tensors.block_table[b * stride + j / pb->page_size];
                    ts = j % pb->page_size;
                }
                const double value = values[poisoned++ % 3];
                for (int64_t d = 0; d < pb->head_dim; d++)
                    fai_case_set(&c->tensors.k, tb, ts, hk, d, value);
                for (int64_t d = 0; d < dv; d++)
                    fai_case_set(&c->tensors.v, tb, ts, hk, d, d % 2 ? -value : value);
            }
    fai_case_reset(c); /* the poisoned inputs are the ones the run must leave unchanged */
    if (getenv("FUZZ_RUN_VERBOSE"))
        fprintf(stderr, "fuzz_run: %lld keys poisoned\n", (long long)poisoned);
}

static int64_t dim_of(uint8_t kind, uint8_t value) {
    static const int64_t wide[] = {48, 63, 64, 65, 80, 96, 128, 256, 512, 576};
    return kind < 200 ? 1 + value % 40 : wide[value % 10];
}

static double work_of(const fai_case_spec *s, const int32_t *lq, const int32_t *lk) {
    int64_t sq = s->seq_q, skv = s->seq_kv;
    for (int64_t b = 0; b < s->batch; b++) {
        if (lq && lq[b] > sq) sq = lq[b];
        if (lk && lk[b] > skv) skv = lk[b];
    }
    const int64_t dv = s->head_dim_v;
    return (double)(s->batch ? s->batch : 1) * (double)s->heads_q * (double)(sq ? sq : 1) *
           (double)(skv > 8 ? skv : 8) * (double)(s->head_dim + dv);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_input in = {data, size, 0};
    uint8_t f[F_COUNT];
    fuzz_fields(&in, f, F_COUNT);
    const uint64_t seed = fuzz_u64(&in);
    fai_case_spec s;
    fai_case_spec_any(&s);
    s.batch = f[F_BATCH] % 5;
    s.heads_kv = 1 + f[F_HEADS_KV] % 3;
    const uint8_t group = f[F_GROUP];
    s.heads_q = s.heads_kv * (group < 240 ? 1 + group % 4 : group % 2 ? 16 : 65);
    s.seq_q = f[F_SEQ_Q] % 21;
    s.seq_kv = f[F_SEQ_KV] % 91;
    s.head_dim = dim_of(f[F_DIM_KIND], f[F_DIM]);
    s.head_dim_v = f[F_DIM_V_SAME] < 128 ? s.head_dim : dim_of(f[F_DIM_V_KIND], f[F_DIM_V]);
    s.q_dtype = f[F_Q_DTYPE] % 3;
    s.k_dtype = f[F_K_DTYPE] % 6; /* int8, e4m3 and e5m2 too, with drawn scales */
    s.v_dtype = f[F_V_DTYPE] % 6;
    s.o_dtype = f[F_O_DTYPE] % 3;
    s.causal = f[F_CAUSAL] % 3;
    s.window_left = -1 + f[F_WINDOW_LEFT] % 32;
    s.window_right = -1 + f[F_WINDOW_RIGHT] % 32;
    s.mask_kind = f[F_MASK_KIND] % 5;
    /* score modifiers: bit 0 softcap (bits 3-4 its size), bit 1 ALiBi, bit 2 sinks */
    s.softcap = f[F_MODIFIERS] & 1 ? (double)(1 + (f[F_MODIFIERS] >> 3) % 4) * 4.0 : 0.0;
    s.alibi = (f[F_MODIFIERS] >> 1) & 1;
    s.sinks = (f[F_MODIFIERS] >> 2) & 1;
    s.mask_shape = f[F_MASK_SHAPE] % FAI_CASE_MASK_SHAPES;
    s.mask_density = f[F_MASK_DENSITY] % 101;
    s.q_lens = f[F_Q_LENS] % 3;
    s.kv_lens = f[F_KV_LENS] % 4;
    s.page_size = 1 + f[F_PAGE_SIZE] % 20;
    s.layout = f[F_LAYOUT] < 128 ? FAI_CASE_ANY : f[F_LAYOUT] % 4;
    s.packed_rows_extra = f[F_PACKED_EXTRA] % 4;
    s.workers = f[F_WORKERS] < 250 ? f[F_WORKERS] % 18 : FAI_MAX_WORKERS;
    s.threads = f[F_THREADS] % 4;
    s.tile_q = f[F_TILE_Q] < 160 ? 0 : 1 + f[F_TILE_Q] % 9;
    s.tile_kv = f[F_TILE_KV] < 160 ? 0 : 1 + f[F_TILE_KV] % 70;
    s.split = f[F_SPLIT] % 3;
    s.lse = f[F_LSE] % 2;
    const int scale = f[F_SCALE];
    s.scale = scale < 128 ? FAI_CASE_SCALE_DEFAULT
                          : (double)(scale - 192) / 32.0 / sqrt((double)s.head_dim);
    s.amplitude = 0.5 * (double)(1 + f[F_AMPLITUDE] % 4);
    /* explicit per-sequence lengths, for the modes that take them */
    int32_t lens_q[4], lens_kv[4];
    const int64_t kv_len_max = s.kv_lens == FAI_CASE_LEN_SEQLENS ? s.seq_kv : 120;
    for (int b = 0; b < 4; b++) {
        lens_q[b] = (int32_t)(f[F_LENS_Q + b] % (s.seq_q + 1));
        lens_kv[b] = (int32_t)(f[F_LENS_KV + b] % (kv_len_max + 1));
    }
    if (f[F_EXPLICIT_LENS] & 1 && s.q_lens != FAI_CASE_LEN_FULL) s.lens_q = lens_q;
    if (f[F_EXPLICIT_LENS] & 2 && s.kv_lens != FAI_CASE_LEN_FULL) s.lens_kv = lens_kv;
    const int64_t ws_offset = f[F_WS_OFFSET] % 64;
    const int isa = f[F_ISA] % (ISA_COUNT + 1);
    const int pool = f[F_POOL] % 3;

    /* keep each run fast: shrink the largest knob until the work fits */
    while (work_of(&s, s.lens_q, s.lens_kv) > WORK_CAP) {
        int64_t kv_max = s.seq_kv;
        for (int b = 0; s.lens_kv && b < 4; b++)
            kv_max = lens_kv[b] > kv_max ? lens_kv[b] : kv_max;
        if (kv_max > 8) {
            for (int b = 0; b < 4; b++)
                lens_kv[b] /= 2;
            s.seq_kv /= 2;
        } else if (s.heads_q > s.heads_kv) {
            s.heads_q = s.heads_kv;
        } else if (s.head_dim > 16 || s.head_dim_v > 16) {
            s.head_dim = s.head_dim > 16 ? s.head_dim / 2 : s.head_dim;
            s.head_dim_v = s.head_dim_v > 16 ? s.head_dim_v / 2 : s.head_dim_v;
        } else if (s.seq_q > 2) {
            s.seq_q /= 2;
            for (int b = 0; b < 4; b++)
                lens_q[b] = lens_q[b] > s.seq_q ? (int32_t)s.seq_q : lens_q[b];
        } else {
            return 0;
        }
    }

    if (isa < ISA_COUNT) {
        if (!isa_ok[isa]) return 0;
        setenv("FAI_ISA", isas[isa], 1);
    } else {
        unsetenv("FAI_ISA");
    }
    fai_case c;
    if (fai_case_build(&c, &s, seed) != 0) { /* an inconsistent spec: not the library's fault */
        fai_case_free(&c);
        return 0;
    }
    c.workspace_offset = (size_t)ws_offset;
    if (getenv("FUZZ_RUN_VERBOSE")) fprintf(stderr, "fuzz_run: %s\n", c.desc);
    if (f[F_POISON] < 128) poison_unseen_keys(&c);
    if (c.problem.page_size > 0 && c.problem.batch > 0) {
        if (f[F_TRUST_TABLE] % 2) {
            c.problem.trust_block_table = 1;
        } else if (f[F_BAD_ENTRY] < 64) {
            /* an entry out of the pool: refused if a length reaches it, never read if not */
            const int64_t b = f[F_BAD_BATCH] % c.problem.batch;
            const int64_t stride = c.tensors.block_table_stride ? c.tensors.block_table_stride
                                                                : c.problem.pages_per_seq;
            const int64_t page = f[F_BAD_PAGE] % c.problem.pages_per_seq;
            const int32_t values[] = {-1, INT32_MIN, INT32_MAX, (int32_t)c.problem.num_pages,
                                      (int32_t)c.problem.num_pages + 1000};
            c.block_table[b * stride + page] = values[f[F_BAD_VALUE] % 5];
            const int64_t reached = (c.len_kv[b] + c.problem.page_size - 1) / c.problem.page_size;
            if (page < reached) {
                bad_entry_is_refused(&c, b, page);
                fai_case_free(&c);
                return 0;
            }
        }
    }
    fai_case_result r;
    const int ok = fai_case_check(&c, pool < 2 ? pools[pool] : NULL, &r);
    if (!ok) {
        fprintf(stderr, "fuzz_run: FAI_ISA=%s case: %s\nfuzz_run: %s\n",
                isa < ISA_COUNT ? isas[isa] : "(auto)", r.desc, r.why);
        abort();
    }
    fai_case_free(&c);
    return 0;
}

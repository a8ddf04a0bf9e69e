/* The matrix-engine micro-kernels (the seed's Cube stages on a CPU's tile unit), written once
 * against a tile vocabulary (TILE_LOAD / TILE_STORE / TILE_ZERO / TILE_DP over eight tiles of
 * 16 x 64 bytes: fai_tile_amx.h, or its emulation fai_tile_emu.h) and a vector vocabulary
 * (fai_mxv_avx512.h, or the portable fai_mxv_portable.h) for the softmax and the packing.
 *
 * Layouts (bf16 unless said; m_pad, n_pad, d_pad, dv_pad multiples of 32):
 *     Q     [m_pad, d_pad]         query rows (A of QK), rows past m and columns past d zero
 *     K     [d_pad / 2, n_pad, 2]  key pairs (B of QK): pair p of key j at (p n_pad + j) 2
 *     S     [m_pad, ld_n] f32      raw scores Q K^T (row-major: rows are query rows)
 *     P     [m_pad, n_pad]         probabilities (A of PV), keys past n zero
 *     V     [n_pad / 2, dv_pad, 2] value pairs (B of PV): keys 2p, 2p + 1 of column x at
 *                                  (p dv_pad + x) 2
 *     O     [m_pad, ld_o] f32      the accumulator, ld_o >= dv_pad
 * An operand that is not bf16 already is held in bf16 parts, each the truncated rest of the
 * ones before: f16 as hi + lo and f32 as hi + mid + lo, both exactly; P as hi + lo (2^-16
 * relative, against bf16's 2^-9). Each part follows the one before in memory. The products of a
 * pass are exact in f32 (bf16 x bf16); QK sums every pass down to 2^-24 relative (an f32
 * product's rounding, which large logits need), PV the passes down to 2^-16 (P's own). */
#include "fai_internal.h"
#include "util/fai_half.h"

#include <math.h>
#include <string.h>

#define TILE 16      /* rows of a tile, and f32 columns of an accumulator tile */
#define PAIR_COLS 32 /* bf16 elements of a tile row: the reduction step of one TILE_DP */

/* How far the row max may run ahead of the one P is computed against: P <= e^8 (about 3000),
 * which bf16 and f32 hold with room to spare, while O is rescaled only when the max grows by
 * more (rarely after the first tiles). The final O / l and LSE = m + log l are exact whatever
 * m was used, as long as O and l used the same. */
#define LAZY_MAX_GROWTH 8.0f

/* 2^f for f in [0, 1): degree 4, fitted for the least relative error (2.6e-6, under the 2^-16
 * of P's hi + lo). */
static const float exp2_poly[5] = {1.00000259f, 0.693003834f, 0.241442757f, 0.0520114606f,
                                   0.0135341679f};

_Static_assert(W == FAI_MX_SUM_LANES, "the row sums are one vector wide");

static void mx_enter(void) { tile_enter(); }
static void mx_leave(void) { tile_leave(); }

/* One value split as the vector split does (parts after hi 0 for Inf and NaN). */
static inline void split_one(float x, uint16_t *out, int parts, int64_t part_stride) {
    float rest = x;
    for (int part = 0; part < parts; part++) {
        uint32_t bits;
        memcpy(&bits, &rest, sizeof bits);
        if (part == parts - 1 && part > 0) {
            out[part * part_stride] = isfinite(x) ? fai__f32_to_bf16(rest) : 0;
            break;
        }
        const uint32_t top = bits & 0xffff0000u;
        float top_value;
        memcpy(&top_value, &top, sizeof top_value);
        out[part * part_stride] = part > 0 && !isfinite(x) ? 0 : (uint16_t)(bits >> 16);
        rest -= top_value;
    }
}

/* count elements of a row of dtype into `parts` bf16 parts, part_stride elements apart: 1 part
 * for bf16 (copied) and the quantized dtypes (their own values, exact in bf16: int8 needs 7
 * significant bits, e4m3 and e5m2 at most 4, and none is below bf16's normal range), 2 (hi, lo)
 * or 3 (hi, mid, lo). */
static void split_row(uint16_t *out, int parts, int64_t part_stride, const void *row, int64_t count,
                      fai_dtype dtype) {
    if (parts == 1 && dtype == FAI_DTYPE_BF16) {
        memcpy(out, row, (size_t)count * sizeof(uint16_t));
        return;
    }
    if (parts == 1) {
        int64_t x = 0;
        for (; x + 2 * W <= count; x += 2 * W)
            v_store_bf16_rounded(v_load_any(row, x, dtype), v_load_any(row, x + W, dtype), out + x);
        for (; x < count; x++)
            out[x] = fai__f32_to_bf16(fai__load_element(row, x, dtype));
        return;
    }
    uint16_t *mid = parts == 3 ? out + part_stride : NULL;
    uint16_t *lo = out + (parts - 1) * part_stride;
    int64_t x = 0;
    for (; x + 2 * W <= count; x += 2 * W)
        v_split_store_inputs(v_load_any(row, x, dtype), v_load_any(row, x + W, dtype), out + x,
                             mid ? mid + x : NULL, lo + x);
    for (; x < count; x++)
        split_one(fai__load_element(row, x, dtype), out + x, parts, part_stride);
}

static void zero_parts(uint16_t *out, int parts, int64_t part_stride, int64_t count) {
    for (int part = 0; part < parts; part++)
        memset(out + part * part_stride, 0, (size_t)count * sizeof(uint16_t));
}

/* Nonzero when one of count bf16 values (count a multiple of 32) is outside [low, high) as
 * v_outside32_bf16 says: Inf or NaN with (0, 0x7f80). */
static int any_outside(const uint16_t *values, int64_t count, uint16_t low, uint16_t high) {
    int outside = 0;
    for (int64_t x = 0; x < count; x += PAIR_COLS)
        outside |= v_outside32_bf16(values + x, low, high);
    return outside;
}

/* Q rows into Q [m_pad, d_pad], each part m_pad * d_pad elements after the last. Returns 0 when
 * a value of Q is out of the tile products' range (FAI_BF16_DOT_Q_LOW in fai_ukr.h: Inf and NaN
 * among them; see mx_qk_exact), else 1. Each value's exponent is its hi part's, and its other
 * parts are at least 2^-24 of it, so the hi part tells. */
static int mx_pack_q(uint16_t *q, int parts, const void *const *rows, int64_t m, int64_t m_pad,
                     int64_t d, int64_t d_pad, fai_dtype dtype) {
    const int64_t part_stride = m_pad * d_pad;
    for (int64_t i = 0; i < m_pad; i++) {
        uint16_t *out = q + i * d_pad;
        const int64_t filled = i < m ? d : 0;
        if (filled) split_row(out, parts, part_stride, rows[i], d, dtype);
        zero_parts(out + filled, parts, part_stride, d_pad - filled);
    }
    return !any_outside(q, part_stride, FAI_BF16_DOT_Q_LOW, FAI_BF16_DOT_HIGH);
}

/* K rows into key pairs [d_pad / 2, n_pad, 2] (each part n_pad * d_pad elements after the
 * last): 16 keys x 16 pairs at a time, a transpose of 32-bit words. bf16 rows with whole blocks
 * are read in place; the rest (conversions, the last keys and columns) goes through a
 * zero-padded block. With check_finite, returns 0 when K holds Inf or NaN, else 1. */
static int mx_pack_k(uint16_t *k, int parts, const void *const *rows, int64_t n, int64_t n_pad,
                     int64_t d, int64_t d_pad, fai_dtype dtype, int check_finite) {
    uint16_t block[3][TILE][PAIR_COLS];
    const void *src[3][TILE];
    const int64_t part_stride = n_pad * d_pad, element = (int64_t)fai_dtype_size(dtype);
    for (int64_t j0 = 0; j0 < n_pad; j0 += TILE) {
        for (int64_t x0 = 0; x0 < d_pad; x0 += PAIR_COLS) {
            const int direct = dtype == FAI_DTYPE_BF16 && j0 + TILE <= n && x0 + PAIR_COLS <= d;
            for (int j = 0; j < TILE; j++) {
                if (direct) {
                    src[0][j] = (const uint16_t *)rows[j0 + j] + x0;
                    continue;
                }
                const int64_t count = j0 + j >= n ? 0 : d - x0 < PAIR_COLS ? d - x0 : PAIR_COLS;
                const int64_t block_stride = (int64_t)(sizeof block[0] / sizeof(uint16_t));
                if (count)
                    split_row(block[0][j], parts, block_stride,
                              (const char *)rows[j0 + j] + x0 * element, count, dtype);
                zero_parts(block[0][j] + count, parts, block_stride, PAIR_COLS - count);
                for (int part = 0; part < parts; part++)
                    src[part][j] = block[part][j];
            }
            const int64_t at = (x0 / 2) * n_pad + j0; /* in 32-bit pairs */
            for (int part = 0; part < parts; part++)
                v_transpose16_u32(src[part], (uint32_t *)(k + part * part_stride) + at, n_pad);
        }
    }
    return !check_finite || !any_outside(k, part_stride, 0, 0x7f80);
}

/* V rows into value pairs [n_pad / 2, dv_pad, 2] (each part n_pad * dv_pad elements after the
 * last). Returns 0 when a value is Inf, NaN or of magnitude FAI_BF16_DOT_HIGH or more, else 1. */
static int mx_pack_v(uint16_t *v, int parts, const void *const *rows, int64_t n, int64_t n_pad,
                     int64_t dv, int64_t dv_pad, fai_dtype dtype) {
    enum { ROW = FAI_MAX_HEAD_DIM + PAIR_COLS };
    uint16_t staged[2][3][ROW]; /* two rows, their parts */
    const int direct = dtype == FAI_DTYPE_BF16 && dv == dv_pad;
    const int64_t part_stride = n_pad * dv_pad;
    for (int64_t j = 0; j < n_pad; j += 2) {
        const uint16_t *a[3], *b[3];
        if (direct && j + 1 < n) {
            a[0] = rows[j];
            b[0] = rows[j + 1];
        } else {
            for (int r = 0; r < 2; r++) {
                const int64_t count = j + r < n ? dv : 0;
                if (count) split_row(staged[r][0], parts, ROW, rows[j + r], dv, dtype);
                zero_parts(staged[r][0] + count, parts, ROW, dv_pad - count);
            }
            for (int part = 0; part < parts; part++) {
                a[part] = staged[0][part];
                b[part] = staged[1][part];
            }
        }
        for (int64_t x = 0; x < dv_pad; x += PAIR_COLS)
            for (int part = 0; part < parts; part++)
                v_interleave32_u16(v + part * part_stride + j * dv_pad + 2 * x, a[part] + x,
                                   b[part] + x);
    }
    /* hi carries every Inf and NaN, and each value's exponent */
    return !any_outside(v, part_stride, 0, FAI_BF16_DOT_HIGH);
}

/* C (tiles 0-3, a 2 x 2 block of 16 x 16 accumulators) += A B for A rows a0, a1 and B columns b0,
 * b1: each product issued as soon as its operands are loaded, and each load as soon as the
 * products reading its tile before are done (tile registers are not renamed). */
#define DP_2X2(a0, a1, a_stride, b0, b1, b_stride)                                                 \
    do {                                                                                           \
        TILE_LOAD(4, a0, a_stride);                                                                \
        TILE_LOAD(6, b0, b_stride);                                                                \
        TILE_DP(0, 4, 6);                                                                          \
        TILE_LOAD(7, b1, b_stride);                                                                \
        TILE_DP(1, 4, 7);                                                                          \
        TILE_LOAD(5, a1, a_stride);                                                                \
        TILE_DP(2, 5, 6);                                                                          \
        TILE_DP(3, 5, 7);                                                                          \
    } while (0)

/* The 2 x 2 block of accumulators (tiles 0-3) to and from f32 rows of `ld` elements at c. */
#define C_2X2(OP, c, ld)                                                                           \
    do {                                                                                           \
        OP(0, c, (ld)*4);                                                                          \
        OP(1, (c) + TILE, (ld)*4);                                                                 \
        OP(2, (c) + TILE * (ld), (ld)*4);                                                          \
        OP(3, (c) + TILE * (ld) + TILE, (ld)*4);                                                   \
    } while (0)

/* The passes of a product of split operands: the parts i of one and j of the other with
 * i + j <= 2, each part being 2^-8 of the one before: what is left out is below 2^-24 relative,
 * the rounding of an f32 product. */
#define MAX_PASS_LEVEL 2

/* S [m_pad, ld_n] = Q K^T for the keys [j_begin, j_end), in 32 x 32 blocks: accumulators 0-3, Q
 * in tiles 4-5, K in 6-7. */
static void mx_qk(float *s, int64_t ld_n, const uint16_t *q, int q_parts, const uint16_t *k,
                  int k_parts, int64_t m_pad, int64_t n_pad, int64_t j_begin, int64_t j_end,
                  int64_t d_pad) {
    const int64_t q_stride = d_pad * 2, k_stride = n_pad * 4;
    const int64_t q_part = m_pad * d_pad, k_part = n_pad * d_pad;
    for (int64_t i0 = 0; i0 < m_pad; i0 += 2 * TILE) {
        for (int64_t j0 = j_begin; j0 < j_end; j0 += 2 * TILE) {
            TILE_ZERO(0);
            TILE_ZERO(1);
            TILE_ZERO(2);
            TILE_ZERO(3);
            for (int64_t x = 0; x < d_pad; x += PAIR_COLS) {
                const int64_t q_at = i0 * d_pad + x, k_at = ((x / 2) * n_pad + j0) * 2;
                for (int qi = 0; qi < q_parts; qi++)
                    for (int kj = 0; kj < k_parts && qi + kj <= MAX_PASS_LEVEL; kj++) {
                        const uint16_t *qa = q + qi * q_part + q_at, *kb = k + kj * k_part + k_at;
                        DP_2X2(qa, qa + TILE * d_pad, q_stride, kb, kb + 2 * TILE, k_stride);
                    }
            }
            C_2X2(TILE_STORE, s + i0 * ld_n + j0, ld_n);
        }
    }
}

/* S = Q K^T in f32 from the operands' parts summed back (exact: for Inf and NaN the hi part
 * carries the value and the others are 0), for tiles where Q or K holds Inf or NaN and one of
 * them has parts: a pass of hi and lo parts could otherwise meet as Inf x 0 = NaN where the
 * exact product is -Inf (a key the row then ignores). Rare; plain loops. */
static void mx_qk_exact(float *s, int64_t ld_n, const uint16_t *q, int q_parts, const uint16_t *k,
                        int k_parts, int64_t m, int64_t n, int64_t m_pad, int64_t n_pad, int64_t d,
                        int64_t d_pad) {
    const int64_t q_part = m_pad * d_pad, k_part = n_pad * d_pad;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float sum = 0.0f;
            for (int64_t x = 0; x < d; x++) {
                float qx = 0.0f, kx = 0.0f;
                for (int part = 0; part < q_parts; part++)
                    qx += fai__bf16_to_f32(q[part * q_part + i * d_pad + x]);
                const int64_t at = ((x / 2) * n_pad + j) * 2 + x % 2;
                for (int part = 0; part < k_parts; part++)
                    kx += fai__bf16_to_f32(k[part * k_part + at]);
                sum += qx * kx;
            }
            s[i * ld_n + j] = sum;
        }
}

/* The online softmax on raw scores S [m_pad, ld_n] (masked entries -inf), with the scale (> 0)
 * folded into the exponent: for each row i < m, over keys j < n, m' = the running max of
 * scale * s, held back while it grows by less than LAZY_MAX_GROWTH (which W comparisons tell
 * without a horizontal max), P = e^(scale s - m') split into P hi and lo [m_pad, n_pad] (or,
 * with p_parts 1, P rounded to bf16 in hi alone; with p_parts 0, P in f32 [m_pad, n_pad] over the
 * same bytes, for mx_pv_sparse) (keys
 * [n, n_pad) and rows [m, m_pad) zero), row_alpha and row_max as the other tables' softmax
 * leaves them. Only the keys [j_begin, j_end) are read and written (the rest are masked for
 * every row: see fai_ukr.h). The row sums stay W lanes wide, row_sums [m_pad, W], scaled by
 * alpha with the row: the driver adds the lanes once at the end of the unit. S's columns [n,
 * j_end) are overwritten. With p_scale (n_pad entries, a quantized V's scales), P's key j is
 * multiplied by p_scale[j] after it joined the sum and before it is split.
 *
 * P below 2^-118 is 0 in parts: a subnormal costs a microcode assist to compute, bf16 parts
 * could not hold it, and times a V below 2^80 (mx_pack_v sends larger ones to mx_pv_sparse) it
 * is below 2^-38. In f32 P is computed down to the smallest subnormal, 2^-149. */
#define MX_P_CUT_PARTS (-118.0f)
#define MX_P_CUT_F32 (-150.0f)
/* Each exponent is fma(s, scale log2e, -new_max log2e), one rounding, where the shift is formed
 * apart from the scores: its roundings (scale log2e, new_max, new_max log2e) put the row's largest
 * key a few ulps of the shift from 0, nothing while |new_max log2e| is below 2^20, but past 2^31
 * more than 128 (P then Inf, or 0 with a sum of 0: NaN for finite scores). From 2^20 on (a
 * scaled max of about 7.3e5) a row takes the scores as the vector tables do, scaled first and
 * the max subtracted before log2e, so the key that set the max gets 0 exactly. */
#define MX_EXACT_SHIFT 1048576.0f
static void mx_softmax(float *s, int64_t ld_n, int64_t m, int64_t m_pad, int64_t n, int64_t n_pad,
                       int64_t j_begin, int64_t j_end, float scale, float *row_max, float *row_sums,
                       float *row_alpha, uint16_t *p, int p_parts, const float *p_scale) {
    uint16_t *p_hi = p, *p_lo = p + m_pad * n_pad;
    float *p_f32 = (float *)(void *)p;
    const float cut = p_parts == 0 ? MX_P_CUT_F32 : MX_P_CUT_PARTS;
    const float log2e = 1.44269504088896341f;
    const fvec scale_log2e = v_set1(scale * log2e);
    for (int64_t i = 0; i < m; i++) {
        float *row = s + i * ld_n, *sums = row_sums + i * W;
        uint16_t *hi = p_hi + i * n_pad, *lo = p_lo + i * n_pad;
        for (int64_t j = n > j_begin ? n : j_begin; j < j_end; j++)
            row[j] = -INFINITY;
        fvec top_vec = v_set1(-INFINITY);
        for (int64_t j = j_begin; j < j_end; j += W)
            top_vec = v_max(v_load(row + j), top_vec); /* NaN scores are passed over here */
        const float old_max = row_max[i];
        float new_max = old_max;
        /* the raw score above which the max moves (-inf before the first visible score) */
        if (v_any_gt(top_vec, v_set1((old_max + LAZY_MAX_GROWTH) / scale)))
            new_max = v_hmax(top_vec) * scale;
        /* nothing visible yet: the scores are -inf (P = 0) or NaN (P = NaN, which then reaches
         * O through PV and the row's sum) */
        const float shift = new_max == -INFINITY ? 0.0f : new_max * log2e;
        const fvec minus_shift = v_set1(-shift);
        const int exact = !(fabsf(shift) < MX_EXACT_SHIFT);
        const fvec v_scale = v_set1(scale), minus_max = v_set1(-new_max), v_log2e = v_set1(log2e);
        fvec sum = v_set1(0.0f);
        for (int64_t j = j_begin; j < j_end; j += 2 * W) {
            fvec ta, tb;
            if (exact) {
                ta = v_mul(v_add(v_mul(v_load(row + j), v_scale), minus_max), v_log2e);
                tb = v_mul(v_add(v_mul(v_load(row + j + W), v_scale), minus_max), v_log2e);
            } else {
                ta = v_fma(v_load(row + j), scale_log2e, minus_shift);
                tb = v_fma(v_load(row + j + W), scale_log2e, minus_shift);
            }
            fvec a = v_exp2_cut(ta, exp2_poly, cut);
            fvec b = v_exp2_cut(tb, exp2_poly, cut);
            sum = v_add(sum, v_add(a, b));
            if (p_scale) {
                a = v_mul(a, v_load(p_scale + j));
                b = v_mul(b, v_load(p_scale + j + W));
            }
            if (p_parts == 0) {
                v_store(p_f32 + i * n_pad + j, a);
                v_store(p_f32 + i * n_pad + j + W, b);
            } else if (p_parts == 2) {
                v_split_store(a, b, hi + j, lo + j);
            } else {
                v_store_bf16_rounded(a, b, hi + j);
            }
        }
        const float alpha = old_max == new_max ? 1.0f : expf(old_max - new_max);
        row_alpha[i] = alpha;
        v_store(sums, v_fma(v_load(sums), v_set1(alpha), sum));
        row_max[i] = new_max;
    }
    for (int64_t i = m; i < m_pad; i++) {
        const size_t cols = (size_t)(j_end - j_begin);
        if (p_parts == 0) memset(p_f32 + i * n_pad + j_begin, 0, cols * sizeof(float));
        if (p_parts >= 1) memset(p_hi + i * n_pad + j_begin, 0, cols * sizeof(uint16_t));
        if (p_parts == 2) memset(p_lo + i * n_pad + j_begin, 0, cols * sizeof(uint16_t));
        row_alpha[i] = 1.0f;
    }
}

/* O [m_pad, ld_o] += P V over the keys [j_begin, j_end) in 32 x 32 blocks: accumulators 0-3, P in
 * tiles 4-5, V in 6-7; P is hi + lo (2^-16 relative; or hi alone, rounded, when asked), and every
 * pass of P's and V's parts is summed: P_hi V_hi + P_lo V_hi (+ P_hi V_lo + P_lo V_lo for f16 V,
 * exact as hi + lo). P_lo V_lo may not be left out: both lo parts are truncations' rests, up to
 * 2^-7 of their values and of the same sign as them, so the pass holds up to 2^-14 A (A = sum
 * p |v|), the whole 16-bit inputs' budget, and adversarial rows exceeded the tolerance without it.
 * Each V part's tiles are loaded once for the P parts it meets (a load fewer per pass pair:
 * all-bf16 P1 and P2 1.03-1.04x on one thread). */
static void mx_pv(float *o, int64_t ld_o, const uint16_t *p, int p_parts, const uint16_t *v,
                  int v_parts, int64_t m_pad, int64_t n_pad, int64_t j_begin, int64_t j_end,
                  int64_t dv_pad) {
    const int64_t p_stride = n_pad * 2, v_stride = dv_pad * 4;
    const int64_t p_part = m_pad * n_pad, v_part = n_pad * dv_pad;
    for (int64_t i0 = 0; i0 < m_pad; i0 += 2 * TILE) {
        for (int64_t x0 = 0; x0 < dv_pad; x0 += 2 * TILE) {
            float *out = o + i0 * ld_o + x0;
            C_2X2(TILE_LOAD, out, ld_o);
            for (int64_t j = j_begin; j < j_end; j += PAIR_COLS) {
                const int64_t p_at = i0 * n_pad + j, v_at = ((j / 2) * dv_pad + x0) * 2;
                for (int vj = 0; vj < v_parts && vj < 2; vj++) {
                    const uint16_t *vb = v + vj * v_part + v_at;
                    TILE_LOAD(6, vb, v_stride);
                    TILE_LOAD(7, vb + 2 * TILE, v_stride);
                    for (int pi = 0; pi < p_parts; pi++) {
                        const uint16_t *pa = p + pi * p_part + p_at;
                        TILE_LOAD(4, pa, p_stride);
                        TILE_DP(0, 4, 6);
                        TILE_DP(1, 4, 7);
                        TILE_LOAD(5, pa + TILE * n_pad, p_stride);
                        TILE_DP(2, 5, 6);
                        TILE_DP(3, 5, 7);
                    }
                }
            }
            C_2X2(TILE_STORE, out, ld_o);
        }
    }
}

/* PV for a masked tile whose V holds Inf or NaN: only the nonzero P reach O (0 x Inf would be
 * NaN in a tile product), in f32 from the packed operands. Rare; plain loops. */
static void mx_pv_sparse(float *o, int64_t ld_o, const uint16_t *p, int p_parts, const uint16_t *v,
                         int v_parts, int64_t m, int64_t n, int64_t m_pad, int64_t n_pad,
                         int64_t dv, int64_t dv_pad) {
    const int64_t p_part = m_pad * n_pad, v_part = n_pad * dv_pad;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float weight;
            if (p_parts == 0) {
                memcpy(&weight, p + 2 * (i * n_pad + j), sizeof weight);
            } else {
                weight = fai__bf16_to_f32(p[i * n_pad + j]);
                if (p_parts == 2) weight += fai__bf16_to_f32(p[p_part + i * n_pad + j]);
            }
            if (weight == 0.0f) continue;
            const int64_t at = (j / 2) * dv_pad * 2 + (j % 2);
            for (int64_t x = 0; x < dv; x++) {
                float value = 0.0f;
                for (int part = 0; part < v_parts; part++)
                    value += fai__bf16_to_f32(v[part * v_part + at + 2 * x]);
                o[i * ld_o + x] += weight * value;
            }
        }
}

static void add_mx_entries(fai_cntx *cntx) {
    cntx->mx_enter = mx_enter;
    cntx->mx_leave = mx_leave;
    cntx->mx_pack_q = mx_pack_q;
    cntx->mx_pack_k = mx_pack_k;
    cntx->mx_pack_v = mx_pack_v;
    cntx->mx_qk = mx_qk;
    cntx->mx_qk_exact = mx_qk_exact;
    cntx->mx_softmax = mx_softmax;
    cntx->mx_pv = mx_pv;
    cntx->mx_pv_sparse = mx_pv_sparse;
}

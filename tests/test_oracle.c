/*
 * test_oracle.c - the fp64 oracle's own checks, before the library is compared with it: its
 * half-precision conversions, which keys it lets each query see, and its softmax against values
 * worked out by hand.
 */
#include "test_util.h"

#include "fai.h"
#include "fai_oracle.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

TEST(oracle_half_conversions) {
    /* every finite f16 survives decode + encode, and the decoded value is what the bits say */
    for (uint32_t h = 0; h < 0x10000u; h++) {
        const double x = fai_oracle_f16_decode((uint16_t)h);
        if (isnan(x)) {
            CHECK(((h >> 10) & 0x1F) == 0x1F && (h & 0x3FF));
            continue;
        }
        if (fai_oracle_f16_encode(x) != (uint16_t)h) {
            CHECK(fai_oracle_f16_encode(x) == (uint16_t)h);
            break;
        }
    }
    CHECK(fai_oracle_f16_decode(0x3C00) == 1.0);
    CHECK(fai_oracle_f16_decode(0xC000) == -2.0);
    CHECK(fai_oracle_f16_decode(0x7BFF) == 65504.0);
    CHECK(fai_oracle_f16_decode(0x0001) == ldexp(1.0, -24));
    CHECK(fai_oracle_f16_decode(0x03FF) == ldexp(1023.0, -24));
    CHECK(fai_oracle_f16_decode(0x0400) == ldexp(1.0, -14));
    CHECK(isinf(fai_oracle_f16_decode(0x7C00)) && fai_oracle_f16_decode(0xFC00) < 0);
    /* rounding: ties to even, overflow, subnormals */
    CHECK(fai_oracle_f16_encode(65519.0) == 0x7BFF);
    CHECK(fai_oracle_f16_encode(65520.0) == 0x7C00);
    CHECK(fai_oracle_f16_encode(1.0 + ldexp(1.0, -11)) == 0x3C00);     /* tie -> even */
    CHECK(fai_oracle_f16_encode(1.0 + 3 * ldexp(1.0, -11)) == 0x3C02); /* tie -> even */
    CHECK(fai_oracle_f16_encode(ldexp(1.0, -25)) == 0x0000);           /* tie -> even (0) */
    CHECK(fai_oracle_f16_encode(ldexp(3.0, -25)) == 0x0002);
    CHECK(fai_oracle_f16_encode(ldexp(1023.5, -24)) == 0x0400); /* rounds up into normals */
    CHECK(fai_oracle_f16_encode(-0.0) == 0x8000);
    /* bf16 is the upper half of a binary32 */
    for (uint32_t h = 0; h < 0x10000u; h += 7) {
        const uint32_t bits = h << 16;
        float f;
        memcpy(&f, &bits, 4);
        const double x = fai_oracle_bf16_decode((uint16_t)h);
        if (isnan(f)) {
            CHECK(isnan(x));
            continue;
        }
        if (x != (double)f || fai_oracle_bf16_encode(x) != (uint16_t)h) {
            CHECK(x == (double)f);
            CHECK(fai_oracle_bf16_encode(x) == (uint16_t)h);
            break;
        }
    }
    CHECK(fai_oracle_bf16_encode(1.0 + ldexp(1.0, -8)) == 0x3F80);
    CHECK(fai_oracle_bf16_encode(1.0 + ldexp(3.0, -8)) == 0x3F82);
    CHECK(fai_oracle_bf16_encode(1.0 + ldexp(1.0, -8) + ldexp(1.0, -30)) == 0x3F81);
    CHECK(fai_oracle_bf16_encode(ldexp(1.0, -133)) == 0x0001);
    CHECK(fai_oracle_bf16_encode(3.5e38) == 0x7F80);
}

/* Keys all zero and V the identity: O[i] is the uniform distribution over the keys row i sees,
 * which spells out the oracle's causal and window semantics. */
static void visibility(const fai_problem *base, int64_t sq, int64_t skv, double *o_out) {
    fai_problem pb = *base;
    pb.batch = 1;
    pb.heads_q = pb.heads_kv = 1;
    pb.seq_q = sq;
    pb.seq_kv = skv;
    pb.head_dim = 1;
    pb.head_dim_v = skv;
    pb.q_dtype = pb.k_dtype = pb.v_dtype = pb.o_dtype = FAI_DTYPE_F32;
    float q[16] = {0}, k[16] = {0}, v[256] = {0}, o[256];
    for (int64_t j = 0; j < skv; j++)
        v[j * skv + j] = 1.0f;
    fai_tensors t;
    memset(&t, 0, sizeof t);
    t.q = fai_tensor_bshd(q, FAI_DTYPE_F32, sq, 1, 1);
    t.k = fai_tensor_bshd(k, FAI_DTYPE_F32, skv, 1, 1);
    t.v = fai_tensor_bshd(v, FAI_DTYPE_F32, skv, 1, skv);
    t.o = fai_tensor_bshd(o, FAI_DTYPE_F32, sq, 1, skv);
    fai_oracle_out out;
    char err[128];
    if (fai_oracle_run(&pb, &t, &out, err, sizeof err) != FAI_OK) {
        fprintf(stderr, "  oracle: %s\n", err);
        for (int64_t i = 0; i < sq * skv; i++)
            o_out[i] = NAN;
        return;
    }
    for (int64_t i = 0; i < sq * skv; i++)
        o_out[i] = out.o[i];
    fai_oracle_out_free(&out);
}

/* Compares a visibility pattern ("x" visible, "." not; rows of skv characters, one separator
 * between rows) with O. */
static int pattern_is(const double *o, int64_t sq, int64_t skv, const char *pattern) {
    for (int64_t i = 0; i < sq; i++) {
        const char *row = pattern + i * (skv + 1);
        int count = 0;
        for (int64_t j = 0; j < skv; j++)
            count += row[j] == 'x';
        for (int64_t j = 0; j < skv; j++) {
            const double want = row[j] == 'x' ? 1.0 / count : 0.0;
            if (fabs(o[i * skv + j] - want) > 1e-12) return 0;
        }
    }
    return 1;
}

TEST(oracle_visibility) {
    /* "x" visible, "." not: a row of Skv characters per query, "|" between rows */
    static const struct {
        fai_causal causal;
        int64_t window_left, window_right, seq_q, seq_kv;
        const char *pattern;
    } patterns[] = {
        {FAI_CAUSAL_NONE, -1, -1, 3, 5, "xxxxx|xxxxx|xxxxx"},
        {FAI_CAUSAL_BOTTOM_RIGHT, -1, -1, 3, 5, "xxx..|xxxx.|xxxxx"},
        {FAI_CAUSAL_TOP_LEFT, -1, -1, 3, 5, "x....|xx...|xxx.."},
        /* bottom-right with more queries than keys: the first rows see nothing */
        {FAI_CAUSAL_BOTTOM_RIGHT, -1, -1, 4, 2, "..|..|x.|xx"},
        /* window from the bottom-right diagonal, without causal */
        {FAI_CAUSAL_NONE, 1, 1, 3, 5, ".xxx.|..xxx|...xx"},
        /* causal clamps the right side to 0 */
        {FAI_CAUSAL_BOTTOM_RIGHT, 1, 1, 3, 5, ".xx..|..xx.|...xx"},
        {FAI_CAUSAL_TOP_LEFT, 0, -1, 3, 5, "x....|.x...|..x.."},
        {FAI_CAUSAL_NONE, -1, 0, 3, 5, "xxx..|xxxx.|xxxxx"},
    };
    for (size_t i = 0; i < sizeof patterns / sizeof patterns[0]; i++) {
        fai_problem pb;
        fai_problem_init(&pb);
        pb.causal = patterns[i].causal;
        pb.window_left = patterns[i].window_left;
        pb.window_right = patterns[i].window_right;
        double o[64];
        visibility(&pb, patterns[i].seq_q, patterns[i].seq_kv, o);
        if (!pattern_is(o, patterns[i].seq_q, patterns[i].seq_kv, patterns[i].pattern)) {
            fprintf(stderr, "  visibility pattern %zu differs\n", i);
            TEST_FAILED = 1;
        }
    }
}

TEST(oracle_softmax_by_hand) {
    /* one query, two keys: logits 0 and log 3 -> P = (1/4, 3/4) */
    fai_problem pb;
    fai_problem_init(&pb);
    pb.batch = 1;
    pb.heads_q = pb.heads_kv = 1;
    pb.seq_q = 1;
    pb.seq_kv = 2;
    pb.head_dim = 1;
    pb.head_dim_v = 2;
    pb.scale = 1.0f;
    pb.q_dtype = pb.k_dtype = pb.v_dtype = pb.o_dtype = FAI_DTYPE_F32;
    float q[1] = {1.0f}, k[2] = {0.0f, (float)log(3.0)}, v[4] = {4, 8, -4, 0}, o[2];
    fai_tensors t;
    memset(&t, 0, sizeof t);
    t.q = fai_tensor_bshd(q, FAI_DTYPE_F32, 1, 1, 1);
    t.k = fai_tensor_bshd(k, FAI_DTYPE_F32, 2, 1, 1);
    t.v = fai_tensor_bshd(v, FAI_DTYPE_F32, 2, 1, 2);
    t.o = fai_tensor_bshd(o, FAI_DTYPE_F32, 1, 1, 2);
    fai_oracle_out out;
    REQUIRE(fai_oracle_run(&pb, &t, &out, NULL, 0) == FAI_OK);
    const double l3 = (double)(float)log(3.0), p1 = exp(l3) / (1.0 + exp(l3)), p0 = 1.0 - p1;
    CHECK(fabs(out.o[0] - (4 * p0 - 4 * p1)) < 1e-14);
    CHECK(fabs(out.o[1] - 8 * p0) < 1e-14);
    CHECK(fabs(out.lse[0] - log(1.0 + exp(l3))) < 1e-14);
    CHECK(out.visible_pairs == 2);
    fai_oracle_out_free(&out);
    /* an additive mask of -inf on key 1 leaves key 0 alone; on both, the row is masked */
    const float add[2] = {0.0f, -INFINITY}, add_all[2] = {-INFINITY, -INFINITY};
    pb.mask_kind = FAI_MASK_ADD;
    t.mask.data = add;
    t.mask.stride_q = 2;
    REQUIRE(fai_oracle_run(&pb, &t, &out, NULL, 0) == FAI_OK);
    CHECK(out.o[0] == 4.0 && out.o[1] == 8.0 && out.lse[0] == 0.0);
    fai_oracle_out_free(&out);
    t.mask.data = add_all;
    REQUIRE(fai_oracle_run(&pb, &t, &out, NULL, 0) == FAI_OK);
    CHECK(out.o[0] == 0.0 && out.o[1] == 0.0 && out.lse[0] == -INFINITY);
    CHECK(out.row_state[0] == FAI_ORACLE_ROW_MASKED);
    fai_oracle_out_free(&out);
    /* keep and drop bytes: any nonzero byte counts */
    const unsigned char keep[2] = {0, 200}, drop[2] = {0, 17};
    pb.mask_kind = FAI_MASK_KEEP;
    t.mask.data = keep;
    REQUIRE(fai_oracle_run(&pb, &t, &out, NULL, 0) == FAI_OK);
    CHECK(out.o[0] == -4.0 && out.o[1] == 0.0);
    fai_oracle_out_free(&out);
    pb.mask_kind = FAI_MASK_DROP;
    t.mask.data = drop;
    REQUIRE(fai_oracle_run(&pb, &t, &out, NULL, 0) == FAI_OK);
    CHECK(out.o[0] == 4.0 && out.o[1] == 8.0);
    fai_oracle_out_free(&out);
}

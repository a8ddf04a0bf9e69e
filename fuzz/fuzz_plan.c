/* fuzz_plan.c - fai_plan_create on arbitrary problems.
 *
 * The input decodes into every field of a fai_problem: counts and options are drawn from small
 * values, edge values (0, -1, limits and one past them, INT64_MIN/MAX) or raw 64-bit integers;
 * enums get any int; the length arrays (seqlens, cu_seqlens) are built from the input with as
 * many entries as the batch needs, mostly consistent, sometimes not. Whatever the problem:
 *   - no crash, no undefined behaviour, no leak (ASan, UBSan, LeakSanitizer);
 *   - a failure returns a status other than FAI_OK, leaves the plan NULL and sets a non-empty
 *     fai_last_error() naming something;
 *   - a success clears fai_last_error(), and the plan's inspection functions agree with each
 *     other (worker ranges tile the line of all valid tiles, weights add up, counts are not
 *     negative, out-of-range indices are refused with a message).
 * Planning is linear in the query rows of all units, which a valid problem may make huge
 * (seq_q up to 2^31 per sequence): the decoder shrinks seq_q when batch x heads_kv x seq_q would
 * exceed a budget, so that each input runs in well under a second. Allocations above 64 MiB
 * fail (and must be reported as FAI_ERR_NO_MEMORY) instead of exhausting the machine. */
#include "fai.h"
#include "fuzz_input.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Large allocations return NULL (the library must report FAI_ERR_NO_MEMORY), below the fuzzer's
 * RSS limit. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) {
    return "allocator_may_return_null=1:max_allocation_size_mb=64";
}

#define ROW_BUDGET (INT64_C(1) << 22)
#define MAX_ARRAY_BATCH (INT64_C(1) << 20)

static const int64_t edges[] = {0,
                                1,
                                -1,
                                2,
                                3,
                                7,
                                8,
                                16,
                                63,
                                64,
                                65,
                                128,
                                576,
                                577,
                                1023,
                                1024,
                                1025,
                                4096,
                                4097,
                                65535,
                                65536,
                                65537,
                                INT64_C(1) << 24,
                                (INT64_C(1) << 24) + 1,
                                INT32_MAX,
                                (int64_t)INT32_MAX + 1,
                                INT32_MIN,
                                UINT32_MAX,
                                INT64_C(1) << 40,
                                INT64_MAX / 2,
                                INT64_MAX,
                                INT64_MIN,
                                -2};
#define EDGE_COUNT ((int)(sizeof edges / sizeof edges[0]))

/* A count or option: mostly small, else an edge value, a 16-bit or a raw 64-bit value. */
static int64_t take_int(fuzz_input *in, int64_t small_max) {
    const uint8_t selector = fuzz_u8(in);
    switch (selector % 8) {
    case 0:
    case 1:
    case 2:
    case 3:
        return fuzz_range(in, -1, small_max);
    case 4:
    case 5:
        return edges[fuzz_u8(in) % EDGE_COUNT];
    case 6:
        return (int64_t)(fuzz_u32(in) & 0xffffu);
    default:
        return (int64_t)fuzz_u64(in);
    }
}

/* An enum field: mostly a valid value, sometimes any int. */
static int take_enum(fuzz_input *in, int count) {
    const uint8_t selector = fuzz_u8(in);
    if (selector < 240) return selector % count;
    return (int)fuzz_u32(in);
}

static float take_scale(fuzz_input *in) {
    const uint8_t selector = fuzz_u8(in);
    if (selector < 150) return FAI_SCALE_DEFAULT;
    if (selector < 160) return 0.0f; /* uniform attention */
    if (selector < 240) return (float)fuzz_range(in, -64, 64) / 16.0f;
    uint32_t bits = fuzz_u32(in); /* any float: NaN, Inf, subnormals */
    float value;
    memcpy(&value, &bits, sizeof value);
    return value;
}

/* A length array of n entries: each mostly in [0, max], sometimes anything. With `prefix` the
 * entries are prefix sums (starting at 0) of such lengths, except when the input asks for a
 * raw array. */
static int32_t *take_lengths(fuzz_input *in, int64_t n, int64_t max, int prefix) {
    int32_t *lengths = malloc((size_t)(n > 0 ? n : 1) * sizeof *lengths);
    if (!lengths) return NULL;
    const uint8_t mode = fuzz_u8(in);
    const int raw = mode >= 224;
    const int64_t cap = max < 0 ? 0 : max > 64 ? 64 : max;
    int64_t sum = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t value;
        const uint8_t selector = fuzz_u8(in);
        if (selector < 200)
            value = fuzz_range(in, 0, cap);
        else if (selector < 230)
            value = max;
        else
            value = (int32_t)fuzz_u32(in);
        if (value > INT32_MAX) value = INT32_MAX; /* max may be any int64 */
        if (value < INT32_MIN) value = INT32_MIN;
        if (prefix && !raw) {
            if (i == 0) value = 0;
            sum += value; /* at most 2^20 entries of 32 bits: no overflow */
            value = sum;
        }
        lengths[i] = (int32_t)value; /* a sum past 2^31 wraps: invalid, as intended */
    }
    return lengths;
}

static void check_failure(fai_status status, const fai_plan *plan) {
    CHECK(status != FAI_OK);
    CHECK(plan == NULL);
    CHECK(strcmp(fai_status_string(status), "FAI_ERR_UNKNOWN") != 0);
    const char *message = fai_last_error();
    CHECK(message != NULL && message[0] != '\0');
    CHECK(strlen(message) < 512);
}

static void check_plan(const fai_problem *pb, fai_plan *plan) {
    CHECK(fai_last_error()[0] == '\0');
    fai_plan_info info;
    CHECK(fai_plan_get_info(plan, &info) == FAI_OK);
    CHECK(info.isa != NULL);
    CHECK(info.workspace_bytes == fai_plan_workspace_size(plan));
    CHECK(info.tile_q >= 1 && info.tile_kv >= 1 && info.tile_rows >= info.tile_q);
    CHECK(info.units >= 0 && info.total_weight >= 0);
    CHECK(info.visible_pairs >= 0);
    CHECK(info.workers >= 1 && info.workers <= FAI_MAX_WORKERS);
    if (pb->workers > 0) CHECK(info.workers == pb->workers);
    CHECK(info.threads >= 1 && info.threads <= info.workers);
    CHECK(info.split_units >= 0 && info.partials >= 2 * info.split_units);
    CHECK((info.split_kv != 0) == (info.split_units > 0));
    if (pb->split != FAI_SPLIT_AUTO) CHECK(info.split_units == 0);
    CHECK(info.imbalance >= 1.0 - 1e-9);

    /* the workers' line ranges tile [0, total_weight) in order, their weights add up */
    int64_t line = 0, weight = 0, unit = 0;
    for (int64_t w = 0; w < info.workers; w++) {
        fai_worker_range range;
        CHECK(fai_plan_get_worker(plan, w, &range) == FAI_OK);
        CHECK(range.line_begin == line && range.line_end >= range.line_begin);
        CHECK(range.weight == range.line_end - range.line_begin);
        CHECK(range.unit_begin >= 0 && range.unit_begin <= range.unit_end);
        CHECK(range.unit_end <= info.units);
        CHECK(range.unit_begin >= unit - 1); /* a split unit is shared with the previous one */
        if (range.unit_end > range.unit_begin) unit = range.unit_end;
        line = range.line_end;
        weight += range.weight;
    }
    CHECK(line == info.total_weight && weight == info.total_weight);
    fai_worker_range range;
    CHECK(fai_plan_get_worker(plan, info.workers, &range) == FAI_ERR_INVALID_ARG);
    CHECK(fai_last_error()[0] != '\0');
    CHECK(fai_plan_get_worker(plan, -1, &range) == FAI_ERR_INVALID_ARG);

    /* units: every one in range; their valid tiles add up to the total */
    if (info.units <= 4096) {
        int64_t tiles = 0;
        for (int64_t u = 0; u < info.units; u++) {
            fai_unit_info ui;
            CHECK(fai_plan_get_unit(plan, u, &ui) == FAI_OK);
            CHECK(ui.batch >= 0 && ui.batch < pb->batch);
            CHECK(ui.head_kv >= 0 && ui.head_kv < pb->heads_kv);
            CHECK(ui.heads_q >= 1 && ui.head_q_begin >= 0 &&
                  ui.head_q_begin + ui.heads_q <= pb->heads_q);
            CHECK(ui.q_begin >= 0 && ui.q_len >= 0 && ui.q_len <= info.tile_q);
            CHECK(ui.kv_tile_begin >= 0 && ui.kv_tiles >= 0);
            tiles += ui.kv_tiles;
        }
        CHECK(tiles == info.total_weight);
    }
    fai_unit_info ui;
    CHECK(fai_plan_get_unit(plan, info.units, &ui) == FAI_ERR_INVALID_ARG);
    CHECK(fai_last_error()[0] != '\0');
    CHECK(fai_plan_get_unit(plan, -1, &ui) == FAI_ERR_INVALID_ARG);
    CHECK(fai_plan_get_info(plan, NULL) == FAI_ERR_INVALID_ARG);
    CHECK(fai_plan_get_worker(plan, 0, NULL) == FAI_ERR_INVALID_ARG);
    CHECK(fai_plan_get_unit(plan, 0, NULL) == FAI_ERR_INVALID_ARG);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_input in = {data, size, 0};
    fai_problem pb;
    fai_problem_init(&pb);
    pb.batch = take_int(&in, 6);
    pb.heads_kv = take_int(&in, 8);
    /* heads_q mostly a multiple of heads_kv */
    const int64_t group = take_int(&in, 70);
    if (fuzz_u8(&in) < 200 && pb.heads_kv > 0 && group > 0 && group < 65536 && pb.heads_kv < 65536)
        pb.heads_q = pb.heads_kv * group;
    else
        pb.heads_q = group;
    pb.seq_q = take_int(&in, 40);
    pb.seq_kv = take_int(&in, 300);
    pb.head_dim = take_int(&in, 130);
    pb.head_dim_v = take_int(&in, 130);
    pb.q_dtype = (fai_dtype)take_enum(&in, 6); /* the quantized ones are refused for Q, O */
    pb.k_dtype = (fai_dtype)take_enum(&in, 6);
    pb.v_dtype = (fai_dtype)take_enum(&in, 6);
    pb.o_dtype = (fai_dtype)take_enum(&in, 6);
    pb.scale = take_scale(&in);
    pb.causal = (fai_causal)take_enum(&in, 3);
    pb.window_left = take_int(&in, 40);
    pb.window_right = take_int(&in, 40);
    pb.mask_kind = (fai_mask_kind)take_enum(&in, 5);
    pb.split = (fai_split)take_enum(&in, 3);
    pb.workers = take_int(&in, 20);
    pb.threads = take_int(&in, 4);
    pb.tile_q = take_int(&in, 9);
    pb.tile_kv = take_int(&in, 70);
    /* score modifiers: any softcap (NaN, negative and infinite ones are refused), flags of any
     * value */
    pb.softcap = fuzz_u8(&in) < 200 ? 0.0f : take_scale(&in);
    pb.alibi = take_enum(&in, 2);
    pb.sinks = take_enum(&in, 2);
    const uint8_t paging = fuzz_u8(&in);
    if (paging < 96) {
        pb.page_size = take_int(&in, 20);
        pb.num_pages = take_int(&in, 40);
        pb.pages_per_seq = take_int(&in, 12);
        pb.trust_block_table = (int)take_enum(&in, 2);
    }
    /* the length arrays, with the entries the batch needs */
    const uint8_t arrays = fuzz_u8(&in);
    int32_t *seqlens_q = NULL, *seqlens_kv = NULL, *cu_q = NULL, *cu_kv = NULL;
    if (pb.batch >= 0 && pb.batch <= MAX_ARRAY_BATCH) {
        const int64_t kv_max =
            pb.page_size > 0 && pb.page_size < INT32_MAX ? pb.page_size * 4 : pb.seq_kv;
        if (arrays & 1) seqlens_q = take_lengths(&in, pb.batch, pb.seq_q, 0);
        if (arrays & 2) cu_q = take_lengths(&in, pb.batch + 1, pb.seq_q, 1);
        if (arrays & 4 || (pb.page_size > 0 && !(arrays & 16)))
            seqlens_kv = take_lengths(&in, pb.batch, kv_max, 0);
        if (arrays & 8) cu_kv = take_lengths(&in, pb.batch + 1, pb.seq_kv, 1);
    }
    /* both forms of a length may be given: the problem must say which is wrong */
    pb.seqlens_q = arrays & 32 ? NULL : seqlens_q;
    pb.cu_seqlens_q = cu_q;
    pb.seqlens_kv = seqlens_kv;
    pb.cu_seqlens_kv = arrays & 64 ? NULL : cu_kv;

    /* the budget of planning work (query rows of all units): shrink seq_q if a valid problem
     * would exceed it */
    if (pb.batch > 0 && pb.heads_kv > 0 && pb.heads_q > 0 && pb.seq_q > 0 &&
        pb.seq_q <= INT32_MAX) {
        const int64_t slices = pb.heads_q / pb.heads_kv / 64 + 1;
        int64_t per_row;
        if (__builtin_mul_overflow(pb.batch, pb.heads_kv, &per_row) ||
            __builtin_mul_overflow(per_row, slices, &per_row) || per_row > ROW_BUDGET)
            pb.seq_q = 0;
        else if (pb.seq_q > ROW_BUDGET / per_row)
            pb.seq_q = ROW_BUDGET / per_row;
    }

    fai_plan *plan = (fai_plan *)&pb; /* must be replaced by NULL on failure */
    const uint8_t how = fuzz_u8(&in);
    /* K's channel scales, a flag of any value (refused unless K is quantized); read last, so
     * the inputs before it keep their meaning */
    pb.k_channel_scales = take_enum(&in, 3);
    fai_status status;
    if (how == 255) {
        status = fai_plan_create(NULL, &plan);
        check_failure(status, plan);
    } else if (how == 254) {
        status = fai_plan_create(&pb, NULL);
        CHECK(status == FAI_ERR_INVALID_ARG && fai_last_error()[0] != '\0');
    } else {
        status = fai_plan_create(&pb, &plan);
        if (status == FAI_OK) {
            CHECK(plan != NULL && plan != (fai_plan *)&pb);
            check_plan(&pb, plan);
            fai_plan_free(plan);
        } else {
            check_failure(status, plan);
        }
    }
    free(seqlens_q);
    free(seqlens_kv);
    free(cu_q);
    free(cu_kv);
    return 0;
}

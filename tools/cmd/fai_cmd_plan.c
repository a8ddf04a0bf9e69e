/* fai plan: what fai_plan_create decides for a shape: the tile shape, the units, each worker's
 * contiguous unit range and weight, and the imbalance. With --hw, the tile against a machine's
 * buffers: the seed's resource table on an NPU profile (fai_budget.h), fai's own cache budgets
 * on the host, the tiles that fit, and the split over that machine's cores. */
#include "fai_budget.h"
#include "fai_cmd.h"
#include "fai_hw.h"
#include "fai_json.h"
#include "fai_oracle.h"
#include "fai_shape.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The seed's pipeline depth, and the deepest --task-num accepted. */
#define DEFAULT_TASK_NUM 3
#define MAX_TASK_NUM 64
/* Largest tile side --tile takes (the planner's own limits are checked by the planner). */
#define MAX_TILE_SIDE (INT64_C(1) << 20)
#define REASON_SIZE 512

/* The candidate tiles listed: the seed's for an NPU, fai's for a CPU. */
static const int64_t npu_candidate_q[] = {16, 32, 64, 128, 256};
static const int64_t npu_candidate_kv[] = {64, 128, 256, 512};
static const int64_t cpu_candidate_q[] = {1, 2, 4, 8, 16, 32, 64, 128};
static const int64_t cpu_candidate_kv[] = {16, 32, 64, 128, 256, 512};
#define COUNT_OF(array) ((int)(sizeof(array) / sizeof((array)[0])))
#define MAX_CANDIDATES 64
_Static_assert(COUNT_OF(npu_candidate_q) * COUNT_OF(npu_candidate_kv) <= MAX_CANDIDATES &&
                   COUNT_OF(cpu_candidate_q) * COUNT_OF(cpu_candidate_kv) <= MAX_CANDIDATES,
               "every candidate tile must have room in a candidate_list");

typedef struct plan_options {
    int json;
    int64_t workers; /* 0: one per online CPU, or the profile's matrix cores */
    fai_split strategy;
    int64_t tile_q, tile_kv, tile_d; /* 0: not given */
    int has_hw;
    ft_hw hw;
    int64_t task_num; /* 0: not given */
} plan_options;

/* A tile that fits, with its use of the two buffers that bound it. */
typedef struct candidate {
    int64_t tile_q, tile_kv, tile_d;
    int64_t first_bytes, second_bytes; /* NPU: UB and L1; CPU: L1d and L2 */
} candidate;

typedef struct candidate_list {
    candidate items[MAX_CANDIDATES];
    int count;
} candidate_list;

static void print_usage(FILE *out) {
    fprintf(out,
            "usage: fai plan <shape> [--workers N] [--strategy auto|units|greedy]\n"
            "                [--tile QxKV | --tile QxKVxD] [--hw NAME] [--task-num N] [--json]\n"
            "Shows the tile shape, the units, each worker's unit range and weight (valid kv\n"
            "tiles) and the imbalance (max / mean worker weight, over every worker asked for).\n"
            "Strategies: auto cuts the line of all valid tiles into equal shares, splitting a\n"
            "unit's kv range across workers where needed (split-KV); units keeps units whole;\n"
            "greedy is the seed's ComputeSplitNBSeq, for comparison.\n"
            "\n"
            "  --tile QxKV      query positions x keys per tile (qSeqBase x kvSeqBase); on an\n"
            "                   NPU profile embedBase is Align(head dim, 16), and the tile is\n"
            "                   the seed's 128x128 unless given\n"
            "  --tile QxKVxD    the same with embedBase D (on a CPU D must be the head dim)\n"
            "  --hw NAME        the tile against a machine's buffers, NAME one of\n"
            "                   %s.\n"
            "                   NPU: the seed's resource table (UB per AIV, L1, L0A, L0B, L0C per\n"
            "                   AIC), whether it fits and why not, the tiles that fit, and the\n"
            "                   split over the AIC count (the seed's blockDim), by the seed's\n"
            "                   greedy rule and by --strategy. host: fai's tile against L1d and\n"
            "                   L2, the tiles that fit, and the split as without --hw\n"
            "  --task-num N     KERNEL_TASK_NUM, the seed's pipeline depth (NPU; default 3)\n"
            "  --no-tuned       ignore the tuning cache (`fai tune`): the planner's own tile\n"
            "  --json           one JSON object\n"
            "\n"
            "A tile too large for the machine is an answer, not an error: the table says\n"
            "`fits no` and names every buffer it overflows (exit 0).\n\n%s",
            ft_hw_names(), ft_shape_usage);
}

/* --tile QxKV or QxKVxD: two or three sides of digits only, each in 1..MAX_TILE_SIDE. */
static int parse_tile(const char *text, plan_options *options) {
    int64_t side[3] = {0, 0, 0};
    char buffer[64];
    if (strlen(text) >= sizeof buffer) return -1;
    strcpy(buffer, text);
    int count = 0;
    for (char *part = buffer, *next; part; part = next) {
        next = strchr(part, 'x');
        if (next) *next++ = '\0';
        if (count == 3 || strspn(part, "0123456789") != strlen(part) ||
            ft_parse_int64(part, 1, MAX_TILE_SIDE, &side[count]))
            return -1;
        count++;
    }
    if (count < 2) return -1;
    options->tile_q = side[0];
    options->tile_kv = side[1];
    options->tile_d = side[2];
    return 0;
}

/* --no-tuned: every plan of this command ignores the tuning cache */
static int ignore_tuning_cache;

static int parse_strategy(const char *name, fai_split *strategy) {
    if (!strcmp(name, "auto"))
        *strategy = FAI_SPLIT_AUTO;
    else if (!strcmp(name, "units"))
        *strategy = FAI_SPLIT_UNITS;
    else if (!strcmp(name, "greedy"))
        *strategy = FAI_SPLIT_GREEDY;
    else
        return -1;
    return 0;
}

/* Reads the options the shape parser left. Returns 0, 1 after --help, or -1 after printing one
 * line to stderr. */
static int parse_options(int argc, char **argv, const char *used, plan_options *options) {
    for (int i = 1; i < argc; i++) {
        if (used[i]) continue;
        const char *arg = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            print_usage(stdout);
            return 1;
        } else if (!strcmp(arg, "--json")) {
            options->json = 1;
            continue;
        } else if (!strcmp(arg, "--no-tuned")) {
            ignore_tuning_cache = 1;
            continue;
        } else if (!value) {
            fprintf(stderr, "fai plan: unknown or incomplete option '%s' (fai plan --help)\n", arg);
            return -1;
        }
        i++;
        if (!strcmp(arg, "--workers")) {
            if (ft_parse_int64(value, 1, FAI_MAX_WORKERS, &options->workers)) {
                fprintf(stderr, "fai plan: --workers needs an integer in 1..%d, got '%s'\n",
                        FAI_MAX_WORKERS, value);
                return -1;
            }
        } else if (!strcmp(arg, "--strategy")) {
            if (parse_strategy(value, &options->strategy)) {
                fprintf(stderr, "fai plan: --strategy needs auto, units or greedy, got '%s'\n",
                        value);
                return -1;
            }
        } else if (!strcmp(arg, "--tile")) {
            if (parse_tile(value, options)) {
                fprintf(stderr,
                        "fai plan: --tile needs QxKV or QxKVxD (integers 1..%lld), got '%s'\n",
                        (long long)MAX_TILE_SIDE, value);
                return -1;
            }
        } else if (!strcmp(arg, "--hw")) {
            if (ft_hw_find(value, &options->hw)) {
                fprintf(stderr, "fai plan: --hw needs %s, got '%s'\n", ft_hw_names(), value);
                return -1;
            }
            options->has_hw = 1;
        } else if (!strcmp(arg, "--task-num")) {
            if (ft_parse_int64(value, 1, MAX_TASK_NUM, &options->task_num)) {
                fprintf(stderr, "fai plan: --task-num needs an integer in 1..%d, got '%s'\n",
                        MAX_TASK_NUM, value);
                return -1;
            }
        } else {
            fprintf(stderr, "fai plan: unknown or incomplete option '%s' (fai plan --help)\n", arg);
            return -1;
        }
    }
    return 0;
}

/* Options that only mean something together. */
static int check_options(const plan_options *options, const ft_shape *shape) {
    const int npu = options->has_hw && options->hw.kind == FT_HW_NPU;
    if (options->task_num && !npu) {
        fprintf(stderr, "fai plan: --task-num %lld needs an NPU profile (--hw ascend950 ...)\n",
                (long long)options->task_num);
        return -1;
    }
    if (options->tile_d && !npu && options->tile_d != shape->d) {
        fprintf(stderr,
                "fai plan: --tile %lldx%lldx%lld: D = %lld must be the head dim %lld on a CPU\n",
                (long long)options->tile_q, (long long)options->tile_kv, (long long)options->tile_d,
                (long long)options->tile_d, (long long)shape->d);
        return -1;
    }
    return 0;
}

/* -- plans ---------------------------------------------------------------------------------- */

/* A plan of the shape with the given tile (0: the planner's), workers and split. On failure
 * prints one line naming what the planner refused (and the tile, when one was asked for) and
 * returns nonzero. */
static int create_plan(const ft_shape *shape, int32_t *seqlens_kv, int64_t tile_q, int64_t tile_kv,
                       int64_t workers, fai_split split, fai_plan **plan) {
    fai_problem problem;
    ft_shape_problem(shape, &problem, seqlens_kv);
    problem.ignore_tuning = ignore_tuning_cache;
    problem.workers = workers;
    problem.tile_q = tile_q;
    problem.tile_kv = tile_kv;
    problem.split = split;
    if (fai_plan_create(&problem, plan) == FAI_OK) return 0;
    char message[256];
    snprintf(message, sizeof message, "%s", fai_last_error());
    /* the tile is to blame when the same problem plans with the planner's own tile */
    fai_plan *untiled = NULL;
    problem.tile_q = problem.tile_kv = 0;
    if ((tile_q || tile_kv) && fai_plan_create(&problem, &untiled) == FAI_OK)
        fprintf(stderr, "fai plan: the planner refuses tile %lldx%lld: %s\n", (long long)tile_q,
                (long long)tile_kv, message);
    else
        fprintf(stderr, "fai plan: %s\n", message);
    fai_plan_free(untiled);
    return -1;
}

static const char *strategy_name(fai_split strategy) {
    return strategy == FAI_SPLIT_GREEDY ? "greedy" : strategy == FAI_SPLIT_UNITS ? "units" : "auto";
}

static int64_t max_worker_weight(const fai_plan *plan, int64_t workers) {
    int64_t heaviest = 0;
    for (int64_t w = 0; w < workers; w++) {
        fai_worker_range range;
        fai_plan_get_worker(plan, w, &range);
        if (range.weight > heaviest) heaviest = range.weight;
    }
    return heaviest;
}

/* -- the plan itself, as `fai plan` without --hw prints it ----------------------------------- */

static void print_shape_line(const ft_shape *shape) {
    printf("shape %s: B=%lld Hq=%lld Hkv=%lld Sq=%lld Skv=%lld D=%lld Dv=%lld%s%s\n", shape->name,
           (long long)shape->b, (long long)shape->hq, (long long)shape->hkv, (long long)shape->sq,
           (long long)shape->skv, (long long)shape->d, (long long)shape->dv,
           shape->causal == FAI_CAUSAL_BOTTOM_RIGHT ? " causal"
           : shape->causal == FAI_CAUSAL_TOP_LEFT   ? " causal-top-left"
                                                    : "",
           shape->page_size ? " paged" : "");
}

static void print_plan_text(const fai_plan *plan, const fai_plan_info *info) {
    printf("tile        %lld x %lld (qSeqBase x kvSeqBase), %lld rows with the GQA group (%s)\n",
           (long long)info->tile_q, (long long)info->tile_kv, (long long)info->tile_rows,
           info->tile_source);
    printf("units       %lld (batch, kv-head group, q tile), %lld valid kv tiles in all\n",
           (long long)info->units, (long long)info->total_weight);
    printf("workers     %lld on %lld threads, isa %s, workspace %zu bytes\n",
           (long long)info->workers, (long long)info->threads, info->isa, info->workspace_bytes);
    printf("imbalance   %.4f (max / mean worker weight)\n", info->imbalance);
    printf("split-KV    %s: %lld units in %lld parts\n", info->split_kv ? "yes" : "no",
           (long long)info->split_units, (long long)info->partials);
    printf("%8s %12s %12s %12s %12s %10s\n", "worker", "unit_begin", "unit_end", "tile_begin",
           "tile_end", "weight");
    for (int64_t w = 0; w < info->workers; w++) {
        fai_worker_range range;
        fai_plan_get_worker(plan, w, &range);
        printf("%8lld %12lld %12lld %12lld %12lld %10lld\n", (long long)w,
               (long long)range.unit_begin, (long long)range.unit_end, (long long)range.line_begin,
               (long long)range.line_end, (long long)range.weight);
    }
}

static void json_worker_weights(ft_json *json, const char *key, const fai_plan *plan,
                                int64_t workers) {
    ft_json_array(json, key);
    for (int64_t w = 0; w < workers; w++) {
        fai_worker_range range;
        fai_plan_get_worker(plan, w, &range);
        ft_json_int(json, NULL, range.weight);
    }
    ft_json_end(json);
}

/* The keys of `fai plan --json`, in an object the caller opened (--hw adds its keys after). */
static void json_plan_fields(ft_json *json, const ft_shape *shape, const fai_plan *plan,
                             const fai_plan_info *info, fai_split strategy) {
    ft_json_string(json, "shape", shape->name);
    ft_json_int(json, "tile_q", info->tile_q);
    ft_json_int(json, "tile_kv", info->tile_kv);
    ft_json_int(json, "tile_rows", info->tile_rows);
    ft_json_int(json, "units", info->units);
    ft_json_int(json, "workers", info->workers);
    ft_json_int(json, "threads", info->threads);
    ft_json_int(json, "total_weight", info->total_weight);
    ft_json_number(json, "imbalance", "%.6f", info->imbalance);
    ft_json_bool(json, "split_kv", info->split_kv);
    ft_json_int(json, "split_units", info->split_units);
    ft_json_int(json, "partials", info->partials);
    ft_json_string(json, "strategy", strategy_name(strategy));
    ft_json_int(json, "workspace_bytes", (long long)info->workspace_bytes);
    ft_json_string(json, "isa", info->isa);
    ft_json_string(json, "tile_source", info->tile_source);
    ft_json_string(json, "tile_class", info->tile_class);
    json_worker_weights(json, "worker_weights", plan, info->workers);
    ft_json_array(json, "worker_units");
    for (int64_t w = 0; w < info->workers; w++) {
        fai_worker_range range;
        fai_plan_get_worker(plan, w, &range);
        ft_json_array(json, NULL);
        ft_json_int(json, NULL, range.unit_begin);
        ft_json_int(json, NULL, range.unit_end);
        ft_json_end(json);
    }
    ft_json_end(json);
}

static int run_plain(const ft_shape *shape, const plan_options *options, int32_t *seqlens_kv) {
    fai_plan *plan = NULL;
    if (create_plan(shape, seqlens_kv, options->tile_q, options->tile_kv, options->workers,
                    options->strategy, &plan))
        return 2;
    fai_plan_info info;
    fai_plan_get_info(plan, &info);
    if (options->json) {
        ft_json json;
        ft_json_init(&json, stdout, 0);
        ft_json_object(&json, NULL);
        json_plan_fields(&json, shape, plan, &info, options->strategy);
        ft_json_end(&json);
    } else {
        print_shape_line(shape);
        print_plan_text(plan, &info);
    }
    fai_plan_free(plan);
    return 0;
}

/* -- shared by the profiles ------------------------------------------------------------------ */

static const char *size_text(int64_t bytes, char *text, size_t size) {
    ft_budget_format_size(bytes, text, size);
    return text;
}

static void print_candidates_text(const candidate_list *list, const plan_options *options,
                                  const char *first_name, const char *second_name) {
    int given_listed = 0;
    printf("            %8s %9s %6s %12s %12s\n", "tile_q", "tile_kv", "D", first_name,
           second_name);
    for (int c = 0; c < list->count; c++) {
        const candidate *item = &list->items[c];
        const int given = item->tile_q == options->tile_q && item->tile_kv == options->tile_kv;
        given_listed |= given;
        printf("          %s %8lld %9lld %6lld %12lld %12lld\n", given ? "* " : "  ",
               (long long)item->tile_q, (long long)item->tile_kv, (long long)item->tile_d,
               (long long)item->first_bytes, (long long)item->second_bytes);
    }
    if (list->count == 0) printf("            none\n");
    if (options->tile_q && !given_listed)
        printf("            (the given tile is not among them)\n");
}

static void json_candidates(ft_json *json, const candidate_list *list, const char *first_key,
                            const char *second_key) {
    ft_json_array(json, "candidates");
    for (int c = 0; c < list->count; c++) {
        const candidate *item = &list->items[c];
        ft_json_object(json, NULL);
        ft_json_int(json, "tile_q", item->tile_q);
        ft_json_int(json, "tile_kv", item->tile_kv);
        ft_json_int(json, "tile_d", item->tile_d);
        ft_json_int(json, first_key, item->first_bytes);
        ft_json_int(json, second_key, item->second_bytes);
        ft_json_end(json);
    }
    ft_json_end(json);
}

/* "fits yes", or "fits no:" and each buffer that overflows on a line of its own. */
static void print_fits_text(int fits, const char *reason) {
    if (fits) {
        printf("fits        yes\n");
        return;
    }
    printf("fits        no:%s", reason[0] ? "" : "\n");
    for (const char *part = reason; *part;) {
        const char *end = strstr(part, "; ");
        const int length = end ? (int)(end - part) : (int)strlen(part);
        printf("%s%.*s\n", part == reason ? " " : "            ", length, part);
        part = end ? end + 2 : part + length;
    }
}

static void json_fits(ft_json *json, int fits, const char *reason) {
    ft_json_bool(json, "fits", fits);
    if (!fits) ft_json_string(json, "reason", reason);
}

static void json_greedy(ft_json *json, const fai_plan *greedy, const fai_plan_info *info) {
    ft_json_int(json, "greedy_units", info->units);
    ft_json_int(json, "greedy_total_weight", info->total_weight);
    ft_json_number(json, "greedy_imbalance", "%.6f", info->imbalance);
    json_worker_weights(json, "greedy_worker_weights", greedy, info->workers);
}

/* -- NPU profiles: the seed's resource table ------------------------------------------------- */

/* The seed's kernel has one matmul input type; fai's shapes may have an f32 Q next to f16 K/V,
 * so the model takes K/V's type for Q too, as the kernel would receive it. */
static int64_t npu_input_bytes(const ft_shape *shape) {
    return (int64_t)fai_dtype_size(shape->kv_dtype);
}

static void npu_budget(const ft_hw *hw, int64_t input_bytes, int64_t task_num, int64_t tile_q,
                       int64_t tile_kv, int64_t tile_d, ft_budget *budget) {
    const ft_budget_tile tile = {tile_q, tile_kv, tile_d};
    const ft_budget_types types = ft_budget_types_for(input_bytes);
    ft_budget_compute(&tile, &types, task_num, hw->cv_ratio, budget);
}

static int npu_fits(const ft_hw *hw, const ft_budget *budget,
                    ft_budget_buffer buffers[FT_BUDGET_BUFFERS], char *reason, size_t size) {
    ft_budget_buffers(budget, hw, buffers);
    return ft_budget_fits(buffers, FT_BUDGET_BUFFERS, reason, size);
}

static void find_npu_candidates(const plan_options *options, int64_t input_bytes,
                                candidate_list *list) {
    list->count = 0;
    for (int q = 0; q < COUNT_OF(npu_candidate_q); q++) {
        for (int kv = 0; kv < COUNT_OF(npu_candidate_kv); kv++) {
            ft_budget budget;
            ft_budget_buffer buffers[FT_BUDGET_BUFFERS];
            npu_budget(&options->hw, input_bytes, options->task_num, npu_candidate_q[q],
                       npu_candidate_kv[kv], options->tile_d, &budget);
            if (!npu_fits(&options->hw, &budget, buffers, NULL, 0)) continue;
            const candidate item = {npu_candidate_q[q], npu_candidate_kv[kv], options->tile_d,
                                    budget.ub_bytes, budget.l1_bytes};
            list->items[list->count++] = item;
        }
    }
}

static void print_budget_item(const char *group, const char *name, const char *seed_name,
                              int64_t bytes) {
    printf("%-11s %-15s %-28s %8lld\n", group, name, seed_name, (long long)bytes);
}

static void print_npu_items(const ft_budget *budget, int64_t task_num, int64_t input_bytes) {
    char label[40];
    printf("static      MM1_RESULT_SIZE %8lld = qSeqBase / CV_RATIO * kvSeqBase * 4\n",
           (long long)budget->mm1_result_size);
    printf("            MM2_RESULT_SIZE %8lld = qSeqBase / CV_RATIO * Align64(embedBase) * 4\n",
           (long long)budget->mm2_result_size);
    printf("            SHARE_UB_SIZE   %8lld = CeilDiv(qSeqBase, 2) * 4\n",
           (long long)budget->share_ub_size);
    printf("            MM2_LEFT_SIZE   %8lld = qSeqBase * kvSeqBase * %lld\n",
           (long long)budget->mm2_left_size, (long long)input_bytes);
    print_budget_item("UB per AIV", "S buffers", "bmm1TensorList[2]", budget->ub_s_buffers);
    print_budget_item("", "Otmp buffers", "bmm2TensorList[2]", budget->ub_otmp_buffers);
    snprintf(label, sizeof label, "sumUb/maxUb/expUb[%lld]", (long long)task_num);
    print_budget_item("", "softmax state", label, budget->ub_softmax_state);
    print_budget_item("", "P staging", "2 P tiles", budget->ub_p_buffers);
    print_budget_item("", "mask", "1 mask tile (half)", budget->ub_mask);
    print_budget_item("", "shared", "2 x SHARE_UB_SIZE", budget->ub_share);
    print_budget_item("", "O accumulator", "rows of O rescaled here", budget->ub_o_accumulator);
    snprintf(label, sizeof label, "mm2AL1TensorList[%lld]", (long long)task_num);
    print_budget_item("L1 per AIC", "P for PV", label, budget->l1_p_buffers);
    print_budget_item("", "Q, K, V tiles", "2 of each (double buffer)", budget->l1_qkv_tiles);
    print_budget_item("L0A", "QK / PV left", "2 x max(Q tile, P tile)", budget->l0a_bytes);
    print_budget_item("L0B", "QK / PV right", "2 x max(K tile, V tile)", budget->l0b_bytes);
    print_budget_item("L0C", "results", "2 S + 2 PV results, f32", budget->l0c_bytes);
}

static void print_buffers_text(const ft_budget_buffer *buffers, int count) {
    printf("%-11s %10s %10s %7s\n", "buffer", "bytes", "capacity", "use");
    for (int i = 0; i < count; i++) {
        char used[32], capacity[32];
        printf("%-11s %10lld %10lld %6.1f%%  (%s of %s)\n", buffers[i].name,
               (long long)buffers[i].bytes, (long long)buffers[i].capacity,
               100.0 * (double)buffers[i].bytes / (double)buffers[i].capacity,
               size_text(buffers[i].bytes, used, sizeof used),
               size_text(buffers[i].capacity, capacity, sizeof capacity));
    }
}

static void print_hw_npu_text(const ft_hw *hw) {
    char sizes[5][32];
    printf("hw          %s: %lld AIC, %lld AIV (CV ratio %lld)\n"
           "            UB %s, L1 %s, L0A %s, L0B %s, L0C %s\n",
           hw->name, (long long)hw->matrix_cores, (long long)hw->vector_cores,
           (long long)hw->cv_ratio, size_text(hw->ub_bytes, sizes[0], 32),
           size_text(hw->l1_bytes, sizes[1], 32), size_text(hw->l0a_bytes, sizes[2], 32),
           size_text(hw->l0b_bytes, sizes[3], 32), size_text(hw->l0c_bytes, sizes[4], 32));
    printf("            %s\n", hw->source);
}

/* One row of the split table: a strategy's plan over the profile's cores. */
static void print_split_row(const char *label, const fai_plan *plan) {
    fai_plan_info info;
    fai_plan_get_info(plan, &info);
    const double mean = info.workers ? (double)info.total_weight / (double)info.workers : 0.0;
    char blocks[48];
    snprintf(blocks, sizeof blocks, "%lld / %.2f", (long long)max_worker_weight(plan, info.workers),
             mean);
    printf("            %-14s %6lld %13lld %10.4f %18s", label, (long long)info.units,
           (long long)info.total_weight, info.imbalance, blocks);
    if (info.split_kv)
        printf("  split-KV: %lld units in %lld parts", (long long)info.split_units,
               (long long)info.partials);
    printf("\n");
}

/* The split of the shape over `cores` by the seed's greedy rule and by fai's strategy. */
static void print_split_table(const char *cores, const ft_shape *shape, fai_split strategy,
                              const fai_plan *plan, const fai_plan *greedy) {
    fai_plan_info info;
    fai_plan_get_info(plan, &info);
    char label[32];
    printf("split       %lld workers: %s\n", (long long)info.workers, cores);
    printf("            valid blocks of %lld x %lld tiles, counted by fai's planner\n",
           (long long)info.tile_q, (long long)info.tile_kv);
    printf("            %-14s %6s %13s %10s %18s\n", "strategy", "units", "valid blocks",
           "imbalance", "max / mean blocks");
    print_split_row("greedy (seed)", greedy);
    snprintf(label, sizeof label, "%s (fai)", strategy_name(strategy));
    print_split_row(label, plan);
    if (shape->hq > shape->hkv)
        printf("            a unit holds a GQA group: %lld q heads x %lld positions = %lld rows\n",
               (long long)(info.tile_rows / info.tile_q), (long long)info.tile_q,
               (long long)info.tile_rows);
}

static void print_npu_text(const plan_options *options, const ft_shape *shape, int64_t input_bytes,
                           const ft_budget *budget, const ft_budget_buffer *buffers, int fits,
                           const char *reason, const candidate_list *list, const fai_plan *plan,
                           const fai_plan *greedy) {
    print_shape_line(shape);
    print_hw_npu_text(&options->hw);
    printf("tile        %lld x %lld x %lld (qSeqBase x kvSeqBase x embedBase)\n"
           "            inputs %s (%lld bytes), KERNEL_TASK_NUM %lld\n",
           (long long)options->tile_q, (long long)options->tile_kv, (long long)options->tile_d,
           fai_dtype_name(shape->kv_dtype), (long long)input_bytes, (long long)options->task_num);
    const int64_t aligned_d = (shape->d + 15) / 16 * 16;
    if (options->tile_d != aligned_d)
        printf("            embedBase %lld is not Align(head dim %lld, 16) = %lld\n",
               (long long)options->tile_d, (long long)shape->d, (long long)aligned_d);
    if (shape->dv != shape->d)
        printf("            PV takes embedBase too: the seed's tile has one head dim (Dv = %lld)\n",
               (long long)shape->dv);
    print_npu_items(budget, options->task_num, input_bytes);
    print_buffers_text(buffers, FT_BUDGET_BUFFERS);
    print_fits_text(fits, reason);
    printf("candidates  tiles that fit %s at embedBase %lld (* = this tile)\n", options->hw.name,
           (long long)options->tile_d);
    print_candidates_text(list, options, "UB bytes", "L1 bytes");
    char cores[64];
    if (options->workers)
        snprintf(cores, sizeof cores, "--workers");
    else
        snprintf(cores, sizeof cores, "%s's AIC count (the seed's blockDim)", options->hw.name);
    print_split_table(cores, shape, options->strategy, plan, greedy);
}

static void print_npu_json(const plan_options *options, const ft_shape *shape, int64_t input_bytes,
                           const ft_budget *budget, const ft_budget_buffer *buffers, int fits,
                           const char *reason, const candidate_list *list, const fai_plan *plan,
                           const fai_plan *greedy) {
    const ft_hw *hw = &options->hw;
    fai_plan_info info, greedy_info;
    fai_plan_get_info(plan, &info);
    fai_plan_get_info(greedy, &greedy_info);
    ft_json json;
    ft_json_init(&json, stdout, 0);
    ft_json_object(&json, NULL);
    json_plan_fields(&json, shape, plan, &info, options->strategy);
    ft_json_string(&json, "hw", hw->name);
    ft_json_string(&json, "hw_kind", "npu");
    ft_json_int(&json, "aic", hw->matrix_cores);
    ft_json_int(&json, "aiv", hw->vector_cores);
    ft_json_int(&json, "cv_ratio", hw->cv_ratio);
    ft_json_int(&json, "tile_d", options->tile_d);
    ft_json_int(&json, "input_bytes", input_bytes);
    ft_json_int(&json, "task_num", options->task_num);
    ft_json_int(&json, "mm1_result_size", budget->mm1_result_size);
    ft_json_int(&json, "mm2_result_size", budget->mm2_result_size);
    ft_json_int(&json, "share_ub_size", budget->share_ub_size);
    ft_json_int(&json, "mm2_left_size", budget->mm2_left_size);
    ft_json_object(&json, "ub_items");
    ft_json_int(&json, "s_buffers", budget->ub_s_buffers);
    ft_json_int(&json, "otmp_buffers", budget->ub_otmp_buffers);
    ft_json_int(&json, "softmax_state", budget->ub_softmax_state);
    ft_json_int(&json, "p_buffers", budget->ub_p_buffers);
    ft_json_int(&json, "mask", budget->ub_mask);
    ft_json_int(&json, "share", budget->ub_share);
    ft_json_int(&json, "o_accumulator", budget->ub_o_accumulator);
    ft_json_end(&json);
    ft_json_object(&json, "l1_items");
    ft_json_int(&json, "p_buffers", budget->l1_p_buffers);
    ft_json_int(&json, "qkv_tiles", budget->l1_qkv_tiles);
    ft_json_end(&json);
    for (int i = 0; i < FT_BUDGET_BUFFERS; i++) {
        char key[64];
        snprintf(key, sizeof key, "%s_bytes", buffers[i].key);
        ft_json_int(&json, key, buffers[i].bytes);
        snprintf(key, sizeof key, "%s_capacity", buffers[i].key);
        ft_json_int(&json, key, buffers[i].capacity);
    }
    json_fits(&json, fits, reason);
    json_candidates(&json, list, "ub_bytes", "l1_bytes");
    json_greedy(&json, greedy, &greedy_info);
    ft_json_end(&json);
}

static int run_npu(const ft_shape *shape, plan_options *options, int32_t *seqlens_kv) {
    if (!options->task_num) options->task_num = DEFAULT_TASK_NUM;
    if (!options->tile_q) options->tile_q = options->tile_kv = 128; /* the seed's L1TileShape */
    if (!options->tile_d) options->tile_d = (shape->d + 15) / 16 * 16;
    const int64_t workers = options->workers ? options->workers : options->hw.matrix_cores;
    fai_plan *plan = NULL, *greedy = NULL;
    int status = 2;
    if (create_plan(shape, seqlens_kv, options->tile_q, options->tile_kv, workers,
                    options->strategy, &plan) ||
        create_plan(shape, seqlens_kv, options->tile_q, options->tile_kv, workers, FAI_SPLIT_GREEDY,
                    &greedy))
        goto done;

    const int64_t input_bytes = npu_input_bytes(shape);
    ft_budget budget;
    ft_budget_buffer buffers[FT_BUDGET_BUFFERS];
    char reason[REASON_SIZE];
    npu_budget(&options->hw, input_bytes, options->task_num, options->tile_q, options->tile_kv,
               options->tile_d, &budget);
    const int fits = npu_fits(&options->hw, &budget, buffers, reason, sizeof reason);
    candidate_list list;
    find_npu_candidates(options, input_bytes, &list);
    if (options->json)
        print_npu_json(options, shape, input_bytes, &budget, buffers, fits, reason, &list, plan,
                       greedy);
    else
        print_npu_text(options, shape, input_bytes, &budget, buffers, fits, reason, &list, plan,
                       greedy);
    status = 0;
done:
    fai_plan_free(plan);
    fai_plan_free(greedy);
    return status;
}

/* -- host: fai's own tiles against this CPU's caches ----------------------------------------- */

/* Every candidate tile is planned for real: the planner's tile_fits is the answer. */
static int find_host_candidates(const ft_shape *shape, int32_t *seqlens_kv, candidate_list *list) {
    list->count = 0;
    for (int q = 0; q < COUNT_OF(cpu_candidate_q); q++) {
        for (int kv = 0; kv < COUNT_OF(cpu_candidate_kv); kv++) {
            fai_plan *plan = NULL;
            if (create_plan(shape, seqlens_kv, cpu_candidate_q[q], cpu_candidate_kv[kv], 1,
                            FAI_SPLIT_AUTO, &plan))
                return -1;
            fai_plan_info info;
            fai_plan_get_info(plan, &info);
            fai_plan_free(plan);
            if (!info.tile_fits) continue;
            const candidate item = {info.tile_q, info.tile_kv, shape->d, info.l1d_bytes,
                                    info.l2_bytes};
            list->items[list->count++] = item;
        }
    }
    return 0;
}

static void print_host_text(const plan_options *options, const ft_shape *shape,
                            const fai_plan_info *info, int fits, const char *reason,
                            const candidate_list *list, const fai_plan *plan,
                            const fai_plan *greedy) {
    const ft_hw *hw = &options->hw;
    char sizes[3][32];
    print_shape_line(shape);
    printf("hw          host: %lld online CPUs; L1d %s, L2 %s per core, L3 %s\n",
           (long long)hw->matrix_cores, size_text(hw->l1d_bytes, sizes[0], 32),
           size_text(hw->l2_bytes, sizes[1], 32),
           hw->l3_bytes ? size_text(hw->l3_bytes, sizes[2], 32) : "unknown");
    printf("            %s\n", hw->source);
    const ft_budget_buffer buffers[] = {
        {"L1d", "l1d", info->l1d_bytes, info->l1d_capacity},
        {"L2", "l2", info->l2_bytes, info->l2_capacity},
    };
    print_buffers_text(buffers, COUNT_OF(buffers));
    if (!strcmp(info->isa, "amx"))
        printf(
            "            L1d: a row block's S and P, the kv tile's packed K and V, the block's\n"
            "            Q and O (the tile unit reads them); L2: the unit's slot (within half\n"
            "            of L2), beside a cache of the kv head's packed tiles (workspace)\n"
            "tiles       AMX, 8 x 1 KiB (the seed's L0): 0-3 accumulators, a 2 x 2 block of\n"
            "            16 x 16 f32 (S of 32 rows x 32 keys, or O of 32 rows x 32 columns: L0C);\n"
            "            4-5 A, 16 rows x 32 bf16 (Q or P rows: L0A); 6-7 B, 16 x 16 bf16 pairs\n"
            "            (K or V pairs: L0B)\n");
    else
        printf(
            "            L1d: what the inner loops keep hot; L2: the thread's tile slice (the\n"
            "            planner keeps it within half of L2; decode tiles' K/V rows a quarter)\n");
    print_fits_text(fits, reason);
    printf("candidates  tiles that fit this CPU at head dim %lld (* = this tile)\n",
           (long long)shape->d);
    print_candidates_text(list, options, "L1d bytes", "L2 bytes");
    print_split_table(options->workers ? "--workers" : "one per online CPU", shape,
                      options->strategy, plan, greedy);
    print_plan_text(plan, info);
}

static int run_host(const ft_shape *shape, const plan_options *options, int32_t *seqlens_kv) {
    fai_plan *plan = NULL, *greedy = NULL;
    int status = 2;
    candidate_list list;
    if (create_plan(shape, seqlens_kv, options->tile_q, options->tile_kv, options->workers,
                    options->strategy, &plan) ||
        create_plan(shape, seqlens_kv, options->tile_q, options->tile_kv, options->workers,
                    FAI_SPLIT_GREEDY, &greedy) ||
        find_host_candidates(shape, seqlens_kv, &list))
        goto done;
    fai_plan_info info, greedy_info;
    fai_plan_get_info(plan, &info);
    fai_plan_get_info(greedy, &greedy_info);
    char reason[REASON_SIZE];
    const int fits = ft_budget_host_fits(&info, reason, sizeof reason);
    plan_options shown = *options; /* the tile the planner chose is the one to mark */
    shown.tile_q = info.tile_q;
    shown.tile_kv = info.tile_kv;
    if (options->json) {
        const ft_hw *hw = &options->hw;
        ft_json json;
        ft_json_init(&json, stdout, 0);
        ft_json_object(&json, NULL);
        json_plan_fields(&json, shape, plan, &info, options->strategy);
        ft_json_string(&json, "hw", "host");
        ft_json_string(&json, "hw_kind", "cpu");
        ft_json_int(&json, "cpus", hw->matrix_cores);
        ft_json_int(&json, "tile_d", shape->d);
        ft_json_int(&json, "l1d_bytes", info.l1d_bytes);
        ft_json_int(&json, "l1d_capacity", info.l1d_capacity);
        ft_json_int(&json, "l2_bytes", info.l2_bytes);
        ft_json_int(&json, "l2_capacity", info.l2_capacity);
        ft_json_int(&json, "l3_capacity", hw->l3_bytes);
        json_fits(&json, fits, reason);
        json_candidates(&json, &list, "l1d_bytes", "l2_bytes");
        json_greedy(&json, greedy, &greedy_info);
        ft_json_end(&json);
    } else {
        print_host_text(&shown, shape, &info, fits, reason, &list, plan, greedy);
    }
    status = 0;
done:
    fai_plan_free(plan);
    fai_plan_free(greedy);
    return status;
}

int ft_cmd_plan(int argc, char **argv) {
    ft_shape shape;
    plan_options options = {.strategy = FAI_SPLIT_AUTO};
    char *used = calloc((size_t)argc + 1, 1);
    if (!used) return 2;
    int32_t *seqlens_kv = NULL;
    int status = 2;
    if (ft_shape_from_args(argc, argv, used, &shape, "plan")) goto done;
    const int parsed = parse_options(argc, argv, used, &options);
    if (parsed) {
        status = parsed > 0 ? 0 : 2;
        goto done;
    }
    if (check_options(&options, &shape)) goto done;
    seqlens_kv = calloc((size_t)shape.b + 1, sizeof *seqlens_kv);
    if (!seqlens_kv) goto done;
    if (!options.has_hw)
        status = run_plain(&shape, &options, seqlens_kv);
    else if (options.hw.kind == FT_HW_CPU)
        status = run_host(&shape, &options, seqlens_kv);
    else
        status = run_npu(&shape, &options, seqlens_kv);
done:
    free(seqlens_kv);
    free(used);
    return status;
}

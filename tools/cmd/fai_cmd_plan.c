/* fai plan: what fai_plan_create decides for a shape: the tile shape, the units, each worker's
 * contiguous unit range and weight, and the imbalance. With --hw, the tile against a machine's
 * buffers: the seed's resource table on an NPU profile (fai_budget.h), fai's own cache budgets
 * on the host, the tiles that fit, and the split over that machine's cores. */
#include "fai_cmd.h"
#include "fai_cmd_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The deepest --task-num accepted. */
#define MAX_TASK_NUM 64
/* Largest tile side --tile takes (the planner's own limits are checked by the planner). */
#define MAX_TILE_SIDE (INT64_C(1) << 20)

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
int ft_cmd_plan_create(const ft_shape *shape, int32_t *seqlens_kv, int64_t tile_q, int64_t tile_kv,
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

const char *ft_cmd_plan_strategy_name(fai_split strategy) {
    return strategy == FAI_SPLIT_GREEDY ? "greedy" : strategy == FAI_SPLIT_UNITS ? "units" : "auto";
}

int64_t ft_cmd_plan_max_worker_weight(const fai_plan *plan, int64_t workers) {
    int64_t heaviest = 0;
    for (int64_t w = 0; w < workers; w++) {
        fai_worker_range range;
        fai_plan_get_worker(plan, w, &range);
        if (range.weight > heaviest) heaviest = range.weight;
    }
    return heaviest;
}

/* -- the plan itself, as `fai plan` without --hw prints it ----------------------------------- */

void ft_cmd_plan_print_shape_line(const ft_shape *shape) {
    printf("shape %s: B=%lld Hq=%lld Hkv=%lld Sq=%lld Skv=%lld D=%lld Dv=%lld%s%s\n", shape->name,
           (long long)shape->b, (long long)shape->hq, (long long)shape->hkv, (long long)shape->sq,
           (long long)shape->skv, (long long)shape->d, (long long)shape->dv,
           shape->causal == FAI_CAUSAL_BOTTOM_RIGHT ? " causal"
           : shape->causal == FAI_CAUSAL_TOP_LEFT   ? " causal-top-left"
                                                    : "",
           shape->page_size ? " paged" : "");
}

void ft_cmd_plan_print_text(const fai_plan *plan, const fai_plan_info *info) {
    printf("tile        %lld x %lld (qSeqBase x kvSeqBase), %lld rows with the GQA group (%s)\n",
           (long long)info->tile_q, (long long)info->tile_kv, (long long)info->tile_rows,
           info->tile_source);
    printf("units       %lld (batch, kv-head group, q tile), %lld valid kv tiles in all\n",
           (long long)info->units, (long long)info->total_weight);
    printf("workers     %lld on %lld threads, isa %s, workspace %zu bytes\n",
           (long long)info->workers, (long long)info->threads, info->isa, info->workspace_bytes);
    printf("pv          P %s\n", info->p_parts == 0   ? "in f32"
                                 : info->p_parts == 2 ? "in bf16 as hi + lo (within 2^-16)"
                                                      : "rounded to bf16 (round_p_bf16)");
    printf("pipeline    %s\n", info->pipeline_tiles == 1
                                   ? "1 kv tile in flight per unit"
                                   : "2 kv tiles in flight per unit (the next one's QK behind "
                                     "this one's PV)");
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

void ft_cmd_plan_json_worker_weights(ft_json *json, const char *key, const fai_plan *plan,
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
void ft_cmd_plan_json_fields(ft_json *json, const ft_shape *shape, const fai_plan *plan,
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
    ft_json_string(json, "strategy", ft_cmd_plan_strategy_name(strategy));
    ft_json_int(json, "workspace_bytes", (long long)info->workspace_bytes);
    ft_json_string(json, "isa", info->isa);
    ft_json_string(json, "tile_source", info->tile_source);
    ft_json_string(json, "tile_class", info->tile_class);
    ft_json_int(json, "p_parts", info->p_parts);
    ft_json_int(json, "pipeline_tiles", info->pipeline_tiles);
    ft_cmd_plan_json_worker_weights(json, "worker_weights", plan, info->workers);
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
    if (ft_cmd_plan_create(shape, seqlens_kv, options->tile_q, options->tile_kv, options->workers,
                           options->strategy, &plan))
        return 2;
    fai_plan_info info;
    fai_plan_get_info(plan, &info);
    if (options->json) {
        ft_json json;
        ft_json_init(&json, stdout, 0);
        ft_json_object(&json, NULL);
        ft_cmd_plan_json_fields(&json, shape, plan, &info, options->strategy);
        ft_json_end(&json);
    } else {
        ft_cmd_plan_print_shape_line(shape);
        ft_cmd_plan_print_text(plan, &info);
    }
    fai_plan_free(plan);
    return 0;
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
    if (ft_options_once(argc, argv, "plan") || check_options(&options, &shape)) goto done;
    /* the lengths of a paged shape, one per sequence: within the planner's batch, which it
     * names when refused */
    if (shape.b > (INT64_C(1) << 24)) {
        fprintf(stderr, "fai plan: batch = %lld is outside [0, %lld]\n", (long long)shape.b,
                (long long)(INT64_C(1) << 24));
        goto done;
    }
    seqlens_kv = calloc((size_t)shape.b + 1, sizeof *seqlens_kv);
    if (!seqlens_kv) {
        fprintf(stderr, "fai plan: out of memory for %lld sequence lengths\n", (long long)shape.b);
        goto done;
    }
    if (!options.has_hw)
        status = run_plain(&shape, &options, seqlens_kv);
    else if (options.hw.kind == FT_HW_CPU)
        status = ft_cmd_plan_run_host(&shape, &options, seqlens_kv);
    else
        status = ft_cmd_plan_run_npu(&shape, &options, seqlens_kv);
done:
    free(seqlens_kv);
    free(used);
    return status;
}

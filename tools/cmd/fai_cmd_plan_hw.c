/* fai plan --hw: what the profiles share (candidate tiles, fits, the split table) and the host
 * profile: fai's own tiles against this CPU's caches. */
#include "fai_cmd_plan.h"

#include <stdio.h>
#include <string.h>

/* fai's candidate tiles for a CPU. */
static const int64_t cpu_candidate_q[] = {1, 2, 4, 8, 16, 32, 64, 128};
static const int64_t cpu_candidate_kv[] = {16, 32, 64, 128, 256, 512};
_Static_assert(COUNT_OF(cpu_candidate_q) * COUNT_OF(cpu_candidate_kv) <= MAX_CANDIDATES,
               "every candidate tile must have room in a candidate_list");

/* -- shared by the profiles ------------------------------------------------------------------ */

const char *ft_cmd_plan_size_text(int64_t bytes, char *text, size_t size) {
    ft_budget_format_size(bytes, text, size);
    return text;
}

void ft_cmd_plan_print_candidates_text(const candidate_list *list, const plan_options *options,
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
        printf("            (the tile above is not among them)\n");
}

void ft_cmd_plan_json_candidates(ft_json *json, const candidate_list *list, const char *first_key,
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
void ft_cmd_plan_print_fits_text(int fits, const char *reason) {
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

void ft_cmd_plan_json_fits(ft_json *json, int fits, const char *reason) {
    ft_json_bool(json, "fits", fits);
    if (!fits) ft_json_string(json, "reason", reason);
}

void ft_cmd_plan_json_greedy(ft_json *json, const fai_plan *greedy, const fai_plan_info *info) {
    ft_json_int(json, "greedy_units", info->units);
    ft_json_int(json, "greedy_total_weight", info->total_weight);
    ft_json_number(json, "greedy_imbalance", "%.6f", info->imbalance);
    ft_cmd_plan_json_worker_weights(json, "greedy_worker_weights", greedy, info->workers);
}

void ft_cmd_plan_print_buffers_text(const ft_budget_buffer *buffers, int count) {
    printf("%-11s %10s %10s %7s\n", "buffer", "bytes", "capacity", "use");
    for (int i = 0; i < count; i++) {
        char used[32], capacity[32];
        printf("%-11s %10lld %10lld %6.1f%%  (%s of %s)\n", buffers[i].name,
               (long long)buffers[i].bytes, (long long)buffers[i].capacity,
               100.0 * (double)buffers[i].bytes / (double)buffers[i].capacity,
               ft_cmd_plan_size_text(buffers[i].bytes, used, sizeof used),
               ft_cmd_plan_size_text(buffers[i].capacity, capacity, sizeof capacity));
    }
}

static void print_split_row(const char *label, const fai_plan *plan) {
    fai_plan_info info;
    fai_plan_get_info(plan, &info);
    const double mean = info.workers ? (double)info.total_weight / (double)info.workers : 0.0;
    char blocks[48];
    snprintf(blocks, sizeof blocks, "%lld / %.2f",
             (long long)ft_cmd_plan_max_worker_weight(plan, info.workers), mean);
    printf("            %-14s %6lld %13lld %10.4f %18s", label, (long long)info.units,
           (long long)info.total_weight, info.imbalance, blocks);
    if (info.split_kv)
        printf("  split-KV: %lld units in %lld parts", (long long)info.split_units,
               (long long)info.partials);
    printf("\n");
}

/* The split of the shape over `cores` by the seed's greedy rule and by fai's strategy. */
void ft_cmd_plan_print_split_table(const char *cores, const ft_shape *shape, fai_split strategy,
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
    snprintf(label, sizeof label, "%s (fai)", ft_cmd_plan_strategy_name(strategy));
    print_split_row(label, plan);
    if (shape->hq > shape->hkv)
        printf("            a unit holds a GQA group: %lld q heads x %lld positions = %lld rows\n",
               (long long)(info.tile_rows / info.tile_q), (long long)info.tile_q,
               (long long)info.tile_rows);
}

/* -- host: fai's own tiles against this CPU's caches ----------------------------------------- */

/* Every candidate tile is planned for real: the planner's tile_fits is the answer. */
static int find_host_candidates(const ft_shape *shape, int32_t *seqlens_kv, candidate_list *list) {
    list->count = 0;
    for (int q = 0; q < COUNT_OF(cpu_candidate_q); q++) {
        for (int kv = 0; kv < COUNT_OF(cpu_candidate_kv); kv++) {
            fai_plan *plan = NULL;
            if (ft_cmd_plan_create(shape, seqlens_kv, cpu_candidate_q[q], cpu_candidate_kv[kv], 1,
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
    ft_cmd_plan_print_shape_line(shape);
    printf("hw          host: %lld online CPUs; L1d %s, L2 %s per core, L3 %s\n",
           (long long)hw->matrix_cores, ft_cmd_plan_size_text(hw->l1d_bytes, sizes[0], 32),
           ft_cmd_plan_size_text(hw->l2_bytes, sizes[1], 32),
           hw->l3_bytes ? ft_cmd_plan_size_text(hw->l3_bytes, sizes[2], 32) : "unknown");
    printf("            %s\n", hw->source);
    const ft_budget_buffer buffers[] = {
        {"L1d", "l1d", info->l1d_bytes, info->l1d_capacity},
        {"L2", "l2", info->l2_bytes, info->l2_capacity},
    };
    ft_cmd_plan_print_buffers_text(buffers, COUNT_OF(buffers));
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
    ft_cmd_plan_print_fits_text(fits, reason);
    printf("candidates  tiles that fit this CPU at head dim %lld (* = this tile)\n",
           (long long)shape->d);
    ft_cmd_plan_print_candidates_text(list, options, "L1d bytes", "L2 bytes");
    ft_cmd_plan_print_split_table(options->workers ? "--workers" : "one per online CPU", shape,
                                  options->strategy, plan, greedy);
    ft_cmd_plan_print_text(plan, info);
}

int ft_cmd_plan_run_host(const ft_shape *shape, const plan_options *options, int32_t *seqlens_kv) {
    fai_plan *plan = NULL, *greedy = NULL;
    int status = 2;
    candidate_list list;
    if (ft_cmd_plan_create(shape, seqlens_kv, options->tile_q, options->tile_kv, options->workers,
                           options->strategy, &plan) ||
        ft_cmd_plan_create(shape, seqlens_kv, options->tile_q, options->tile_kv, options->workers,
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
        ft_cmd_plan_json_fields(&json, shape, plan, &info, options->strategy);
        ft_json_string(&json, "hw", "host");
        ft_json_string(&json, "hw_kind", "cpu");
        ft_json_int(&json, "cpus", hw->matrix_cores);
        ft_json_int(&json, "tile_d", shape->d);
        ft_json_int(&json, "l1d_bytes", info.l1d_bytes);
        ft_json_int(&json, "l1d_capacity", info.l1d_capacity);
        ft_json_int(&json, "l2_bytes", info.l2_bytes);
        ft_json_int(&json, "l2_capacity", info.l2_capacity);
        ft_json_int(&json, "l3_capacity", hw->l3_bytes);
        ft_cmd_plan_json_fits(&json, fits, reason);
        ft_cmd_plan_json_candidates(&json, &list, "l1d_bytes", "l2_bytes");
        ft_cmd_plan_json_greedy(&json, greedy, &greedy_info);
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

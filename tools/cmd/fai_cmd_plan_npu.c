/* fai plan --hw <npu>: the seed's resource table (fai_budget.h), the tiles that fit it and the
 * split over the profile's matrix cores. */
#include "fai_cmd_plan.h"

#include <stdio.h>
#include <string.h>

/* The seed's candidate tiles for an NPU. */
static const int64_t npu_candidate_q[] = {16, 32, 64, 128, 256};
static const int64_t npu_candidate_kv[] = {64, 128, 256, 512};
_Static_assert(COUNT_OF(npu_candidate_q) * COUNT_OF(npu_candidate_kv) <= MAX_CANDIDATES,
               "every candidate tile must have room in a candidate_list");

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

static void print_hw_npu_text(const ft_hw *hw) {
    char sizes[5][32];
    printf("hw          %s: %lld AIC, %lld AIV (CV ratio %lld)\n"
           "            UB %s, L1 %s, L0A %s, L0B %s, L0C %s\n",
           hw->name, (long long)hw->matrix_cores, (long long)hw->vector_cores,
           (long long)hw->cv_ratio, ft_cmd_plan_size_text(hw->ub_bytes, sizes[0], 32),
           ft_cmd_plan_size_text(hw->l1_bytes, sizes[1], 32),
           ft_cmd_plan_size_text(hw->l0a_bytes, sizes[2], 32),
           ft_cmd_plan_size_text(hw->l0b_bytes, sizes[3], 32),
           ft_cmd_plan_size_text(hw->l0c_bytes, sizes[4], 32));
    printf("            %s\n", hw->source);
}

/* One row of the split table: a strategy's plan over the profile's cores. */
static void print_npu_text(const plan_options *options, const ft_shape *shape, int64_t input_bytes,
                           const ft_budget *budget, const ft_budget_buffer *buffers, int fits,
                           const char *reason, const candidate_list *list, const fai_plan *plan,
                           const fai_plan *greedy) {
    ft_cmd_plan_print_shape_line(shape);
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
    ft_cmd_plan_print_buffers_text(buffers, FT_BUDGET_BUFFERS);
    ft_cmd_plan_print_fits_text(fits, reason);
    printf("candidates  tiles that fit %s at embedBase %lld (* = this tile)\n", options->hw.name,
           (long long)options->tile_d);
    ft_cmd_plan_print_candidates_text(list, options, "UB bytes", "L1 bytes");
    char cores[64];
    if (options->workers)
        snprintf(cores, sizeof cores, "--workers");
    else
        snprintf(cores, sizeof cores, "%s's AIC count (the seed's blockDim)", options->hw.name);
    ft_cmd_plan_print_split_table(cores, shape, options->strategy, plan, greedy);
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
    ft_cmd_plan_json_fields(&json, shape, plan, &info, options->strategy);
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
    ft_cmd_plan_json_fits(&json, fits, reason);
    ft_cmd_plan_json_candidates(&json, list, "ub_bytes", "l1_bytes");
    ft_cmd_plan_json_greedy(&json, greedy, &greedy_info);
    ft_json_end(&json);
}

int ft_cmd_plan_run_npu(const ft_shape *shape, plan_options *options, int32_t *seqlens_kv) {
    if (!options->task_num) options->task_num = DEFAULT_TASK_NUM;
    if (!options->tile_q) options->tile_q = options->tile_kv = 128; /* the seed's L1TileShape */
    if (!options->tile_d) options->tile_d = (shape->d + 15) / 16 * 16;
    const int64_t workers = options->workers ? options->workers : options->hw.matrix_cores;
    fai_plan *plan = NULL, *greedy = NULL;
    int status = 2;
    if (ft_cmd_plan_create(shape, seqlens_kv, options->tile_q, options->tile_kv, workers,
                           options->strategy, &plan) ||
        ft_cmd_plan_create(shape, seqlens_kv, options->tile_q, options->tile_kv, workers,
                           FAI_SPLIT_GREEDY, &greedy))
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

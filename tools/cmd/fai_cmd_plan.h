/* The parts of `fai plan` (fai_cmd_plan.c): the shared printers and the host profile
 * (fai_cmd_plan_hw.c), and the NPU profiles' resource table (fai_cmd_plan_npu.c). */
#ifndef FAI_CMD_PLAN_H
#define FAI_CMD_PLAN_H

#include "fai.h"
#include "fai_budget.h"
#include "fai_hw.h"
#include "fai_json.h"
#include "fai_shape.h"

#include <stddef.h>
#include <stdint.h>

/* The seed's pipeline depth (--task-num's default). */
#define DEFAULT_TASK_NUM 3
#define REASON_SIZE 512
#define COUNT_OF(array) ((int)(sizeof(array) / sizeof((array)[0])))
#define MAX_CANDIDATES 64

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

/* A plan of the shape with the given tile (0: the planner's), workers and split. On failure
 * prints one line naming what the planner refused (and the tile, when one was asked for) and
 * returns nonzero. */
int ft_cmd_plan_create(const ft_shape *shape, int32_t *seqlens_kv, int64_t tile_q, int64_t tile_kv,
                       int64_t workers, fai_split split, fai_plan **plan);

const char *ft_cmd_plan_strategy_name(fai_split strategy);

int64_t ft_cmd_plan_max_worker_weight(const fai_plan *plan, int64_t workers);

void ft_cmd_plan_print_shape_line(const ft_shape *shape);

void ft_cmd_plan_print_text(const fai_plan *plan, const fai_plan_info *info);

void ft_cmd_plan_json_worker_weights(ft_json *json, const char *key, const fai_plan *plan,
                                     int64_t workers);

/* The keys of `fai plan --json`, in an object the caller opened (--hw adds its keys after). */
void ft_cmd_plan_json_fields(ft_json *json, const ft_shape *shape, const fai_plan *plan,
                             const fai_plan_info *info, fai_split strategy);

const char *ft_cmd_plan_size_text(int64_t bytes, char *text, size_t size);

void ft_cmd_plan_print_candidates_text(const candidate_list *list, const plan_options *options,
                                       const char *first_name, const char *second_name);

void ft_cmd_plan_json_candidates(ft_json *json, const candidate_list *list, const char *first_key,
                                 const char *second_key);

/* "fits yes", or "fits no:" and each buffer that overflows on a line of its own. */
void ft_cmd_plan_print_fits_text(int fits, const char *reason);

void ft_cmd_plan_json_fits(ft_json *json, int fits, const char *reason);

void ft_cmd_plan_json_greedy(ft_json *json, const fai_plan *greedy, const fai_plan_info *info);

void ft_cmd_plan_print_buffers_text(const ft_budget_buffer *buffers, int count);

/* The split of the shape over `cores` by the seed's greedy rule and by fai's strategy. */
void ft_cmd_plan_print_split_table(const char *cores, const ft_shape *shape, fai_split strategy,
                                   const fai_plan *plan, const fai_plan *greedy);

/* `fai plan --hw host` and `--hw <npu>`: the report; 0 or the exit status. */
int ft_cmd_plan_run_host(const ft_shape *shape, const plan_options *options, int32_t *seqlens_kv);

int ft_cmd_plan_run_npu(const ft_shape *shape, plan_options *options, int32_t *seqlens_kv);

#endif

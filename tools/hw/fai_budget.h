/* The seed's resource model: the on-chip buffers one (qSeqBase, kvSeqBase, embedBase) tile of the
 * seed's kernel takes on an Ascend NPU (UB per vector core; L1, L0A, L0B, L0C per matrix core),
 * as pure functions of the tile, the element sizes and KERNEL_TASK_NUM. docs/tuning.md
 * ("Resource model") lists every item and says which come from the seed and which are fai's
 * reading of its kernel. Also the reason a host tile does not fit fai's own cache budgets. */
#ifndef FAI_BUDGET_H
#define FAI_BUDGET_H

#include "fai.h"
#include "fai_hw.h"

#include <stddef.h>
#include <stdint.h>

typedef struct ft_budget_tile {
    int64_t q_seq_base;  /* rows of a Q tile (qSeqBase) */
    int64_t kv_seq_base; /* keys of a K/V tile (kvSeqBase) */
    int64_t embed_base;  /* head dimension of the tile (embedBase), for QK and PV alike */
} ft_budget_tile;

/* Bytes per element of the kernel's types. */
typedef struct ft_budget_types {
    int64_t input; /* Q, K and V tiles: the matmul input type */
    int64_t s;     /* ElementS: QK results and the softmax state (f32) */
    int64_t o_tmp; /* ElementOTmp: PV results and the O accumulator (f32) */
    int64_t p;     /* ElementP: softmax output, the left matrix of PV */
    int64_t mask;  /* the mask tile as the vector unit applies it (half) */
} ft_budget_types;

/* The types of the seed's kernel for matmul inputs of `input_bytes` (2: f16 or bf16, 4: f32);
 * P is kept in the input type. */
ft_budget_types ft_budget_types_for(int64_t input_bytes);

typedef struct ft_budget {
    /* the seed's static items */
    int64_t mm1_result_size; /* qSeqBase / CV_RATIO * kvSeqBase * sizeof(ElementS) */
    int64_t mm2_result_size; /* qSeqBase / CV_RATIO * Align64(embedBase) * sizeof(ElementOTmp) */
    int64_t share_ub_size;   /* CeilDiv(qSeqBase, 2) * sizeof(ElementS) */
    int64_t mm2_left_size;   /* qSeqBase * kvSeqBase * sizeof(ElementP) */
    /* UB per vector core, item by item, and their sum */
    int64_t ub_s_buffers;     /* bmm1TensorList[2] */
    int64_t ub_otmp_buffers;  /* bmm2TensorList[2] */
    int64_t ub_softmax_state; /* sumUb, maxUb, expUb [KERNEL_TASK_NUM] */
    int64_t ub_p_buffers;     /* P double buffer, staged before the copy to L1 */
    int64_t ub_mask;          /* one mask tile */
    int64_t ub_share;         /* 2 x SHARE_UB_SIZE */
    int64_t ub_o_accumulator; /* the rows of O this vector core rescales */
    int64_t ub_bytes;
    /* L1 per matrix core */
    int64_t l1_p_buffers; /* mm2AL1TensorList[KERNEL_TASK_NUM] */
    int64_t l1_qkv_tiles; /* Q, K and V tiles, double-buffered */
    int64_t l1_bytes;
    /* L0 per matrix core: the operands and results of the QK and PV matmuls, double-buffered */
    int64_t l0a_bytes, l0b_bytes, l0c_bytes;
} ft_budget;

/* Fills *budget for a tile. cv_ratio: vector cores per matrix core (each takes
 * CeilDiv(qSeqBase, cv_ratio) rows of S and O). All arguments >= 1. */
void ft_budget_compute(const ft_budget_tile *tile, const ft_budget_types *types, int64_t task_num,
                       int64_t cv_ratio, ft_budget *budget);

/* One buffer's use against its capacity. */
typedef struct ft_budget_buffer {
    const char *name; /* "UB per AIV", "L1 per AIC", "L0A", ... */
    const char *key;  /* JSON key stem: "ub", "l1", "l0a", ... */
    int64_t bytes, capacity;
} ft_budget_buffer;

#define FT_BUDGET_BUFFERS 5

/* The five buffers of an NPU profile, in the order UB, L1, L0A, L0B, L0C. */
void ft_budget_buffers(const ft_budget *budget, const ft_hw *hw,
                       ft_budget_buffer buffers[FT_BUDGET_BUFFERS]);

/* 1 if every buffer fits its capacity; otherwise 0, and `reason` names each buffer that does
 * not: "UB per AIV needs 270848 bytes (264.5 KiB), capacity 253952 (248 KiB); ...". */
int ft_budget_fits(const ft_budget_buffer *buffers, int count, char *reason, size_t size);

/* fai's own tile on this CPU (from fai_plan_get_info): 1 if it fits the planner's budgets;
 * otherwise 0 and the reason, naming L1d and / or L2 with their bytes and budgets. */
int ft_budget_host_fits(const fai_plan_info *info, char *reason, size_t size);

/* "264.5 KiB", "248 KiB", "1 MiB": bytes in the unit a reader compares capacities in. */
void ft_budget_format_size(int64_t bytes, char *text, size_t size);

#endif

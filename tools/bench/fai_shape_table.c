/* The benchmark shapes by name, the custom shape's starting point and the shape options' usage
 * text (fai_shape.h). */
#include "fai_shape.h"

/* One shape a line, fields in ft_shape's order: name, B, Hq, Hkv, Sq, Skv, D, Dv, causal,
 * window (left, right), page size, dtypes (Q, K/V, O), round_p_bf16, softcap, alibi, sinks,
 * head_major, k_channel_scales, pipeline_tiles. */
// clang-format off
const ft_shape ft_shape_table[] = {
    {"P1", 1, 32, 8, 2048, 2048, 128, 128, FAI_CAUSAL_BOTTOM_RIGHT, -1, -1, 0, FAI_DTYPE_F32, FAI_DTYPE_F16, FAI_DTYPE_F32, 0, 0.0f, 0, 0, 0, 0, 0},
    {"P2", 2, 16, 16, 1024, 1024, 64, 64, FAI_CAUSAL_NONE, -1, -1, 0, FAI_DTYPE_F32, FAI_DTYPE_F16, FAI_DTYPE_F32, 0, 0.0f, 0, 0, 0, 0, 0},
    {"D1", 8, 32, 8, 1, 4096, 128, 128, FAI_CAUSAL_NONE, -1, -1, 128, FAI_DTYPE_F32, FAI_DTYPE_F16, FAI_DTYPE_F32, 0, 0.0f, 0, 0, 0, 0, 0},
    {"D2", 1, 32, 8, 1, 32768, 128, 128, FAI_CAUSAL_NONE, -1, -1, 128, FAI_DTYPE_F32, FAI_DTYPE_F16, FAI_DTYPE_F32, 0, 0.0f, 0, 0, 0, 0, 0},
    {"C1", 4, 32, 8, 16, 8192, 128, 128, FAI_CAUSAL_BOTTOM_RIGHT, -1, -1, 128, FAI_DTYPE_F32, FAI_DTYPE_F16, FAI_DTYPE_F32, 0, 0.0f, 0, 0, 0, 0, 0},
    /* model shapes, each beside itself without its score modifiers (fai bench O1 O1S ...):
     * gpt-oss-like (GQA 64/8, D 64, sliding window of 128 keys, sinks): a 4096 prefill and a
     * batched decode on a paged cache; Gemma-2-like (GQA 16/8, D 256, window 4096, softcap 50) */
    {"O1", 1, 64, 8, 4096, 4096, 64, 64, FAI_CAUSAL_BOTTOM_RIGHT, 127, -1, 0, FAI_DTYPE_F32, FAI_DTYPE_F16, FAI_DTYPE_F32, 0, 0.0f, 0, 0, 0, 0, 0},
    {"O1S", 1, 64, 8, 4096, 4096, 64, 64, FAI_CAUSAL_BOTTOM_RIGHT, 127, -1, 0, FAI_DTYPE_F32, FAI_DTYPE_F16, FAI_DTYPE_F32, 0, 0.0f, 0, 1, 0, 0, 0},
    {"O2", 16, 64, 8, 1, 4096, 64, 64, FAI_CAUSAL_BOTTOM_RIGHT, 127, -1, 128, FAI_DTYPE_F32, FAI_DTYPE_F16, FAI_DTYPE_F32, 0, 0.0f, 0, 0, 0, 0, 0},
    {"O2S", 16, 64, 8, 1, 4096, 64, 64, FAI_CAUSAL_BOTTOM_RIGHT, 127, -1, 128, FAI_DTYPE_F32, FAI_DTYPE_F16, FAI_DTYPE_F32, 0, 0.0f, 0, 1, 0, 0, 0},
    {"G1", 1, 16, 8, 8192, 8192, 256, 256, FAI_CAUSAL_BOTTOM_RIGHT, 4095, -1, 0, FAI_DTYPE_F32, FAI_DTYPE_F16, FAI_DTYPE_F32, 0, 0.0f, 0, 0, 0, 0, 0},
    {"G1C", 1, 16, 8, 8192, 8192, 256, 256, FAI_CAUSAL_BOTTOM_RIGHT, 4095, -1, 0, FAI_DTYPE_F32, FAI_DTYPE_F16, FAI_DTYPE_F32, 0, 50.0f, 0, 0, 0, 0, 0},
};
// clang-format on
const int ft_shape_count = (int)(sizeof ft_shape_table / sizeof ft_shape_table[0]);
const int ft_shape_default_count = 5;

const ft_shape ft_shape_custom_base = {.name = "custom",
                                       .b = 1,
                                       .hq = 1,
                                       .hkv = 1,
                                       .sq = 1,
                                       .skv = 1,
                                       .d = 128,
                                       .dv = 128,
                                       .causal = FAI_CAUSAL_NONE,
                                       .window_left = -1,
                                       .window_right = -1,
                                       .q_dtype = FAI_DTYPE_F32,
                                       .kv_dtype = FAI_DTYPE_F16,
                                       .out_dtype = FAI_DTYPE_F32};

const char ft_shape_usage[] =
    "shape: a benchmark shape name (P1 P2 D1 D2 C1; model shapes O1 O1S O2 O2S G1 G1C), and/or\n"
    "  --b N --hq N --hkv N --sq N --skv N --d N --dv N   (--d sets Dv too, unless --dv)\n"
    "  --causal | --causal-top-left    --window LEFT,RIGHT (-1: unbounded; with a causal\n"
    "                                  mask RIGHT is 0 whatever is given, as in fai.h)\n"
    "  --page-size N                   paged K/V with a shuffled block table (0: dense)\n"
    "  --head-major                    pages [num_pages, Hkv, page_size, D] (vLLM's block\n"
    "                                  layout; default [num_pages, page_size, Hkv, D])\n"
    "  --round-p-bf16                  P rounded to bf16 where PV multiplies in bf16 (fai.h)\n"
    "  --k-channel-scales              a quantized K's scales per kv head and channel too\n"
    "  --pipeline-tiles N              kv tiles in flight on the matrix engine: 1 or 2\n"
    "                                  (default 0: the planner's choice; fai.h)\n"
    "  --softcap C  --alibi  --sinks   score modifiers (standard ALiBi slopes; a sink per head;\n"
    "                                  softcap 0: off, else any float32 > 0)\n"
    "  --q-dtype T --kv-dtype T --out-dtype T   (f32 f16 bf16; K/V also int8 e4m3 e5m2, with\n"
    "                                           a scale per token and kv head; defaults f32 f16\n"
    "                                           f32)\n"
    "  flags change the named shape; without a name they start from B=Hq=Hkv=Sq=Skv=1,\n"
    "  D=Dv=128, no mask; each flag at most once\n";

"""fai: FlashAttention inference on CPUs.

    O = fai.attention(q, k, v, causal=True)            # q [B, Sq, Hq, D], k/v [B, Skv, Hkv, D]
    O, lse = fai.attention(q, k, v, return_lse=True)
    plan = fai.Plan.like(q, k, v, causal=True)         # plan once, run per layer / step
    O = plan.run(q, k, v)
    O, lse = fai.merge_states([o1, o2], [lse1, lse2])
    cache = fai.empty_cache([pages, page_size, Hkv, D], "int8")  # 2 MiB-aligned, huge pages
    fai.cache_write(k_new, cache, slots, scale=k_scales)  # new tokens' K at their slots
    O = fai.attention(q, k_int8, v_int8, k_scale=ks, v_scale=vs)   # quantized K/V and scales

numpy arrays (float32, float16, ml_dtypes' bfloat16) and torch CPU tensors (float32, float16,
bfloat16) are read in place by pointer and strides; anything else with __array__ or __dlpack__
works too. K and V may also be quantized: int8, ml_dtypes' float8_e4m3fn or float8_e5m2 (torch
int8, float8_e4m3fn, float8_e5m2), with float32 scales per token, per kv head or per tensor.
Errors raise fai.FaiError (a ValueError) with libfai's one-line message.
"""
from ._cache import cache_write, empty_cache
from ._core import (FaiError, Plan, alibi_slopes, attention, cpu_cache_bytes, cpu_count,
                    library_path)
from ._merge import merge_states

__version__ = "0.1.0"
__all__ = ["FaiError", "Plan", "attention", "merge_states", "alibi_slopes", "cpu_count",
           "cpu_cache_bytes", "library_path", "cache_write", "empty_cache", "__version__"]

"""Decode through Python on K/V in numpy's own memory against the same K/V in fai.empty_cache's
(2 MiB aligned, huge pages, touched by fai's threads): D2's shape (1 sequence of 32768 keys, GQA
32/8, D 128, f16 K/V), caches flushed between runs, medians of 15 runs, three rounds.

    PYTHONPATH=python FAI_LIBRARY=build/libfai.so python3 bench/cache_memory.py
"""
import time, numpy as np, fai, statistics
# D2: B=1, Hq 32, Hkv 8, 32768 keys, D 128, f16 K/V, dense; numpy arrays vs fai.empty_cache arrays
B, Hq, Hkv, S, D = 1, 32, 8, 32768, 128
rng = np.random.default_rng(0)
q = rng.standard_normal((B, 1, Hq, D), dtype=np.float32)
k_np = rng.standard_normal((B, S, Hkv, D), dtype=np.float32).astype(np.float16)
v_np = rng.standard_normal((B, S, Hkv, D), dtype=np.float32).astype(np.float16)
k_fc = fai.empty_cache(k_np.shape, "float16"); k_fc[...] = k_np
v_fc = fai.empty_cache(v_np.shape, "float16"); v_fc[...] = v_np
plan = fai.Plan.like(q, k_np, v_np)
flush = np.zeros(64 << 20, dtype=np.uint8)
def timed(k, v):
    ts = []
    for _ in range(15):
        flush[::64] += 1
        t0 = time.perf_counter(); plan.run(q, k, v); ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3
for r in range(3):
    a = timed(k_np, v_np); b = timed(k_fc, v_fc)
    print(f"round {r}: numpy arrays {a:.2f} ms, fai.empty_cache arrays {b:.2f} ms, ratio {a/b:.2f}")

"""The benchmark shapes and the data every library of one run reads."""
import numpy as np

import fai


SHAPES = {
    # name: B, Hq, Hkv, Sq, Skv, D, causal, page_size, what
    "P1": (1, 32, 8, 2048, 2048, 128, True, 0, "prefill GQA causal"),
    "P2": (2, 16, 16, 1024, 1024, 64, False, 0, "prefill MHA"),
    "D1": (8, 32, 8, 1, 4096, 128, False, 128, "batched decode, paged"),
    "D2": (1, 32, 8, 1, 32768, 128, False, 128, "long decode, paged"),
    "C1": (4, 32, 8, 16, 8192, 128, True, 128, "chunked prefill, paged"),
}


class Case:
    """One benchmark shape's data: fai's inputs (paged where the shape is) and the dense
    equivalent [B, S, H, D] as float32 values for the peers. fai's paged K/V live where a
    server using fai keeps its cache, in fai.empty_cache (2 MiB aligned, huge pages asked for), or
    with numpy_kv in plain numpy arrays."""

    def __init__(self, name, bf16, seed=0, numpy_kv=False):
        B, Hq, Hkv, Sq, Skv, D, causal, ps, what = SHAPES[name]
        self.name, self.what = name, what
        self.B, self.Hq, self.Hkv, self.Sq, self.Skv, self.D = B, Hq, Hkv, Sq, Skv, D
        self.causal, self.page_size = causal, ps
        self.kv_memory = "numpy arrays" if numpy_kv else "fai.empty_cache"
        self.group = Hq // Hkv
        rng = np.random.default_rng(seed)
        if bf16:
            import ml_dtypes

            q_dt = kv_dt = np.dtype(ml_dtypes.bfloat16)
        else:
            q_dt, kv_dt = np.dtype(np.float32), np.dtype(np.float16)
        self.q = rng.standard_normal((B, Sq, Hq, D), dtype=np.float32).astype(q_dt)
        k = rng.standard_normal((B, Skv, Hkv, D), dtype=np.float32).astype(kv_dt)
        v = rng.standard_normal((B, Skv, Hkv, D), dtype=np.float32).astype(kv_dt)
        self.out_dtype = "bfloat16" if bf16 else "float32"
        self.kw = {"causal": causal}
        if ps:
            pages = Skv // ps
            order = rng.permutation(B * pages).astype(np.int32)
            self.block_table = order.reshape(B, pages)
            empty = np.empty if numpy_kv else fai.empty_cache
            self.k = empty((B * pages, ps, Hkv, D), kv_dt)
            self.v = empty((B * pages, ps, Hkv, D), kv_dt)
            for b in range(B):
                for p in range(pages):
                    self.k[self.block_table[b, p]] = k[b, p * ps:(p + 1) * ps]
                    self.v[self.block_table[b, p]] = v[b, p * ps:(p + 1) * ps]
            self.kw.update(block_table=self.block_table,
                           seqlens_kv=np.full(B, Skv, np.int32))
        else:
            self.k, self.v = k, v
        # the peers' float32 values (bf16/f16 values are exact in f32)
        self.q32 = self.q.astype(np.float32)
        self.k32 = k.astype(np.float32)
        self.v32 = v.astype(np.float32)

    @property
    def paged(self):
        return self.page_size > 0

    def bottom_right_keep(self):
        """[Sq, Skv] bool: query i sees keys j <= i + Skv - Sq."""
        i = np.arange(self.Sq)[:, None]
        j = np.arange(self.Skv)[None, :]
        return j <= i + (self.Skv - self.Sq)

    def kv_bytes(self):
        """K and V bytes fai must read (every key is visible in the decode shapes)."""
        return 2.0 * self.B * self.Skv * self.Hkv * self.D * self.k.itemsize

    def flops(self):
        """2*D + 2*Dv per visible (query, key) pair, all heads."""
        if self.causal:
            pairs = sum(min(self.Skv, i + self.Skv - self.Sq + 1) for i in range(self.Sq))
        else:
            pairs = self.Sq * self.Skv
        return self.B * self.Hq * pairs * 4.0 * self.D

"""What the Python tests share: inputs drawn against their float64 copies, the comparison of
fai.attention with the reference, and the packed and paged forms of a batch."""
import numpy as np
import pytest

import fai
from reference import BF16, FP8, Ref, assert_close, attention_ref, cast, tolerance

needs_bf16 = pytest.mark.skipif(BF16 is None, reason="ml_dtypes is not installed: no bfloat16 "
                                "numpy arrays (pip install ml_dtypes)")
DTYPES = ["float32", "float16", pytest.param("bfloat16", marks=needs_bf16)]
needs_fp8 = pytest.mark.skipif(not FP8, reason="ml_dtypes is not installed: no float8 numpy "
                               "arrays (pip install ml_dtypes)")
QUANT_DTYPES = ["int8", pytest.param("float8_e4m3fn", marks=needs_fp8),
                pytest.param("float8_e5m2", marks=needs_fp8)]


def qkv(rng, B, Sq, Skv, Hq, Hkv, D, Dv=None, dts=("float32", "float16", "float16"), amp=1.0):
    Dv = D if Dv is None else Dv
    q, q64 = cast(amp * rng.standard_normal((B, Sq, Hq, D)), dts[0])
    k, k64 = cast(amp * rng.standard_normal((B, Skv, Hkv, D)), dts[1])
    v, v64 = cast(rng.standard_normal((B, Skv, Hkv, Dv)), dts[2])
    return (q, k, v), (q64, k64, v64)


def check(arrays, refs, dts=("float32", "float16", "float16"), out_dtype="float32", ref_kw=None,
          **kw):
    o, lse = fai.attention(*arrays, return_lse=True, out_dtype=out_dtype, **kw)
    ref = attention_ref(*refs, **(ref_kw or {}))
    tol = tolerance(*dts)
    assert o.dtype == np.dtype(out_dtype if out_dtype != "bfloat16" else BF16)
    assert lse.dtype == np.float32
    assert_close(o, ref, tol, out_dtype)
    assert_close(lse, ref, tol, what="LSE")
    return o, lse


def pack(x, lengths):
    """The rows of each sequence below its length, one sequence after another (a packed batch)."""
    return np.concatenate([x[b, :n] for b, n in enumerate(lengths)], axis=0)


def pack_ref(ref, lengths):
    """A Ref of a padded batch as its packed batch's, with the bound's scales and rounding
    terms packed alike: O [rows, Hq, Dv] and LSE [Hq, rows]."""
    def rows_last(x):  # [B, Hq, Sq] -> packed [Hq, rows]
        return pack(np.transpose(x, (0, 2, 1)), lengths).T

    return Ref(pack(ref[0], lengths), rows_last(ref[1]), pack(ref.o_scale, lengths),
               pack(ref.o_slack, lengths), rows_last(ref.lse_slack))


def paginate(rng, k, v, lengths, page_size, extra_pages=3, head_major=False):
    """K/V page pools with a shuffled block table; unused pages and tails hold NaN."""
    B, _, H, D = k.shape
    Dv = v.shape[3]
    pages = [(n + page_size - 1) // page_size for n in lengths]
    max_pages = max(pages + [1])
    num_pages = sum(pages) + extra_pages
    order = rng.permutation(num_pages)
    kp = np.full((num_pages, page_size, H, D), np.nan, k.dtype)
    vp = np.full((num_pages, page_size, H, Dv), np.nan, v.dtype)
    bt = np.full((B, max_pages), 10**6, np.int32)  # entries past a length are never read
    n = 0
    for b in range(B):
        for p in range(pages[b]):
            page = order[n]
            n += 1
            bt[b, p] = page
            rows = slice(p * page_size, min((p + 1) * page_size, lengths[b]))
            cnt = rows.stop - rows.start
            kp[page, :cnt] = k[b, rows]
            vp[page, :cnt] = v[b, rows]
    if head_major:  # [num_pages, H, page_size, D] storage, viewed as [num_pages, page_size, H, D]
        kp = np.ascontiguousarray(kp.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
        vp = np.ascontiguousarray(vp.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    return kp, vp, bt

"""fai's Python API against a float64 numpy reference (tests/reference.py): dtypes, GQA/MQA,
causal in both alignments, windows, every mask kind and shape, lengths, packed and paged batches,
LSE, Plan, merge_states, strided inputs read in place, and errors."""
import ctypes
import os
import shutil
import subprocess
import threading
import zlib

import numpy as np
import pytest

import fai
from fai import _core, _lib
from reference import (BF16, FP8, assert_close, attention_ref, cast, quantize, tolerance,
                       values)

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


# -- dtypes, GQA, scale -------------------------------------------------------------------------

@pytest.mark.parametrize("q_dt", DTYPES)
@pytest.mark.parametrize("kv_dt", DTYPES)
@pytest.mark.parametrize("o_dt", DTYPES)
def test_dtypes(q_dt, kv_dt, o_dt):
    rng = np.random.default_rng(1)
    dts = (q_dt, kv_dt, kv_dt)
    arrays, refs = qkv(rng, 2, 9, 21, 4, 2, 32, dts=dts)
    check(arrays, refs, dts, o_dt)


def test_default_out_dtype_is_q_dtype():
    rng = np.random.default_rng(2)
    arrays, _ = qkv(rng, 1, 3, 5, 2, 1, 16, dts=("float16", "float16", "float32"))
    assert fai.attention(*arrays).dtype == np.float16
    assert fai.attention(*arrays, out_dtype="f32").dtype == np.float32
    assert fai.attention(*arrays, out_dtype=np.float32).dtype == np.float32


def test_float64_inputs_are_read_as_float32():
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal(s) for s in [(1, 4, 2, 8), (1, 6, 2, 8), (1, 6, 2, 8)])
    o = fai.attention(q, k, v, out_dtype="float32")
    assert_close(o, attention_ref(*(values(x.astype(np.float32)) for x in (q, k, v))), 0.0)


@pytest.mark.parametrize("hq,hkv", [(4, 4), (8, 2), (6, 1), (12, 3)])
def test_gqa_mqa(hq, hkv):
    rng = np.random.default_rng(hq * 10 + hkv)
    arrays, refs = qkv(rng, 2, 7, 33, hq, hkv, 24, Dv=40)
    check(arrays, refs)


def test_scale():
    rng = np.random.default_rng(4)
    arrays, refs = qkv(rng, 1, 5, 17, 2, 2, 16)
    check(arrays, refs, scale=0.37, ref_kw={"scale": 0.37})


def test_round_p_bf16():
    # P rounded to bf16 on a matrix engine: O within the tolerance plus 2^-8 sum p|v| (fai.h:
    # the Ref's o_scale is max(1, sum p|v|)); elsewhere the exact result
    rng = np.random.default_rng(41)
    dts = ("float16", "float16", "float16")
    arrays, refs = qkv(rng, 1, 70, 90, 4, 2, 64, dts=dts)
    o = fai.attention(*arrays, causal=True, round_p_bf16=True)
    ref = attention_ref(*refs, causal="bottom_right")
    assert_close(o, ref, tolerance(*dts) + 2.0 ** -8)
    with pytest.raises(fai.FaiError, match="round_p_bf16"):
        fai.attention(*arrays, round_p_bf16=1)


@needs_bf16
def test_p_parts_follow_round_p_bf16():
    # all-bf16 prefill multiplies P in bf16 where the CPU can (matrix engine or bf16 dot
    # products: 2 parts, or 1 rounded); elsewhere PV runs in f32 (0) either way
    rng = np.random.default_rng(42)
    (q, k, v), _ = qkv(rng, 1, 64, 64, 4, 2, 64, dts=("bfloat16",) * 3)
    exact = fai.Plan.like(q, k, v).info["p_parts"]
    rounded = fai.Plan.like(q, k, v, round_p_bf16=True).info["p_parts"]
    assert (exact, rounded) in ((0, 0), (2, 1))


# -- causal and windows -------------------------------------------------------------------------

@pytest.mark.parametrize("sq,skv", [(8, 8), (5, 19), (19, 5), (1, 30), (70, 70)])
@pytest.mark.parametrize("align", ["bottom_right", "top_left"])
def test_causal(sq, skv, align):
    rng = np.random.default_rng(sq * 100 + skv)
    arrays, refs = qkv(rng, 2, sq, skv, 4, 2, 16)
    kw = {"causal": True} if align == "bottom_right" else {"causal_top_left": True}
    check(arrays, refs, ref_kw={"causal": align}, **kw)


@pytest.mark.parametrize("window", [(3, 0), (0, 2), (4, 4), (None, 1), (2, None), (0, 0)])
@pytest.mark.parametrize("causal", [None, "bottom_right", "top_left"])
def test_window(window, causal):
    rng = np.random.default_rng(5)
    arrays, refs = qkv(rng, 2, 11, 16, 2, 1, 16)
    kw = {"causal": causal == "bottom_right", "causal_top_left": causal == "top_left"}
    check(arrays, refs, window=window, ref_kw={"causal": causal, "window": window}, **kw)


# -- explicit masks -----------------------------------------------------------------------------

MASK_SHAPES = {"SqSkv": lambda B, H, S, K: (S, K), "BSqSkv": lambda B, H, S, K: (B, S, K),
               "BHSqSkv": lambda B, H, S, K: (B, H, S, K),
               "key_padding": lambda B, H, S, K: (B, 1, 1, K),
               "per_head": lambda B, H, S, K: (1, H, S, K)}


def _ref_shape(m):
    """The mask as the reference broadcasts it: [.., Sq, Skv] against [B, Hq, Sq, Skv]."""
    return m[:, None] if m.ndim == 3 else m


@pytest.mark.parametrize("kind", ["keep", "drop", "add"])
@pytest.mark.parametrize("shape", sorted(MASK_SHAPES))
@pytest.mark.parametrize("causal", [False, True])
def test_masks(kind, shape, causal):
    rng = np.random.default_rng(zlib.crc32(f"{kind} {shape} {causal}".encode()))
    B, Sq, Skv, Hq, Hkv = 2, 6, 13, 4, 2
    arrays, refs = qkv(rng, B, Sq, Skv, Hq, Hkv, 16)
    mshape = MASK_SHAPES[shape](B, Hq, Sq, Skv)
    bits = rng.random(mshape) < 0.7
    ref_kw = {"causal": "bottom_right" if causal else None}
    if kind == "keep":
        kw = {"mask": bits}
        ref_kw["keep"] = _ref_shape(bits)
    elif kind == "drop":
        kw = {"mask_drop": (~bits).astype(np.uint8)}
        ref_kw["keep"] = _ref_shape(bits)
    else:
        add = np.where(bits, rng.standard_normal(mshape), -np.inf).astype(np.float32)
        kw = {"mask_add": add}
        ref_kw["add"] = _ref_shape(add.astype(np.float64))
    check(arrays, refs, causal=causal, ref_kw=ref_kw, **kw)


def test_mask_add_float16_is_converted():
    rng = np.random.default_rng(6)
    arrays, refs = qkv(rng, 1, 4, 9, 2, 2, 8)
    add = rng.standard_normal((4, 9)).astype(np.float16)
    check(arrays, refs, mask_add=add, ref_kw={"add": add.astype(np.float64)})


def test_fully_masked_rows():
    rng = np.random.default_rng(7)
    arrays, refs = qkv(rng, 1, 4, 9, 2, 2, 8)
    keep = np.ones((4, 9), bool)
    keep[2] = False
    o, lse = check(arrays, refs, mask=keep, ref_kw={"keep": keep})
    assert np.all(o[0, 2] == 0) and np.all(np.isneginf(lse[0, :, 2]))


def test_invisible_nan_never_reaches_the_output():
    rng = np.random.default_rng(8)
    (q, k, v), (q64, k64, v64) = qkv(rng, 1, 4, 12, 2, 1, 16)
    k[0, 10:] = np.nan
    v[0, 10:] = np.inf
    o = fai.attention(q, k, v, seqlens_kv=[10])
    ro, _ = attention_ref(q64, k64, v64, seqlens_kv=[10])
    assert_close(o, ro, 2e-3)


# -- lengths, packed, paged ---------------------------------------------------------------------

@pytest.mark.parametrize("causal", [False, True])
def test_seqlens(causal):
    rng = np.random.default_rng(9)
    B, Sq, Skv = 4, 9, 20
    arrays, refs = qkv(rng, B, Sq, Skv, 4, 2, 16)
    sq = np.array([9, 0, 4, 7], np.int32)
    skv = np.array([20, 5, 0, 11], np.int32)
    o, lse = check(arrays, refs, seqlens_q=sq, seqlens_kv=skv, causal=causal,
                   ref_kw={"seqlens_q": sq, "seqlens_kv": skv,
                           "causal": "bottom_right" if causal else None})
    assert np.all(o[1] == 0) and np.all(o[2, 4:] == 0) and np.all(np.isneginf(lse[2]))


def _pack(x, lengths):
    return np.concatenate([x[b, :n] for b, n in enumerate(lengths)], axis=0)


@pytest.mark.parametrize("packed_kv", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_packed(packed_kv, causal):
    rng = np.random.default_rng(10)
    B, Sq, Skv, Hq, Hkv, D = 3, 7, 15, 4, 2, 16
    (q, k, v), (q64, k64, v64) = qkv(rng, B, Sq, Skv, Hq, Hkv, D)
    lq = [7, 0, 3]
    lk = [15, 4, 9]
    cu_q = np.concatenate([[0], np.cumsum(lq)]).astype(np.int32)
    qp = np.concatenate([_pack(q, lq), np.full((2, Hq, D), 37, q.dtype)])  # 2 padding rows
    kw = {"cu_seqlens_q": cu_q, "causal": causal}
    if packed_kv:
        kw["cu_seqlens_kv"] = np.concatenate([[0], np.cumsum(lk)]).astype(np.int32)
        kp, vp = _pack(k, lk), _pack(v, lk)
    else:
        kw["seqlens_kv"] = lk
        kp, vp = k, v
    o, lse = fai.attention(qp, kp, vp, return_lse=True, **kw)
    assert o.shape == (qp.shape[0], Hq, D) and lse.shape == (Hq, qp.shape[0])
    ro, rl = attention_ref(q64, k64, v64, seqlens_q=lq, seqlens_kv=lk,
                           causal="bottom_right" if causal else None)
    assert_close(o[:10], _pack(ro, lq), 2e-3)
    assert_close(lse[:, :10], _pack(np.transpose(rl, (0, 2, 1)), lq).T, 2e-3, what="LSE")
    assert np.all(o[10:] == 0) and np.all(np.isneginf(lse[:, 10:]))


def test_packed_mask_is_indexed_inside_each_sequence():
    rng = np.random.default_rng(11)
    B, Sq, Skv, H, D = 2, 5, 8, 2, 8
    (q, k, v), (q64, k64, v64) = qkv(rng, B, Sq, Skv, H, H, D)
    lq, lk = [5, 3], [8, 6]
    keep = rng.random((B, H, Sq, Skv)) < 0.6
    cu_q = np.array([0, 5, 8], np.int32)
    cu_k = np.array([0, 8, 14], np.int32)
    o = fai.attention(_pack(q, lq), _pack(k, lk), _pack(v, lk), cu_seqlens_q=cu_q,
                      cu_seqlens_kv=cu_k, mask=keep)
    ro, _ = attention_ref(q64, k64, v64, seqlens_q=lq, seqlens_kv=lk, keep=keep)
    assert_close(o, _pack(ro, lq), 2e-3)


def _paginate(rng, k, v, lengths, page_size, extra_pages=3, head_major=False):
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


@pytest.mark.parametrize("page_size", [16, 5, 1])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("head_major", [False, True])
def test_paged(page_size, causal, head_major):
    rng = np.random.default_rng(page_size)
    B, Sq, Skv, Hq, Hkv, D = 3, 4, 40, 8, 2, 32
    (q, k, v), (q64, k64, v64) = qkv(rng, B, Sq, Skv, Hq, Hkv, D)
    lk = [40, 17, 0]
    kp, vp, bt = _paginate(rng, k, v, lk, page_size, head_major=head_major)
    o, lse = fai.attention(q, kp, vp, block_table=bt, seqlens_kv=lk, causal=causal,
                           return_lse=True)
    ro, rl = attention_ref(q64, k64, v64, seqlens_kv=lk,
                           causal="bottom_right" if causal else None)
    assert_close(o, ro, 2e-3)
    assert_close(lse, rl, 2e-3, what="LSE")


def test_paged_with_packed_queries_and_mask():
    rng = np.random.default_rng(12)
    B, Sq, Skv, H, D = 2, 6, 24, 2, 16
    (q, k, v), (q64, k64, v64) = qkv(rng, B, Sq, Skv, H, H, D)
    lq, lk = [6, 2], [24, 9]
    kp, vp, bt = _paginate(rng, k, v, lk, 8)
    keep = rng.random((Sq, 30)) < 0.8  # wider than the longest sequence: fine when paged
    o = fai.attention(_pack(q, lq), kp, vp, cu_seqlens_q=np.array([0, 6, 8], np.int32),
                      block_table=bt, seqlens_kv=lk, mask=keep, causal=True)
    ro, _ = attention_ref(q64, k64, v64, seqlens_q=lq, seqlens_kv=lk, keep=keep[:, :Skv],
                          causal="bottom_right")
    assert_close(o, _pack(ro, lq), 2e-3)


# -- layouts: strides passed through, no copies ---------------------------------------------------

def test_strided_inputs_are_read_in_place():
    rng = np.random.default_rng(13)
    B, H, S, D = 2, 4, 10, 16
    q_bhsd = rng.standard_normal((B, H, S, D)).astype(np.float32)
    cache = rng.standard_normal((B, 32, 2, D)).astype(np.float16)  # capacity 32, 12 used
    q = q_bhsd.transpose(0, 2, 1, 3)  # a BHSD array viewed as BSHD
    k = cache[:, :12]
    v = cache[:, 20:32]
    for arr in (q, k, v):
        view = _core._view(arr, "x", _core._want_float("x"))
        assert view.ptr == arr.__array_interface__["data"][0], "copied"
    o = fai.attention(q, k, v)
    ro, _ = attention_ref(values(q), values(k), values(v))
    assert_close(o, ro, 2e-3)


def test_last_dim_not_contiguous_is_copied():
    rng = np.random.default_rng(14)
    q = rng.standard_normal((1, 3, 2, 16)).astype(np.float32)[..., ::2]
    k = rng.standard_normal((1, 5, 2, 8)).astype(np.float32)
    o = fai.attention(q, k, k)
    assert_close(o, attention_ref(values(q), values(k), values(k)), 0.0)


def test_broadcast_kv_shared_across_batch():
    rng = np.random.default_rng(15)
    q = rng.standard_normal((3, 4, 2, 8)).astype(np.float32)
    k1 = rng.standard_normal((1, 6, 1, 8)).astype(np.float16)
    k = np.broadcast_to(k1, (3, 6, 1, 8))
    o = fai.attention(q, k, k)
    ro, _ = attention_ref(values(q), values(k), values(k))
    assert_close(o, ro, 2e-3)


def test_out_parameter():
    rng = np.random.default_rng(16)
    (q, k, v), refs = qkv(rng, 1, 4, 7, 2, 2, 8)
    out = np.full((1, 4, 2, 8), 5.0, np.float16)
    res = fai.attention(q, k, v, out=out)
    assert res is out
    assert_close(out, attention_ref(*refs)[0], 2e-3, "float16")
    big = np.zeros((1, 4, 2, 16), np.float32)
    fai.attention(q, k, v, out=big[..., 4:12])  # a strided output
    assert_close(big[..., 4:12], attention_ref(*refs)[0], 2e-3)
    assert np.all(big[..., :4] == 0) and np.all(big[..., 12:] == 0)


class _ArrayLike:
    def __init__(self, a):
        self._a = a

    def __array__(self, dtype=None, copy=None):
        return self._a if dtype is None else self._a.astype(dtype)


class _DLPackOnly:
    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kw):
        return self._a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_array_likes():
    rng = np.random.default_rng(17)
    (q, k, v), refs = qkv(rng, 1, 3, 5, 2, 1, 8)
    ro, _ = attention_ref(*refs)
    assert_close(fai.attention(_ArrayLike(q), _DLPackOnly(k), v.tolist(), out_dtype="f32"), ro,
                 2e-3)


# -- Plan ---------------------------------------------------------------------------------------

def test_plan_reuse_and_info():
    rng = np.random.default_rng(18)
    (q, k, v), _ = qkv(rng, 2, 16, 64, 8, 2, 32)
    plan = fai.Plan.like(q, k, v, causal=True)
    info = plan.info
    for key in ("tile_q", "tile_kv", "units", "workers", "threads", "imbalance",
                "workspace_bytes", "split_kv", "isa"):
        assert key in info, key
    assert info["workspace_bytes"] == plan.workspace_bytes
    # f32 Q with f16 K/V: PV in f32 on every vector table, P as hi + lo on the matrix engine
    assert info["p_parts"] == (2 if info["isa"].startswith("amx") else 0)
    # kv tiles in flight: 1 or 2 on the matrix engine (fai_problem.pipeline_tiles), else 1
    assert info["pipeline_tiles"] in ((1, 2) if info["isa"].startswith("amx") else (1,))
    assert info["l1d_capacity"] == fai.cpu_cache_bytes(1)
    assert info["l2_capacity"] == fai.cpu_cache_bytes(2)
    assert fai.cpu_cache_bytes(3) >= 0 and fai.cpu_cache_bytes(4) == 0
    ranges = plan.worker_ranges()
    assert len(ranges) == info["workers"]
    assert ranges[-1]["line_end"] == info["total_weight"]
    assert plan.unit(0)["heads_q"] >= 1
    for step in range(3):  # the same plan, new data each "layer"
        (q, k, v), refs = qkv(rng, 2, 16, 64, 8, 2, 32)
        o = plan.run(q, k, v)
        assert_close(o, attention_ref(*refs, causal="bottom_right")[0], 2e-3)
    plan.close()
    with pytest.raises(fai.FaiError, match="closed"):
        plan.run(q, k, v)


def test_plan_from_shapes_paged_decode():
    rng = np.random.default_rng(19)
    B, Hq, Hkv, D, ps = 2, 8, 2, 64, 16
    (q, k, v), (q64, k64, v64) = qkv(rng, B, 1, 64, Hq, Hkv, D)
    lk = [64, 30]
    kp, vp, bt = _paginate(rng, k, v, lk, ps)
    with fai.Plan(B, Hq, Hkv, 1, None, D, q_dtype="float32", k_dtype="float16",
                  seqlens_kv=lk, page_size=ps, num_pages=kp.shape[0],
                  pages_per_seq=bt.shape[1], workers=4, threads=2) as plan:
        assert plan.info["workers"] == 4
        o, lse = plan.run(q, kp, vp, block_table=bt, return_lse=True)
        ro, rl = attention_ref(q64, k64, v64, seqlens_kv=lk)
        assert_close(o, ro, 2e-3)
        assert_close(lse, rl, 2e-3, what="LSE")
        with pytest.raises(fai.FaiError, match="block_table is required"):
            plan.run(q, kp, vp)
        with pytest.raises(fai.FaiError, match="dtype"):
            plan.run(q.astype(np.float16), kp, vp, block_table=bt)
    with fai.Plan(B, Hq, Hkv, 1, None, D, seqlens_kv=lk, page_size=ps, num_pages=kp.shape[0],
                  pages_per_seq=bt.shape[1], workers=4, trust_block_table=True) as trusted:
        assert np.array_equal(trusted.run(q, kp, vp, block_table=bt), o)


def test_plan_run_checks_shapes_and_masks():
    rng = np.random.default_rng(20)
    (q, k, v), _ = qkv(rng, 1, 4, 8, 2, 2, 8)
    plan = fai.Plan.like(q, k, v, mask_kind="keep")
    with pytest.raises(fai.FaiError, match="q has shape"):
        plan.run(q[:, :3], k, v, mask=np.ones((4, 8), bool))
    with pytest.raises(fai.FaiError, match="mask, which is missing"):
        plan.run(q, k, v)
    with pytest.raises(fai.FaiError, match="mask has shape"):
        plan.run(q, k, v, mask=np.ones((4, 7), bool))
    assert plan.run(q, k, v, mask=np.ones((4, 8), bool)).shape == (1, 4, 2, 8)


def test_threads_do_not_change_the_result():
    rng = np.random.default_rng(21)
    (q, k, v), _ = qkv(rng, 1, 33, 300, 8, 2, 64)
    one = fai.attention(q, k, v, causal=True, threads=1, workers=6)
    two = fai.attention(q, k, v, causal=True, threads=2, workers=6)
    assert np.array_equal(one, two)


def test_concurrent_runs_of_one_plan():
    rng = np.random.default_rng(22)
    (q, k, v), refs = qkv(rng, 2, 16, 40, 4, 2, 32)
    plan = fai.Plan.like(q, k, v, threads=1)
    want = attention_ref(*refs)[0]
    errors = []

    def work():
        try:
            for _ in range(20):
                assert_close(plan.run(q, k, v), want, 2e-3)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_empty_problems():
    q = np.zeros((0, 4, 2, 8), np.float32)
    k = np.zeros((0, 5, 2, 8), np.float16)
    o, lse = fai.attention(q, k, k, return_lse=True)
    assert o.shape == (0, 4, 2, 8) and lse.shape == (0, 2, 4)
    rng = np.random.default_rng(23)
    (q, k, v), _ = qkv(rng, 2, 3, 4, 2, 2, 8)
    o, lse = fai.attention(q, k, v, seqlens_kv=[0, 0], return_lse=True)
    assert np.all(o == 0) and np.all(np.isneginf(lse))


# -- merge_states -------------------------------------------------------------------------------

@pytest.mark.parametrize("part_dtype", DTYPES)
def test_merge_states_equals_attention_over_the_union(part_dtype):
    rng = np.random.default_rng(24)
    B, Sq, Skv, Hq, Hkv, D = 2, 5, 48, 4, 2, 16
    (q, k, v), _ = qkv(rng, B, Sq, Skv, Hq, Hkv, D)
    full_o, full_lse = fai.attention(q, k, v, return_lse=True)
    cuts = [0, 20, 20, 48]  # one empty part: LSE -inf, contributes nothing
    parts = [fai.attention(q, k[:, a:b], v[:, a:b], return_lse=True, out_dtype=part_dtype)
             if b > a else (np.zeros((B, Sq, Hq, D), part_dtype if part_dtype != "bfloat16"
                                     else BF16), np.full((B, Hq, Sq), -np.inf, np.float32))
             for a, b in zip(cuts[:-1], cuts[1:])]
    o, lse = fai.merge_states([p[0] for p in parts], [p[1] for p in parts], out_dtype="float32")
    step = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1e-2}[part_dtype]
    assert_close(o, values(full_o), step)
    assert_close(lse, values(full_lse), 1e-5, what="LSE")
    o2, _ = fai.merge_states([p[0] for p in parts], [p[1] for p in parts])
    assert o2.dtype == parts[0][0].dtype


def test_merge_states_packed_and_all_empty():
    rng = np.random.default_rng(25)
    o1 = rng.standard_normal((6, 2, 8)).astype(np.float32)
    o2 = rng.standard_normal((6, 2, 8)).astype(np.float32)
    l1 = rng.standard_normal((2, 6)).astype(np.float32)
    l2 = rng.standard_normal((2, 6)).astype(np.float32)
    l1[:, 0] = l2[:, 0] = -np.inf
    o, lse = fai.merge_states([o1, o2], [l1, l2])
    with np.errstate(invalid="ignore", divide="ignore"):
        w1 = np.exp(l1 - np.maximum(l1, l2))
        w2 = np.exp(l2 - np.maximum(l1, l2))
        want = (w1.T[..., None] * o1 + w2.T[..., None] * o2) / (w1 + w2).T[..., None]
    assert np.all(o[0] == 0) and np.all(np.isneginf(lse[:, 0]))
    assert_close(o[1:], want[1:], 1e-5)
    assert_close(lse[:, 1:], np.logaddexp(l1, l2)[:, 1:], 1e-5, what="LSE")


# -- errors -------------------------------------------------------------------------------------

def test_library_errors_carry_the_message():
    q = np.zeros((1, 2, 12, 8), np.float32)
    k = np.zeros((1, 3, 5, 8), np.float16)
    with pytest.raises(fai.FaiError) as info:
        fai.attention(q, k, k)
    assert isinstance(info.value, ValueError)
    assert info.value.status == "FAI_ERR_INVALID_ARG"
    assert "heads_q" in str(info.value) and "12" in str(info.value)


@pytest.mark.parametrize("kwargs,match", [
    ({"causal": True, "causal_top_left": True}, "exclude each other"),
    ({"scale": float("inf")}, "not a finite"),
    ({"scale": float("nan")}, "not a finite"),
    ({"scale": 1e39}, "not a finite float32"),
    ({"scale": True}, "expected a number"),
    ({"window": (1, 2, 3)}, "window"),
    ({"window": (-5, 0)}, "window"),
    ({"mask": np.ones((2, 3), bool), "mask_add": np.zeros((2, 3), np.float32)},
     "exclude each other"),
    ({"mask": np.ones((2, 4), bool)}, "mask has shape"),
    ({"mask": np.ones((2, 3), np.float32)}, "mask has dtype"),
    ({"seqlens_q": [1, 2]}, "seqlens_q has shape"),
    ({"seqlens_kv": [4]}, "seqlens_kv"),
    ({"seqlens_q": [1.5]}, "seqlens_q has dtype"),
    ({"threads": -1}, "threads"),
    ({"out_dtype": "int8"}, "out dtype int8"),
    ({"block_table": np.zeros((1, 1), np.int32)}, "needs seqlens_kv"),
    ({"cu_seqlens_q": [0, 2]}, "packed"),
])
def test_bad_arguments(kwargs, match):
    q = np.zeros((1, 2, 2, 8), np.float32)
    k = np.zeros((1, 3, 1, 8), np.float16)
    with pytest.raises(fai.FaiError, match=match):
        fai.attention(q, k, k, **kwargs)


def test_bad_arrays():
    q = np.zeros((1, 2, 2, 8), np.float32)
    k = np.zeros((1, 3, 1, 8), np.float16)
    with pytest.raises(fai.FaiError, match="q has dtype int32"):
        fai.attention(q.astype(np.int32), k, k)
    with pytest.raises(fai.FaiError, match="expected \\[B, Sq, Hq, D\\]"):
        fai.attention(q[0], k, k)
    with pytest.raises(fai.FaiError, match="head_dim"):
        fai.attention(q, k[..., :4], k)
    with pytest.raises(fai.FaiError, match="does not match k's seq_kv"):
        fai.attention(q, k, k[:, :2])
    with pytest.raises(fai.FaiError, match="q's batch"):
        fai.attention(q, np.concatenate([k, k]), np.concatenate([k, k]))
    with pytest.raises(fai.FaiError, match="read-only"):
        out = np.zeros((1, 2, 2, 8), np.float32)
        out.flags.writeable = False
        fai.attention(q, k, k, out=out)
    with pytest.raises(fai.FaiError, match="out_dtype float16 does not match"):
        fai.attention(q, k, k, out=np.zeros((1, 2, 2, 8), np.float32), out_dtype="float16")
    with pytest.raises(fai.FaiError, match="out has shape"):
        fai.attention(q, k, k, out=np.zeros((1, 2, 2, 4), np.float32))


def test_block_table_outside_the_pool():
    rng = np.random.default_rng(26)
    (q, k, v), _ = qkv(rng, 1, 1, 8, 2, 2, 8)
    kp, vp, bt = _paginate(rng, k, v, [8], 4, extra_pages=0)
    bt[0, 1] = 99
    with pytest.raises(fai.FaiError, match="outside the pool") as info:
        fai.attention(q, kp, vp, block_table=bt, seqlens_kv=[8])
    assert info.value.status == "FAI_ERR_INVALID_ARG"


def test_lengths_past_the_tensor():
    q = np.zeros((1, 2, 2, 8), np.float32)
    k = np.zeros((1, 3, 1, 8), np.float16)
    with pytest.raises(fai.FaiError, match="seqlens_kv"):
        fai.attention(q, k, k, seqlens_kv=[4])


# -- defaults are never taken for computed values; zero sizes ------------------------------------

@pytest.mark.parametrize("scale", [0.0, 1e-46, np.float32(0)])
def test_scale_that_is_zero_weighs_keys_alike(scale):
    rng = np.random.default_rng(40)
    (q, k, v), refs = qkv(rng, 1, 3, 7, 2, 1, 16, dts=("float32",) * 3, amp=3.0)
    o, lse = fai.attention(q, k, v, scale=scale, return_lse=True)
    mean = np.repeat(refs[2].mean(axis=1, keepdims=True), 3, axis=1).repeat(2, axis=2)
    assert np.allclose(o, mean, atol=1e-6)
    assert np.allclose(lse, np.log(7.0), atol=1e-6)
    # None is the default, 1/sqrt(D): far from uniform at these logits
    assert not np.allclose(fai.attention(q, k, v), mean, atol=1e-2)
    check((q, k, v), refs, ("float32",) * 3, scale=None)


def test_v_with_no_columns_is_refused():
    q = np.ones((1, 3, 1, 4), np.float32)
    k = np.ones((1, 5, 1, 4), np.float32)
    with pytest.raises(fai.FaiError, match="head_dim_v = 0"):
        fai.attention(q, k, np.ones((1, 5, 1, 0), np.float32))
    # through views of larger arrays, and an output view of no columns: nothing is written
    vbig = np.ones((1, 5, 1, 8), np.float32)
    obig = np.full((1, 3, 1, 8), 7.0, np.float32)
    with pytest.raises(fai.FaiError, match="head_dim_v = 0"):
        fai.attention(q, k, vbig[..., :0], out=obig[..., :0])
    assert np.all(obig == 7.0)
    with pytest.raises(fai.FaiError, match="head_dim_v = 0"):
        fai.Plan(1, 1, 1, 3, 5, 4, 0)
    with pytest.raises(fai.FaiError, match="head_dim_v = -1"):
        fai.Plan(1, 1, 1, 3, 5, 4, -1)


def test_q_and_k_with_no_columns_are_refused():
    with pytest.raises(fai.FaiError, match="head_dim = 0"):
        fai.attention(np.ones((1, 3, 1, 0), np.float32), np.ones((1, 5, 1, 0), np.float32),
                      np.ones((1, 5, 1, 4), np.float32))


def test_page_pool_of_empty_pages_is_refused():
    q = np.ones((1, 1, 1, 4), np.float32)
    pool = np.ones((3, 0, 1, 4), np.float32)
    with pytest.raises(fai.FaiError, match="page_size >= 1"):
        fai.attention(q, pool, pool, block_table=np.zeros((1, 2), np.int32), seqlens_kv=[0])
    with pytest.raises(fai.FaiError, match="num_pages = 3 with page_size = 0"):
        fai.Plan(1, 1, 1, 1, 0, 4, page_size=0, num_pages=3)


def test_wide_block_table():
    # a table whose capacity (pages x page size) is past int32: only the lengths count
    rng = np.random.default_rng(41)
    q = rng.standard_normal((1, 1, 2, 4)).astype(np.float32)
    pool = rng.standard_normal((1, 65536, 1, 4)).astype(np.float32)
    table = np.zeros((1, 32768), np.int32)
    o = fai.attention(q, pool, pool, block_table=table, seqlens_kv=[10])
    assert np.array_equal(o, fai.attention(q, pool[:, :10], pool[:, :10]))


@pytest.mark.parametrize("shape", [(0, 3, 2, 0), (2, 0, 2, 5), (2, 3, 2, 0)])
def test_empty_extents(shape):
    B, Sq, Hq, Skv = shape
    rng = np.random.default_rng(42)
    q = rng.standard_normal((B, Sq, Hq, 8)).astype(np.float32)
    k = rng.standard_normal((B, Skv, 1, 8)).astype(np.float32)
    o, lse = fai.attention(q, k, k[..., :6], return_lse=True)
    assert o.shape == (B, Sq, Hq, 6) and lse.shape == (B, Hq, Sq)
    assert np.all(o == 0) and np.all(np.isneginf(lse))


def test_f32_tolerance_holds_at_large_logits():
    # N(0, 9) inputs, D = 128, causal: LSE up to ~40, where a fixed 1e-5 x max(1, |ref|) does
    # not hold (fai's error and numpy's float32 are about 3x that); the bound grows with the
    # logits and with |V|
    rng = np.random.default_rng(43)
    q, q64 = cast(3 * rng.standard_normal((1, 128, 4, 128)), "float32")
    k, k64 = cast(3 * rng.standard_normal((1, 128, 2, 128)), "float32")
    v, v64 = cast(3 * rng.standard_normal((1, 128, 2, 128)), "float32")
    ref = attention_ref(q64, k64, v64, causal="bottom_right")
    assert np.nanmax(ref[1]) > 30
    o, lse = fai.attention(q, k, v, causal=True, return_lse=True)
    assert_close(o, ref, 0.0)
    assert_close(lse, ref, 0.0, what="LSE")


def test_f32_tolerance_catches_a_scale_off_by_ulps():
    # the bound is not loose enough to hide a small real error: a scale off by 2^-17
    rng = np.random.default_rng(44)
    (q, k, v), refs = qkv(rng, 1, 16, 64, 4, 2, 64, dts=("float32",) * 3, amp=2.0)
    ref = attention_ref(*refs, scale=0.125)
    assert_close(fai.attention(q, k, v, scale=0.125), ref, 0.0)
    with pytest.raises(AssertionError):
        assert_close(fai.attention(q, k, v, scale=0.125 * (1 + 2.0**-17)), ref, 0.0)


# -- the ctypes structs against the C header --------------------------------------------------

def _header():
    root = os.environ.get("FAI_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
    path = os.path.join(root, "include", "fai.h")
    return path if os.path.isfile(path) else None


@pytest.mark.skipif(_header() is None or shutil.which("cc") is None,
                    reason="needs include/fai.h of a source tree and a C compiler")
def test_struct_layout_matches_the_header(tmp_path):
    structs = {"fai_problem": _lib.Problem, "fai_tensor": _lib.Tensor, "fai_mask": _lib.Mask,
               "fai_scale": _lib.Scale, "fai_tensors": _lib.Tensors, "fai_plan_info": _lib.PlanInfo,
               "fai_worker_range": _lib.WorkerRange, "fai_unit_info": _lib.UnitInfo}
    lines = ["#include <fai.h>", "#include <stdio.h>", "#include <stddef.h>", "int main(void) {"]
    expect = []
    for cname, py in structs.items():
        lines.append(f'printf("%zu\\n", sizeof({cname}));')
        expect.append(ctypes.sizeof(py))
        for field, _ in py._fields_:
            lines.append(f'printf("%zu\\n", offsetof({cname}, {field}));')
            expect.append(getattr(py, field).offset)
    lines.append("return 0; }")
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines))
    exe = tmp_path / "layout"
    inc = os.path.dirname(_header())
    subprocess.run(["cc", "-std=c11", "-I", inc, str(src), "-o", str(exe)], check=True)
    got = [int(x) for x in subprocess.run([str(exe)], check=True, capture_output=True,
                                          text=True).stdout.split()]
    assert got == expect


# -- score modifiers ----------------------------------------------------------------------------

@pytest.mark.parametrize("causal", [None, "bottom_right", "top_left"])
def test_modifiers_against_reference(causal):
    rng = np.random.default_rng(61)
    arrays, refs = qkv(rng, 2, 9, 40, 4, 2, 32, amp=2.0)
    slopes = fai.alibi_slopes(4)
    sinks = np.array([0.5, -1.0, 3.0, -np.inf], np.float32)
    kw = {"bottom_right": dict(causal=True), "top_left": dict(causal_top_left=True),
          None: {}}[causal]
    check(arrays, refs, softcap=7.5, alibi_slopes=slopes, sinks=sinks, window=(12, -1), **kw,
          ref_kw=dict(causal=causal, window=(12, -1), softcap=7.5, alibi_slopes=slopes,
                      sinks=sinks))


def test_mask_bits_match_keep_mask():
    rng = np.random.default_rng(62)
    arrays, refs = qkv(rng, 2, 19, 45, 4, 2, 16)
    keep = rng.random((2, 4, 19, 45)) < 0.6
    keep[..., 8:40] = False  # whole bytes and words of zeros
    bits = np.packbits(keep, axis=-1, bitorder="little")
    assert bits.shape == (2, 4, 19, 6)
    o_bits, lse_bits = fai.attention(*arrays, mask_bits=bits, return_lse=True)
    o_keep, lse_keep = fai.attention(*arrays, mask=keep, return_lse=True)
    assert np.array_equal(o_bits, o_keep) and np.array_equal(lse_bits, lse_keep)
    check(arrays, refs, mask_bits=bits[0, 0], ref_kw=dict(keep=keep[0, 0]))
    with pytest.raises(fai.FaiError, match="mask_bits"):
        fai.attention(*arrays, mask_bits=bits[..., :5])
    with pytest.raises(fai.FaiError, match="mask_bits"):
        fai.attention(*arrays, mask_bits=keep)  # bool: bytes, not bits


def test_sinks_masked_rows_and_merge():
    rng = np.random.default_rng(63)
    arrays, refs = qkv(rng, 1, 6, 20, 2, 2, 16)
    sinks = np.array([1.25, -0.5], np.float32)
    o, lse = fai.attention(*arrays, sinks=sinks, mask=np.zeros((6, 20), bool), return_lse=True)
    assert not o.any() and np.array_equal(lse, np.broadcast_to(sinks[None, :, None], lse.shape))
    # shards without sinks, merged, then the sinks once
    q, k, v = arrays
    parts = [fai.attention(q, k[:, a:b], v[:, a:b], return_lse=True)
             for a, b in ((0, 7), (7, 20))]
    o_m, lse_m = fai.merge_states([p[0] for p in parts], [p[1] for p in parts], sinks=sinks)
    o_w, lse_w = fai.attention(q, k, v, sinks=sinks, return_lse=True)
    assert np.allclose(o_m, o_w, atol=1e-5) and np.allclose(lse_m, lse_w, atol=1e-5)


def test_modifier_errors():
    rng = np.random.default_rng(64)
    arrays, _ = qkv(rng, 1, 3, 5, 2, 1, 8)
    with pytest.raises(fai.FaiError, match="softcap = -1"):
        fai.attention(*arrays, softcap=-1.0)
    with pytest.raises(fai.FaiError, match="softcap"):
        fai.attention(*arrays, softcap="big")
    with pytest.raises(fai.FaiError, match="alibi_slopes.*shape"):
        fai.attention(*arrays, alibi_slopes=np.ones(3, np.float32))
    with pytest.raises(fai.FaiError, match=r"alibi_slopes\[1\] = nan"):
        fai.attention(*arrays, alibi_slopes=np.array([0.5, np.nan], np.float32))
    with pytest.raises(fai.FaiError, match=r"sinks\[0\] = inf"):
        fai.attention(*arrays, sinks=np.array([np.inf, 0.0], np.float32))
    plan = fai.Plan.like(*arrays)
    with pytest.raises(fai.FaiError, match="sinks given"):
        plan.run(*arrays, sinks=np.zeros(2, np.float32))
    plan = fai.Plan.like(*arrays, alibi_slopes=np.zeros(2))
    with pytest.raises(fai.FaiError, match="alibi_slopes is required"):
        plan.run(*arrays)
    assert np.array_equal(fai.alibi_slopes(8), 2.0 ** -np.arange(1, 9, dtype=np.float32))


# -- quantized K and V --------------------------------------------------------------------------
# the reference reads the dequantized values code x scale in float64: exactly what fai reads

def quantized_qkv(rng, B, Sq, Skv, Hq, Hkv, D, dts, kinds):
    """Q float32 and K, V quantized to dts (k's, v's) with scales of kinds (k's, v's)."""
    q, q64 = cast(rng.standard_normal((B, Sq, Hq, D)), "float32")
    k, ks, k64 = quantize(rng, rng.standard_normal((B, Skv, Hkv, D)), dts[0], kinds[0])
    v, vs, v64 = quantize(rng, rng.standard_normal((B, Skv, Hkv, D)), dts[1], kinds[1])
    return (q, k, v), (ks, vs), (q64, k64, v64)


@pytest.mark.parametrize("dt", QUANT_DTYPES)
@pytest.mark.parametrize("kind", ["token", "head"])
@pytest.mark.parametrize("sq,skv,causal", [(1, 70, None), (33, 33, "bottom_right"),
                                           (9, 40, "top_left")])
def test_quantized_dense(dt, kind, sq, skv, causal):
    rng = np.random.default_rng(sq * 7 + skv)
    arrays, (ks, vs), refs = quantized_qkv(rng, 2, sq, skv, 8, 2, 32, (dt, dt), (kind, kind))
    assert arrays[1].dtype == np.dtype(FP8.get(dt, dt)) and ks.dtype == np.float32
    kw = {"bottom_right": dict(causal=True), "top_left": dict(causal_top_left=True),
          None: {}}[causal]
    check(arrays, refs, ("float32", dt, dt), k_scale=ks, v_scale=vs, ref_kw=dict(causal=causal),
          **kw)


@pytest.mark.parametrize("k_dt,v_dt", [("int8", "float16"), pytest.param(
    "float8_e5m2", "int8", marks=needs_fp8), pytest.param("bfloat16", "float8_e4m3fn",
                                                          marks=[needs_fp8, needs_bf16])])
def test_quantized_k_and_v_independently(k_dt, v_dt):
    rng = np.random.default_rng(71)
    q, q64 = cast(rng.standard_normal((2, 5, 4, 16)), "float32")
    kw, k_ref, v_ref = {}, None, None
    kx, vx = rng.standard_normal((2, 17, 2, 16)), rng.standard_normal((2, 17, 2, 16))
    if k_dt in ("int8",) + tuple(FP8):
        k, kw["k_scale"], k_ref = quantize(rng, kx, k_dt, "tensor")
    else:
        k, k_ref = cast(kx, k_dt)
    if v_dt in ("int8",) + tuple(FP8):
        v, kw["v_scale"], v_ref = quantize(rng, vx, v_dt, "token")
    else:
        v, v_ref = cast(vx, v_dt)
    check((q, k, v), (q64, k_ref, v_ref), ("float32", k_dt, v_dt), causal=True,
          ref_kw=dict(causal="bottom_right"), **kw)


def _unpage(pool, bt, lengths, skv):
    """The dense [B, skv, H, D] rows a page pool holds for each sequence (0 past a length)."""
    ps = pool.shape[1]
    dense = np.zeros((len(lengths), skv) + pool.shape[2:])
    for b, n in enumerate(lengths):
        for j in range(n):
            dense[b, j] = pool[bt[b, j // ps], j % ps]
    return dense


@pytest.mark.parametrize("dt", QUANT_DTYPES)
@pytest.mark.parametrize("kinds", [("token", "token"), ("head", "tensor")])
@pytest.mark.parametrize("sq", [1, 6])
def test_quantized_paged(dt, kinds, sq):
    # pools quantized as a cache holds them: unused slots are NaN, and so are their per-token
    # scales, which fai refuses to read
    rng = np.random.default_rng(72 + sq)
    B, Skv, Hq, Hkv, D, ps = 3, 45, 4, 2, 16, 8
    q, q64 = cast(rng.standard_normal((B, sq, Hq, D)), "float32")
    lk = [45, 0, 19]
    kx, vx = rng.standard_normal((B, Skv, Hkv, D)), rng.standard_normal((B, Skv, Hkv, D))
    kpool, vpool, bt = _paginate(rng, kx, vx, lk, ps)
    kp, ks, kp64 = quantize(rng, kpool, dt, kinds[0])
    vp, vs, vp64 = quantize(rng, vpool, dt, kinds[1])
    assert ks.shape == ((kpool.shape[0], ps, Hkv) if kinds[0] == "token" else (Hkv,))
    k64, v64 = _unpage(kp64, bt, lk, Skv), _unpage(vp64, bt, lk, Skv)
    check((q, kp, vp), (q64, k64, v64), ("float32", dt, dt), block_table=bt, seqlens_kv=lk,
          causal=True, k_scale=ks, v_scale=vs,
          ref_kw=dict(seqlens_kv=lk, causal="bottom_right"))


@pytest.mark.parametrize("kind", ["token", "head"])
def test_quantized_packed(kind):
    rng = np.random.default_rng(73)
    B, Sq, Skv, Hq, Hkv, D = 3, 4, 15, 4, 2, 16
    q, q64 = cast(rng.standard_normal((B, Sq, Hq, D)), "float32")
    lk = [15, 0, 9]
    kx, vx = rng.standard_normal((B, Skv, Hkv, D)), rng.standard_normal((B, Skv, Hkv, D))
    k, ks, k64p = quantize(rng, _pack(kx, lk), "int8", kind)  # [rows, Hkv, D]
    v, vs, v64p = quantize(rng, _pack(vx, lk), "int8", "token")
    cu = np.concatenate([[0], np.cumsum(lk)]).astype(np.int32)
    k64, v64 = np.zeros(kx.shape), np.zeros(vx.shape)
    for b in range(B):
        k64[b, :lk[b]], v64[b, :lk[b]] = k64p[cu[b]:cu[b + 1]], v64p[cu[b]:cu[b + 1]]
    check((q, k, v), (q64, k64, v64), ("float32", "int8", "int8"), cu_seqlens_kv=cu,
          k_scale=ks, v_scale=vs, ref_kw=dict(seqlens_kv=lk))


def test_quantized_scale_layouts():
    # one scale for the tensor as a number, [] or [1]; per head broadcast by numpy (stride 0);
    # per token as a strided view of a larger array; [B, 1, Hkv] per sequence and head
    rng = np.random.default_rng(74)
    (q, k, v), (ks, vs), refs = quantized_qkv(rng, 2, 3, 11, 4, 2, 16, ("int8", "int8"),
                                              ("tensor", "token"))
    dts = ("float32", "int8", "int8")
    wide = np.full(vs.shape[:2] + (4,), np.nan, np.float32)
    wide[..., ::2] = vs
    for k_scale in (float(ks), ks, ks.reshape(1), np.broadcast_to(ks, (2, 11, 2))):
        check((q, k, v), refs, dts, k_scale=k_scale, v_scale=wide[..., ::2])
    per_seq = np.array([[[0.02, 0.03]], [[0.05, 0.01]]], np.float32)  # [B, 1, Hkv]
    o = fai.attention(q, k, v, k_scale=per_seq, v_scale=vs)
    ref = attention_ref(refs[0], k.astype(np.float64) * per_seq[..., None], refs[2])
    assert_close(o, ref, 2e-3)
    # a plan made for quantized K/V, run on other codes and scales of the same shapes
    plan = fai.Plan.like(q, k, v, k_scale=ks, v_scale=vs)
    plan_dtypes = fai.Plan(2, 4, 2, 3, 11, 16, k_dtype="i8", v_dtype="int8")
    for p in (plan, plan_dtypes):
        assert_close(p.run(q, k, v, k_scale=ks, v_scale=vs), fai.attention(
            q, k, v, k_scale=ks, v_scale=vs), 0.0)


@pytest.mark.parametrize("dt", QUANT_DTYPES)
@pytest.mark.parametrize("sq,shared", [(1, False), (40, False), (6, True)])
def test_quantized_channel_scales(dt, sq, shared):
    # keys with a scale per channel as well (KIVI's layout): the reference reads
    # code x token scale x channel scale in float64; decode, prefill and one set for every head
    rng = np.random.default_rng(75 + sq)
    B, Skv, Hq, Hkv, D = 2, 37, 8, 2, 32
    arrays, (ks, vs), (q64, k64, v64) = quantized_qkv(rng, B, sq, Skv, Hq, Hkv, D, (dt, dt),
                                                      ("token", "head"))
    channels = rng.uniform(0.25, 4.0, (D,) if shared else (Hkv, D)).astype(np.float32)
    check(arrays, (q64, k64 * channels.astype(np.float64), v64), ("float32", dt, dt), causal=True,
          k_scale=ks, v_scale=vs, k_channel_scale=channels, ref_kw=dict(causal="bottom_right"))
    plan = fai.Plan.like(*arrays, k_scale=ks, v_scale=vs, k_channel_scale=channels)
    with pytest.raises(fai.FaiError, match="k_channel_scale is required"):
        plan.run(*arrays, k_scale=ks, v_scale=vs)
    with pytest.raises(fai.FaiError, match="k_channel_scale given, but the plan was made without"):
        fai.Plan.like(*arrays).run(*arrays, k_scale=ks, v_scale=vs, k_channel_scale=channels)


def test_quantized_channel_scale_errors():
    q = np.zeros((1, 2, 4, 8), np.float32)
    k = np.ones((1, 5, 2, 8), np.int8)
    good = np.ones((2, 8), np.float32)
    with pytest.raises(fai.FaiError, match=r"k_channel_scale has shape \[2, 7\]; expected "
                       r"\[2, 8\] \(kv heads, channels\) or \[8\]"):
        fai.attention(q, k, k, k_scale=0.5, v_scale=0.5, k_channel_scale=np.ones((2, 7)))
    bad = good.copy()
    bad[1, 3] = 0.0
    with pytest.raises(fai.FaiError, match="k_channel_scale of kv head 1, channel 3 = 0: a scale "
                       "must be finite and > 0"):
        fai.attention(q, k, k, k_scale=0.5, v_scale=0.5, k_channel_scale=bad)
    with pytest.raises(fai.FaiError, match="k_channel_scales = 1 with k_dtype = f16"):
        fai.attention(q, k.astype(np.float16), k, v_scale=0.5, k_channel_scale=good)


@pytest.mark.parametrize("kwargs,match", [
    ({}, "k has dtype int8: k_scale is required"),
    ({"k_scale": 0.1}, "v has dtype int8: v_scale is required"),
    ({"k_scale": np.ones((2, 3), np.float32), "v_scale": 0.1},
     r"k_scale has shape \[2, 3\]; expected a shape that broadcasts to k's per token "
     r"\[B, Skv, Hkv\] = \[1, 5, 2\], per kv head \[2\]"),
    ({"k_scale": np.ones((1, 5, 2, 1), np.float32), "v_scale": 0.1}, "k_scale has shape"),
    ({"k_scale": np.ones(2, np.int32), "v_scale": 0.1}, "k_scale has dtype int32"),
    ({"k_scale": True, "v_scale": 0.1}, "k_scale = True"),
    ({"k_scale": 0.1, "v_scale": "big"}, "v_scale has dtype"),
    ({"k_scale": np.array([0.5, -1.0], np.float32), "v_scale": 0.1},
     "k_scale of sequence 0, key 0, kv head 1 = -1: a scale must be finite and > 0"),
    ({"k_scale": 0.1, "v_scale": np.nan}, "v_scale .* = nan"),
])
def test_quantized_errors(kwargs, match):
    q = np.zeros((1, 2, 4, 8), np.float32)
    k = np.ones((1, 5, 2, 8), np.int8)
    with pytest.raises(fai.FaiError, match=match):
        fai.attention(q, k, k, **kwargs)


def test_quantized_dtype_errors():
    q = np.zeros((1, 2, 4, 8), np.float32)
    k = np.ones((1, 5, 2, 8), np.float16)
    with pytest.raises(fai.FaiError, match="k_scale given, but k has dtype float16: scales "
                       "belong to an int8, float8_e4m3fn or float8_e5m2 k"):
        fai.attention(q, k, k, k_scale=0.5)
    with pytest.raises(fai.FaiError, match="v_scale given, but v has dtype float16"):
        fai.attention(q, k.astype(np.int8), k, k_scale=0.5, v_scale=0.5)
    with pytest.raises(fai.FaiError, match="q has dtype int8; expected float32, float16 or "
                       "bfloat16"):
        fai.attention(q.astype(np.int8), k, k)
    with pytest.raises(fai.FaiError, match="k has dtype uint8; expected float32, float16, "
                       "bfloat16, int8, float8_e4m3fn or float8_e5m2"):
        fai.attention(q, k.astype(np.uint8), k)
    with pytest.raises(fai.FaiError, match="q dtype int8 is not float32, float16 or bfloat16"):
        fai.Plan(1, 4, 2, 2, 5, 8, q_dtype="int8")
    with pytest.raises(fai.FaiError, match="out dtype float8_e4m3fn is not"):
        fai.Plan(1, 4, 2, 2, 5, 8, out_dtype="e4m3")
    with pytest.raises(fai.FaiError, match="k dtype uint8 is not float32, float16, bfloat16, "
                       "int8, float8_e4m3fn or float8_e5m2"):
        fai.Plan(1, 4, 2, 2, 5, 8, k_dtype="uint8")
    plan = fai.Plan(1, 4, 2, 2, 5, 8, k_dtype="int8", v_dtype="float16")
    with pytest.raises(fai.FaiError, match="k has dtype float16; the plan's is int8"):
        plan.run(q, k, k, k_scale=0.5)

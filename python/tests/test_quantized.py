"""Quantized K and V (int8, fp8 e4m3 and e5m2) with their scales, dense, paged and packed,
against the reference on the dequantized values, and their errors."""
import numpy as np
import pytest

import fai
from cases import check, needs_bf16, needs_fp8, pack, paginate, QUANT_DTYPES
from reference import FP8, assert_close, attention_ref, cast, quantize, tolerance

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
    kpool, vpool, bt = paginate(rng, kx, vx, lk, ps)
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
    k, ks, k64p = quantize(rng, pack(kx, lk), "int8", kind)  # [rows, Hkv, D]
    v, vs, v64p = quantize(rng, pack(vx, lk), "int8", "token")
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
    assert_close(o, ref, tolerance(*dts))
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


def test_numpy_scalars_are_scales_like_python_ones():
    rng = np.random.default_rng(76)
    (q, k, v), _, _ = quantized_qkv(rng, 1, 2, 5, 4, 2, 8, ("int8", "int8"), ("head", "head"))
    want = fai.attention(q, k, v, k_scale=1, v_scale=0.25)
    for k_scale, v_scale in ((np.int64(1), np.float64(0.25)), (np.float32(1), np.float16(0.25))):
        assert np.array_equal(fai.attention(q, k, v, k_scale=k_scale, v_scale=v_scale), want)


@pytest.mark.parametrize("k_scale,match", [
    (1e39, r"k_scale = 1e\+39 is outside float32's range"),
    (1e-46, r"k_scale = 1e-46 is nonzero but rounds to 0 in float32"),
    (np.array([0.5, 1e-46]), r"k_scale\[1\] = 1e-46 is nonzero but rounds to 0"),
    (np.array([0.5, -1e39]), r"k_scale\[1\] = -1e\+39 is outside float32's range"),
    (1 + 1j, "k_scale has dtype complex128"),
])
def test_scales_that_float32_cannot_hold_are_refused_by_their_value(k_scale, match):
    q = np.zeros((1, 2, 4, 8), np.float32)
    k = np.ones((1, 5, 2, 8), np.int8)
    with pytest.raises(fai.FaiError, match=match):
        fai.attention(q, k, k, k_scale=k_scale, v_scale=0.5)

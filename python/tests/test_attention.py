"""fai.attention against the float64 reference (reference.py): dtypes, GQA/MQA, scale,
causal in both alignments, windows, every mask kind and shape, lengths, packed and paged
batches, and strided or array-like inputs read in place."""
import zlib

import numpy as np
import pytest

import fai
from fai import _core
from cases import check, DTYPES, needs_bf16, pack, pack_ref, paginate, qkv
from reference import assert_close, attention_ref, tolerance, values

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


@pytest.mark.parametrize("dt", ["float16", pytest.param("bfloat16", marks=needs_bf16)])
def test_round_p_bf16(dt):
    # where the plan rounds P to bf16 (p_parts 1) O may differ by 2^-8 sum p|v| more than the
    # tolerance (fai.h; the Ref's o_scale is max(1, sum p|v|)); where P stays within 2^-16
    # (p_parts 2) or PV runs in f32 (p_parts 0) the tolerance alone holds
    rng = np.random.default_rng(41)
    dts = (dt, dt, dt)
    arrays, refs = qkv(rng, 1, 70, 90, 4, 2, 64, dts=dts)
    p_parts = fai.Plan.like(*arrays, causal=True, round_p_bf16=True).info["p_parts"]
    o = fai.attention(*arrays, causal=True, round_p_bf16=True)  # out in q's dtype
    ref = attention_ref(*refs, causal="bottom_right")
    assert_close(o, ref, tolerance(*dts) + (2.0 ** -8 if p_parts == 1 else 0.0), dt)
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
    ref = attention_ref(q64, k64, v64, seqlens_kv=[10])
    assert_close(o, ref, tolerance(q.dtype.name, k.dtype.name, v.dtype.name))

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


@pytest.mark.parametrize("packed_kv", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_packed(packed_kv, causal):
    rng = np.random.default_rng(10)
    B, Sq, Skv, Hq, Hkv, D = 3, 7, 15, 4, 2, 16
    (q, k, v), (q64, k64, v64) = qkv(rng, B, Sq, Skv, Hq, Hkv, D)
    lq = [7, 0, 3]
    lk = [15, 4, 9]
    cu_q = np.concatenate([[0], np.cumsum(lq)]).astype(np.int32)
    qp = np.concatenate([pack(q, lq), np.full((2, Hq, D), 37, q.dtype)])  # 2 padding rows
    kw = {"cu_seqlens_q": cu_q, "causal": causal}
    if packed_kv:
        kw["cu_seqlens_kv"] = np.concatenate([[0], np.cumsum(lk)]).astype(np.int32)
        kp, vp = pack(k, lk), pack(v, lk)
    else:
        kw["seqlens_kv"] = lk
        kp, vp = k, v
    o, lse = fai.attention(qp, kp, vp, return_lse=True, **kw)
    assert o.shape == (qp.shape[0], Hq, D) and lse.shape == (Hq, qp.shape[0])
    ref = pack_ref(attention_ref(q64, k64, v64, seqlens_q=lq, seqlens_kv=lk,
                                 causal="bottom_right" if causal else None), lq)
    tol = tolerance(q.dtype.name, k.dtype.name, v.dtype.name)
    assert_close(o[:10], ref, tol)
    assert_close(lse[:, :10], ref, tol, what="LSE")
    assert np.all(o[10:] == 0) and np.all(np.isneginf(lse[:, 10:]))


def test_packed_mask_is_indexed_inside_each_sequence():
    rng = np.random.default_rng(11)
    B, Sq, Skv, H, D = 2, 5, 8, 2, 8
    (q, k, v), (q64, k64, v64) = qkv(rng, B, Sq, Skv, H, H, D)
    lq, lk = [5, 3], [8, 6]
    keep = rng.random((B, H, Sq, Skv)) < 0.6
    cu_q = np.array([0, 5, 8], np.int32)
    cu_k = np.array([0, 8, 14], np.int32)
    o = fai.attention(pack(q, lq), pack(k, lk), pack(v, lk), cu_seqlens_q=cu_q,
                      cu_seqlens_kv=cu_k, mask=keep)
    ref = attention_ref(q64, k64, v64, seqlens_q=lq, seqlens_kv=lk, keep=keep)
    assert_close(o, pack_ref(ref, lq), tolerance(q.dtype.name, k.dtype.name, v.dtype.name))


@pytest.mark.parametrize("page_size", [16, 5, 1])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("head_major", [False, True])
def test_paged(page_size, causal, head_major):
    rng = np.random.default_rng(page_size)
    B, Sq, Skv, Hq, Hkv, D = 3, 4, 40, 8, 2, 32
    (q, k, v), (q64, k64, v64) = qkv(rng, B, Sq, Skv, Hq, Hkv, D)
    lk = [40, 17, 0]
    kp, vp, bt = paginate(rng, k, v, lk, page_size, head_major=head_major)
    o, lse = fai.attention(q, kp, vp, block_table=bt, seqlens_kv=lk, causal=causal,
                           return_lse=True)
    ref = attention_ref(q64, k64, v64, seqlens_kv=lk, causal="bottom_right" if causal else None)
    tol = tolerance(q.dtype.name, k.dtype.name, v.dtype.name)
    assert_close(o, ref, tol)
    assert_close(lse, ref, tol, what="LSE")


def test_paged_with_packed_queries_and_mask():
    rng = np.random.default_rng(12)
    B, Sq, Skv, H, D = 2, 6, 24, 2, 16
    (q, k, v), (q64, k64, v64) = qkv(rng, B, Sq, Skv, H, H, D)
    lq, lk = [6, 2], [24, 9]
    kp, vp, bt = paginate(rng, k, v, lk, 8)
    keep = rng.random((Sq, 30)) < 0.8  # wider than the longest sequence: fine when paged
    o = fai.attention(pack(q, lq), kp, vp, cu_seqlens_q=np.array([0, 6, 8], np.int32),
                      block_table=bt, seqlens_kv=lk, mask=keep, causal=True)
    ref = attention_ref(q64, k64, v64, seqlens_q=lq, seqlens_kv=lk, keep=keep[:, :Skv],
                        causal="bottom_right")
    assert_close(o, pack_ref(ref, lq), tolerance(q.dtype.name, k.dtype.name, v.dtype.name))

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
    ref = attention_ref(values(q), values(k), values(v))
    assert_close(o, ref, tolerance("float32", "float16", "float16"))


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
    ref = attention_ref(values(q), values(k), values(k))
    assert_close(o, ref, tolerance("float32", "float16", "float16"))


def test_out_parameter():
    rng = np.random.default_rng(16)
    (q, k, v), refs = qkv(rng, 1, 4, 7, 2, 2, 8)
    out = np.full((1, 4, 2, 8), 5.0, np.float16)
    res = fai.attention(q, k, v, out=out)
    assert res is out
    ref, tol = attention_ref(*refs), tolerance(q.dtype.name, k.dtype.name, v.dtype.name)
    assert_close(out, ref, tol, "float16")
    big = np.zeros((1, 4, 2, 16), np.float32)
    fai.attention(q, k, v, out=big[..., 4:12])  # a strided output
    assert_close(big[..., 4:12], ref, tol)
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
    ref = attention_ref(*refs)
    assert_close(fai.attention(_ArrayLike(q), _DLPackOnly(k), v.tolist(), out_dtype="f32"), ref,
                 tolerance(q.dtype.name, k.dtype.name, v.dtype.name))

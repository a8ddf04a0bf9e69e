"""fai against torch.nn.functional.scaled_dot_product_attention (computed in float64), and torch
CPU tensors as inputs: float32/float16/bfloat16, strided views read in place, torch outputs."""
import numpy as np
import pytest

import fai
from fai import _core
from reference import assert_close, attention_ref, tolerance

torch = pytest.importorskip(
    "torch", reason="torch is not installed: the comparison with "
    "torch.nn.functional.scaled_dot_product_attention and the torch-tensor tests are skipped")
F = torch.nn.functional


def sdpa64(q, k, v, **kw):
    """SDPA in float64 on BSHD tensors (GQA by repeating the kv heads); BSHD out."""
    group = q.shape[2] // k.shape[2]
    qt = q.transpose(1, 2).double()
    kt = k.repeat_interleave(group, dim=2).transpose(1, 2).double()
    vt = v.repeat_interleave(group, dim=2).transpose(1, 2).double()
    if "attn_mask" in kw and kw["attn_mask"].dtype != torch.bool:
        kw["attn_mask"] = kw["attn_mask"].double()
    return F.scaled_dot_product_attention(qt, kt, vt, **kw).transpose(1, 2)


def make(B, Sq, Skv, Hq, Hkv, D, q_dtype=torch.float32, kv_dtype=torch.float16, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, Sq, Hq, D, generator=g).to(q_dtype)
    k = torch.randn(B, Skv, Hkv, D, generator=g).to(kv_dtype)
    v = torch.randn(B, Skv, Hkv, D, generator=g).to(kv_dtype)
    return q, k, v


# the dtype term of make's default dtypes: f32 Q, f16 K and V
MAKE_TOL = tolerance("float32", "float16", "float16")


def close(o, ref, tol=MAKE_TOL):
    assert isinstance(o, torch.Tensor)
    assert_close(o.float().numpy(), ref.numpy(), tol)


@pytest.mark.parametrize("hq,hkv", [(8, 8), (8, 2), (4, 1)])
def test_plain(hq, hkv):
    q, k, v = make(2, 9, 37, hq, hkv, 32)
    close(fai.attention(q, k, v), sdpa64(q, k, v))


@pytest.mark.parametrize("sq,skv", [(7, 7), (5, 23), (23, 5)])
def test_is_causal_is_top_left(sq, skv):
    q, k, v = make(1, sq, skv, 4, 2, 16, seed=sq)
    close(fai.attention(q, k, v, causal_top_left=True), sdpa64(q, k, v, is_causal=True))
    if sq == skv:  # the two alignments agree on square problems
        close(fai.attention(q, k, v, causal=True), sdpa64(q, k, v, is_causal=True))


@pytest.mark.parametrize("sq,skv", [(5, 23), (16, 64), (1, 9)])
def test_bottom_right_causal_as_an_explicit_mask(sq, skv):
    q, k, v = make(2, sq, skv, 4, 2, 16, seed=sq + skv)
    mask = torch.ones(sq, skv, dtype=torch.bool).tril(diagonal=skv - sq)
    close(fai.attention(q, k, v, causal=True), sdpa64(q, k, v, attn_mask=mask))


@pytest.mark.parametrize("shape", [(6, 13), (2, 1, 6, 13), (2, 4, 6, 13), (2, 1, 1, 13)])
def test_masks(shape):
    q, k, v = make(2, 6, 13, 4, 2, 16, seed=len(shape))
    g = torch.Generator().manual_seed(7)
    keep = torch.rand(shape, generator=g) < 0.7
    keep[..., 0] = True  # no fully masked rows (torch's value for those differs by version)
    close(fai.attention(q, k, v, mask=keep), sdpa64(q, k, v, attn_mask=keep))
    add = torch.randn(shape, generator=g)
    close(fai.attention(q, k, v, mask_add=add), sdpa64(q, k, v, attn_mask=add))


def test_scale():
    q, k, v = make(1, 5, 11, 2, 2, 16)
    close(fai.attention(q, k, v, scale=0.3), sdpa64(q, k, v, scale=0.3))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_tensors_are_read_in_place(dtype):
    g = torch.Generator().manual_seed(3)
    q_bhsd = torch.randn(2, 8, 10, 32, generator=g).to(dtype)
    cache = torch.randn(2, 2, 64, 32, generator=g).to(dtype)  # [B, Hkv, capacity, D]
    q = q_bhsd.transpose(1, 2)  # BSHD views of BHSD storage
    k = cache[:, :, :20].transpose(1, 2)
    v = cache[:, :, 30:50].transpose(1, 2)
    assert not q.is_contiguous() and not k.is_contiguous()
    for t in (q, k, v):
        assert _core._view(t, "x", _core._want_float("x")).ptr == t.data_ptr(), "copied"
    o, lse = fai.attention(q, k, v, return_lse=True)
    assert o.dtype == dtype and o.shape == (2, 10, 8, 32)
    assert lse.dtype == torch.float32 and lse.shape == (2, 8, 10)
    # O (out in q's dtype) and LSE against the float64 reference on the same values
    name = str(dtype).split(".")[-1]
    ref = attention_ref(*(t.double().numpy() for t in (q, k, v)))
    tol = tolerance(name, name, name)
    assert_close(o.float().numpy(), ref, tol, name)
    assert_close(lse.numpy(), ref, tol, what="LSE")


def test_enable_gqa_matches():
    q, k, v = make(1, 6, 20, 8, 2, 16, kv_dtype=torch.float32)
    try:
        ref = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                             v.transpose(1, 2), enable_gqa=True).transpose(1, 2)
    except TypeError:
        pytest.skip("this torch has no enable_gqa")
    close(fai.attention(q, k, v), ref.double(), 1e-5)


def test_paged_decode_with_torch_tensors():
    B, Hq, Hkv, D, ps = 2, 8, 2, 32, 16
    q, k, v = make(B, 1, 48, Hq, Hkv, D)
    lengths = torch.tensor([48, 21], dtype=torch.int32)
    num_pages = 8
    perm = torch.randperm(num_pages, generator=torch.Generator().manual_seed(1))
    table = perm[:6].reshape(B, 3).to(torch.int32)
    kp = torch.full((num_pages, ps, Hkv, D), float("nan"), dtype=k.dtype)
    vp = torch.full((num_pages, ps, Hkv, D), float("nan"), dtype=v.dtype)
    for b in range(B):
        for p in range(3):
            rows = slice(p * ps, min((p + 1) * ps, int(lengths[b])))
            n = rows.stop - rows.start
            if n > 0:
                kp[table[b, p], :n] = k[b, rows]
                vp[table[b, p], :n] = v[b, rows]
    o = fai.attention(q, kp, vp, block_table=table, seqlens_kv=lengths)
    for b in range(B):
        n = int(lengths[b])
        close(o[b:b + 1], sdpa64(q[b:b + 1], k[b:b + 1, :n], v[b:b + 1, :n]))


def test_merge_states_with_torch_tensors():
    q, k, v = make(1, 4, 30, 4, 2, 16)
    o1, l1 = fai.attention(q, k[:, :12], v[:, :12], return_lse=True)
    o2, l2 = fai.attention(q, k[:, 12:], v[:, 12:], return_lse=True)
    o, lse = fai.merge_states([o1, o2], [l1, l2])
    assert isinstance(o, torch.Tensor) and isinstance(lse, torch.Tensor)
    close(o, sdpa64(q, k, v))


class _DLPackOnly:
    def __init__(self, t):
        self._t = t

    def __dlpack__(self, **kw):
        return self._t.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._t.__dlpack_device__()


def test_dlpack_objects():
    q, k, v = make(1, 3, 9, 2, 2, 16, kv_dtype=torch.float32)
    o = fai.attention(_DLPackOnly(q), _DLPackOnly(k), _DLPackOnly(v))
    assert isinstance(o, np.ndarray)  # not a torch tensor: numpy out
    assert_close(o, sdpa64(q, k, v).numpy(), 1e-5)


def test_non_cpu_tensors_are_refused():
    q = torch.empty(1, 2, 2, 8, device="meta")
    with pytest.raises(fai.FaiError, match="device meta"):
        fai.attention(q, q, q)


@pytest.mark.parametrize("dtype", ["int8", "float8_e4m3fn", "float8_e5m2"])
def test_quantized_kv_tensors(dtype):
    # K/V codes as torch tensors (read in place, a BHSD cache viewed as BSHD), scales as torch
    # float32 tensors per token (a strided view) and per kv head; against SDPA on code x scale
    if not hasattr(torch, dtype):
        pytest.skip(f"this torch has no {dtype}")
    tdt = getattr(torch, dtype)
    qmax = {"int8": 127.0, "float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}[dtype]
    g = torch.Generator().manual_seed(5)
    B, Sq, Skv, Hq, Hkv, D = 2, 3, 24, 8, 2, 32
    q = torch.randn(B, Sq, Hq, D, generator=g)
    kx = torch.randn(B, Hkv, Skv, D, generator=g)  # BHSD storage
    vx = torch.randn(B, Skv, Hkv, D, generator=g)
    ks_wide = torch.zeros(B, Hkv, Skv, 2)
    ks_wide[..., 0] = kx.abs().amax(-1) / qmax * 1.1
    ks = ks_wide[..., 0].transpose(1, 2)  # [B, Skv, Hkv], strided
    vs = vx.abs().amax(dim=(0, 1, 3)) / qmax * 1.1  # [Hkv]
    if dtype == "int8":
        kc = (kx / ks_wide[..., :1]).round().clamp(-127, 127).to(tdt)
        vc = (vx / vs[:, None]).round().clamp(-127, 127).to(tdt)
    else:
        kc, vc = (kx / ks_wide[..., :1]).to(tdt), (vx / vs[:, None]).to(tdt)
    k = kc.transpose(1, 2)
    assert _core._view(k, "k", _core._want_kv("k")).ptr == kc.data_ptr(), "copied"
    o = fai.attention(q, k, vc, k_scale=ks, v_scale=vs, causal=True)
    k64 = k.double() * ks.double()[..., None]
    v64 = vc.double() * vs.double()[:, None]
    mask = torch.ones(Sq, Skv, dtype=torch.bool).tril(diagonal=Skv - Sq)
    close(o, sdpa64(q, k64, v64, attn_mask=mask), tolerance("float32", dtype, dtype))
    with pytest.raises(fai.FaiError, match="k has dtype .*: k_scale is required"):
        fai.attention(q, k, vc, v_scale=vs)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int8", "float8_e4m3fn"])
def test_empty_cache_as_torch_tensor(dtype):
    """fai.empty_cache(torch=True): a torch tensor of the same-named dtype over the cache's
    memory (2 MiB aligned, zeroed), which fai reads in place."""
    if not isinstance(getattr(torch, dtype, None), torch.dtype):
        pytest.skip(f"this torch has no {dtype}")
    shape = (4, 16, 2, 64)
    cache = fai.empty_cache(shape, dtype, torch=True)
    assert isinstance(cache, torch.Tensor) and cache.dtype == getattr(torch, dtype)
    assert tuple(cache.shape) == shape and cache.is_contiguous()
    assert cache.data_ptr() % (2 << 20) == 0
    assert not cache.view(torch.uint8).any()


def test_empty_cache_torch_int8_keys_attend():
    """An int8 K cache from fai.empty_cache(torch=True), filled with codes, attended through
    torch tensors against float64 on the dequantized values."""
    rng = np.random.default_rng(5)
    b, s, hq, hkv, d = 1, 40, 4, 2, 32
    k_cache = fai.empty_cache((b, s, hkv, d), "int8", torch=True)
    codes = rng.integers(-127, 128, size=(b, s, hkv, d), dtype=np.int8)
    k_cache.copy_(torch.from_numpy(codes))
    k_scale = np.full((hkv,), 1.0 / 127, dtype=np.float32)
    q = rng.standard_normal((b, 1, hq, d), dtype=np.float32)
    v = rng.standard_normal((b, s, hkv, d), dtype=np.float32)
    o = fai.attention(torch.from_numpy(q), k_cache, torch.from_numpy(v), k_scale=k_scale)
    k = codes.astype(np.float64) * k_scale[None, None, :, None]
    logits = np.einsum("bqhd,bshd->bhqs", q.astype(np.float64),
                       np.repeat(k, hq // hkv, axis=2)) / np.sqrt(d)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    want = np.einsum("bhqs,bshd->bqhd", p, np.repeat(v.astype(np.float64), hq // hkv, axis=2))
    np.testing.assert_allclose(o.numpy(), want, rtol=1e-4, atol=1e-5)


def _negative_view(*shape):
    """A float32 tensor that is torch's lazy negation of its storage (is_neg()): the imaginary
    part of a conjugate."""
    return torch.zeros(*shape, dtype=torch.complex64).conj().imag


def test_negative_and_conjugate_views_are_refused_as_destinations():
    # fai would write a resolved copy and drop it: the caller's tensor would never be written
    q, k, v = make(1, 4, 5, 2, 1, 16, kv_dtype=torch.float32)
    out = _negative_view(1, 4, 2, 16)
    assert out.is_neg()
    with pytest.raises(fai.FaiError, match="out is a negative view"):
        fai.attention(q, k, v, out=out)
    with pytest.raises(fai.FaiError, match="out is a conjugate view"):
        fai.attention(q, k, v, out=torch.zeros(1, 4, 2, 16, dtype=torch.complex64).conj())
    src, slots = torch.ones(2, 1, 16), torch.tensor([0, 1])
    with pytest.raises(fai.FaiError, match="cache is a negative view"):
        fai.cache_write(src, _negative_view(1, 4, 1, 16), slots)
    cache = torch.zeros(1, 4, 1, 16, dtype=torch.int8)
    with pytest.raises(fai.FaiError, match="scale is a negative view"):
        fai.cache_write(src, cache, slots, scale=_negative_view(1, 4, 1))
    assert not cache.any()


def test_negative_views_are_read_as_their_values():
    q, k, v = make(1, 4, 5, 2, 1, 16, kv_dtype=torch.float32)
    q_view = torch.complex(torch.zeros_like(q), -q).conj().imag  # reads as q
    assert q_view.is_neg()
    assert torch.equal(fai.attention(q_view, k, v), fai.attention(q, k, v))


def test_wide_integer_tensors_outside_int32_are_refused():
    q, pool = torch.ones(1, 1, 1, 16), torch.ones(4, 2, 1, 16)
    # 2**32 + 2 would wrap to page 2
    with pytest.raises(fai.FaiError, match=r"block_table holds values outside int32 "
                       r"\(4294967298 \.\. 4294967298\)"):
        fai.attention(q, pool, pool, block_table=torch.tensor([[2**32 + 2]]), seqlens_kv=[1])
    with pytest.raises(fai.FaiError, match="seqlens_kv holds values outside int32"):
        fai.attention(q, pool, pool, block_table=torch.tensor([[2]]),
                      seqlens_kv=torch.tensor([2**32 + 1]))
    o = fai.attention(q, pool, pool, block_table=torch.tensor([[2]]), seqlens_kv=torch.tensor([1]))
    assert torch.equal(o, fai.attention(q, pool[2:3, :1], pool[2:3, :1]))


def test_float64_tensors_beyond_float32_are_refused():
    q, k, v = make(1, 2, 3, 2, 1, 8, q_dtype=torch.float64, kv_dtype=torch.float64)
    q[0, 1, 1, 5] = -1e39
    with pytest.raises(fai.FaiError, match=r"q\[0, 1, 1, 5\] = -1e\+39 is outside float32's"):
        fai.attention(q, k, v)


def test_out_sharing_memory_with_an_input_is_refused():
    q, k, v = make(1, 4, 4, 2, 2, 16, kv_dtype=torch.float32)
    shifted = torch.zeros(129)  # k, and an out one element further on
    shifted[:128] = k.reshape(-1)
    k_view, out_view = shifted[:128].view(1, 4, 2, 16), shifted[1:].view(1, 4, 2, 16)
    for name, out, k_given in (("q", q, k), ("k", k, k), ("v", v[:, :, :, :], k),
                               ("k", out_view, k_view)):
        before = out.clone()
        with pytest.raises(fai.FaiError, match=f"out .* shares memory with {name} .*: fai "
                           f"reads {name} while it writes out"):
            fai.attention(q, k_given, v, out=out)
        assert torch.equal(out, before)
    buffer = torch.zeros(2, 4, 2, 16)  # k and out side by side in one tensor
    buffer[0] = k[0]
    out = fai.attention(q, buffer[:1], v, out=buffer[1:])
    assert torch.equal(out, fai.attention(q, k, v))
    assert out.data_ptr() == buffer[1:].data_ptr()


def test_outputs_autograd_tracks_are_refused():
    q, k, v = make(1, 4, 5, 2, 1, 16, kv_dtype=torch.float32)
    out = torch.zeros(1, 4, 2, 16, requires_grad=True)
    with pytest.raises(fai.FaiError, match="out requires grad: fai writes in place, behind "
                       "autograd"):
        fai.attention(q, k, v, out=out)
    base = torch.zeros(2, 4, 2, 16)
    view = base[1:]
    base.requires_grad_()  # its views, made before or after, require grad with it
    with pytest.raises(fai.FaiError, match="out requires grad"):
        fai.attention(q, k, v, out=view)
    cache = torch.zeros(1, 4, 1, 16, requires_grad=True)
    with pytest.raises(fai.FaiError, match="cache requires grad"):
        fai.cache_write(torch.ones(2, 1, 16), cache, torch.tensor([0, 1]))
    assert not out.detach().any() and not base.detach().any() and not cache.detach().any()
    # inputs that require grad are read as their values
    qg = q.clone().requires_grad_()
    assert torch.equal(fai.attention(qg, k, v), fai.attention(q, k, v))


class _Subclass(torch.Tensor):
    """A torch.Tensor subclass defined outside torch."""


def test_tensor_subclasses_are_torch_tensors():
    q, k, v = make(1, 4, 5, 2, 1, 16, kv_dtype=torch.float32)
    sq, sk, sv = (t.as_subclass(_Subclass) for t in (q, k, v))
    o = fai.attention(sq, sk, sv)
    assert isinstance(o, torch.Tensor)  # torch in, torch out
    out = torch.zeros(1, 4, 2, 16).as_subclass(_Subclass)
    assert fai.attention(sq, sk, sv, out=out) is out
    assert torch.equal(torch.Tensor(out), fai.attention(q, k, v))


def test_sparse_tensors_are_refused_by_name_and_layout():
    q, k, v = make(1, 4, 5, 2, 1, 16, kv_dtype=torch.float32)
    with pytest.raises(fai.FaiError, match=r"q has layout sparse_coo; fai reads strided \(dense\) "
                       r"tensors: pass q.to_dense\(\)"):
        fai.attention(q.to_sparse(), k, v)
    with pytest.raises(fai.FaiError, match="out has layout sparse_coo"):
        fai.attention(q, k, v, out=torch.zeros(1, 4, 2, 16).to_sparse())
    with pytest.raises(fai.FaiError, match="seqlens_kv has layout sparse_coo"):
        fai.attention(q, k, v, seqlens_kv=torch.tensor([3]).to_sparse())
    with pytest.raises(fai.FaiError, match="alibi_slopes has layout sparse_coo"):
        fai.attention(q, k, v, alibi_slopes=torch.tensor([0.5, 0.25]).to_sparse())


def test_cache_write_into_an_empty_tensor_is_like_numpy():
    # torch gives an empty tensor no memory (data_ptr() 0); numpy an address nothing is read at
    src, slots = torch.zeros(0, 2, 8), torch.zeros(0, dtype=torch.int64)
    for cache in (torch.zeros(0, 4, 2, 8), torch.zeros(0, 2, 8)):
        assert fai.cache_write(src.numpy(), cache.numpy(), slots.numpy()) is None
        assert fai.cache_write(src, cache, slots) is None

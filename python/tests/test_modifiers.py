"""Score modifiers (soft-capping, ALiBi, sinks, bit masks) against the reference, and their
errors."""
import numpy as np
import pytest

import fai
from cases import check, qkv

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


@pytest.mark.parametrize("kwargs,match", [
    ({"softcap": 1e-46}, r"softcap = 1e-46 is nonzero but rounds to 0"),
    ({"softcap": 1e39}, r"softcap = 1e\+39 is outside float32's range"),
    ({"softcap": 10**400}, "softcap = 1000"),
    ({"softcap": 1 + 0j}, "softcap = "),
    ({"alibi_slopes": [0.5, 1e39]}, r"alibi_slopes\[1\] = 1e\+39 is outside float32's range"),
    ({"alibi_slopes": [1e-46, 0.5]}, r"alibi_slopes\[0\] = 1e-46 is nonzero but rounds to 0"),
    ({"sinks": [-1e39, 0.0]}, r"sinks\[0\] = -1e\+39 is outside float32's range"),
    ({"sinks": [0.0, 1e-46]}, r"sinks\[1\] = 1e-46 is nonzero but rounds to 0"),
])
def test_modifier_values_float32_cannot_hold_are_refused(kwargs, match):
    # a soft cap that rounds to 0 would switch soft-capping off
    rng = np.random.default_rng(65)
    arrays, _ = qkv(rng, 1, 3, 5, 2, 1, 8)
    with pytest.raises(fai.FaiError, match=match):
        fai.attention(*arrays, **kwargs)

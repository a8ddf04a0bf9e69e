"""Errors: the library's messages, bad arguments and arrays, block tables and lengths out
of range; defaults never taken for computed values; the f32 tolerance's edges; the ctypes
structs against the C header."""
import ctypes
import os
import shutil
import subprocess

import numpy as np
import pytest

import fai
from fai import _arrays, _lib
from cases import check, paginate, qkv
from reference import assert_close, attention_ref, cast

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
    ({"scale": 1e-46}, r"scale = 1e-46 is nonzero but rounds to 0 in float32"),
    ({"scale": -1e-50}, r"scale = -1e-50 is nonzero but rounds to 0 in float32"),
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
    # what numpy cannot read as an array of numbers, named
    ({"seqlens_kv": [[1], [1, 2]]}, r"seqlens_kv: not an array"),
    ({"seqlens_q": [1, [2]]}, r"seqlens_q: not an array"),
    ({"alibi_slopes": [[1.0], [2.0, 3.0]]}, r"alibi_slopes: not an array"),
    ({"sinks": [0.5, "x"]}, r"sinks has dtype <U32: expected float32 \[heads_q\]"),
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
    kp, vp, bt = paginate(rng, k, v, [8], 4, extra_pages=0)
    bt[0, 1] = 99
    with pytest.raises(fai.FaiError, match="outside the pool") as info:
        fai.attention(q, kp, vp, block_table=bt, seqlens_kv=[8])
    assert info.value.status == "FAI_ERR_INVALID_ARG"


def test_lengths_past_the_tensor():
    q = np.zeros((1, 2, 2, 8), np.float32)
    k = np.zeros((1, 3, 1, 8), np.float16)
    with pytest.raises(fai.FaiError, match="seqlens_kv"):
        fai.attention(q, k, k, seqlens_kv=[4])

# -- options taken as what they are: flags, integers, dtype names ------------------------------

def _small():
    return np.zeros((1, 2, 2, 8), np.float32), np.zeros((1, 3, 1, 8), np.float16)


@pytest.mark.parametrize("name", ["causal", "causal_top_left", "round_p_bf16", "return_lse"])
@pytest.mark.parametrize("value", ["False", "no", 0, 1, None, np.array([0, 1])])
def test_attention_flags_are_true_or_false_only(name, value):
    q, k = _small()
    with pytest.raises(fai.FaiError, match=rf"{name} = .*: expected True or False"):
        fai.attention(q, k, k, **{name: value})


@pytest.mark.parametrize("name", ["trust_block_table", "trust_scales", "k_channel_scales",
                                  "causal", "alibi", "sinks"])
def test_plan_flags_are_true_or_false_only(name):
    # "no" is truthy: taken as True it would turn the block table's bounds checks off
    with pytest.raises(fai.FaiError, match=f"{name} = 'no': expected True or False"):
        fai.Plan(1, 2, 1, 2, 3, 8, **{name: "no"})


def test_numpy_bools_are_flags():
    q, k = _small()
    assert np.array_equal(fai.attention(q, k, k, causal=np.bool_(True)),
                          fai.attention(q, k, k, causal=True))


@pytest.mark.parametrize("kwargs,match", [
    ({"window": (2**64 + 1, 0)}, r"window = \(18446744073709551617, 0\)"),
    ({"window": (2**63, 0)}, r"window = \(9223372036854775808, 0\)"),
    ({"window": (0.5, 0)}, r"window = \(0\.5, 0\)"),
    ({"threads": 2**64}, "threads = 18446744073709551616"),
    ({"workers": 2**64 + 2}, "workers = 18446744073709551618"),
    ({"tile": (2**64 + 16, 16)}, "tile_q = 18446744073709551632"),
    ({"threads": "2"}, "threads = '2'"),
])
def test_integer_options_outside_int64_are_refused_by_their_value(kwargs, match):
    q, k = _small()
    with pytest.raises(fai.FaiError, match=match):
        fai.attention(q, k, k, **kwargs)


def test_integer_arguments_are_refused_by_their_value():
    with pytest.raises(fai.FaiError, match="batch = 18446744073709551617"):
        fai.Plan(2**64 + 1, 2, 1, 2, 3, 8)
    for level in (2**32 + 2, "a", 1.0):
        with pytest.raises(fai.FaiError, match=f"level = {level!r}"):
            fai.cpu_cache_bytes(level)
    assert fai.cpu_cache_bytes(np.int64(1)) == fai.cpu_cache_bytes(1)
    plan = fai.Plan(1, 2, 1, 2, 3, 8)
    for index in (2**64, 0.9, "0"):
        with pytest.raises(fai.FaiError, match=f"index = {index!r}"):
            plan.unit(index)
    assert plan.unit(np.int64(0)) == plan.unit(0)


def test_numpy_integers_are_integers():
    q, k = _small()
    assert np.array_equal(fai.attention(q, k, k, window=(np.int32(1), None), threads=np.int64(1)),
                          fai.attention(q, k, k, window=(1, None), threads=1))


@pytest.mark.parametrize("name", ["window", "tile"])
@pytest.mark.parametrize("value", [{5, 0}, {16: None, 64: None}, iter([1, 2]), (1, 2, 3), [4],
                                   np.array([[1, 2]]), "ab", 3])
def test_pair_options_refuse_unordered_and_other_iterables(name, value):
    """window and tile take a tuple, list or 1-D array of two: a set or a dict would give its
    items in an order that is not the caller's (a set {5, 0} reads as (0, 5))."""
    q, k = _small()
    with pytest.raises(fai.FaiError, match=rf"^{name} = .*: expected \(.*a tuple, list or 1-D "
                       "array of length 2"):
        fai.attention(q, k, k, **{name: value})


def test_pair_options_as_tuple_list_or_array():
    q, k = _small()
    want = fai.attention(q, k, k, window=(1, 0))
    for window in ([1, 0], np.array([1, 0]), [np.int64(1), 0]):
        assert np.array_equal(fai.attention(q, k, k, window=window), want)
    tiles = [fai.Plan.like(q, k, k, tile=tile).info for tile in
             ((16, 32), [16, 32], np.array([16, 32], np.int32))]
    assert {(i["tile_q"], i["tile_kv"], i["tile_source"]) for i in tiles} == {(16, 32, "user")}


def test_zero_threads_workers_and_tile_sides_are_automatic():
    q, k = _small()
    auto = fai.Plan.like(q, k, k).info
    zero = fai.Plan.like(q, k, k, threads=0, workers=0, tile=(0, 0)).info
    for field in ("threads", "workers", "tile_q", "tile_kv", "tile_source"):
        assert zero[field] == auto[field], field


def test_threads_above_the_pool_run_on_the_pool():
    q, k = _small()
    info = fai.Plan.like(q, k, k, threads=fai.cpu_count() + 3).info
    assert info["threads"] <= fai.cpu_count()


def test_dtype_names_are_read_as_given():
    q, k = _small()
    # numpy reads "F" as complex64 and "f" as float32: never lowercased into another dtype
    with pytest.raises(fai.FaiError, match="out dtype complex64"):
        fai.attention(q, k, k, out_dtype="F")
    assert fai.attention(q, k, k, out_dtype="f").dtype == np.float32
    with pytest.raises(fai.FaiError, match="q_dtype = None: expected a dtype"):
        fai.Plan(1, 2, 1, 2, 3, 8, q_dtype=None)


@pytest.mark.parametrize("kwargs,match", [
    ({"split": []}, r"split = \[\]: expected 'auto'"),
    ({"mask_kind": []}, r"mask_kind = \[\]: expected None"),
    ({"causal": np.array([0, 1])}, "causal = array"),
])
def test_unhashable_and_array_options_are_refused_by_name(kwargs, match):
    with pytest.raises(fai.FaiError, match=match):
        fai.Plan(1, 2, 1, 2, 3, 8, **kwargs)


def test_empty_prefix_sums_are_refused_as_empty():
    q, k = _small()
    with pytest.raises(fai.FaiError, match="cu_seqlens_q is empty"):
        fai.attention(q[0], k, k, cu_seqlens_q=[])


def test_out_with_overlapping_elements_is_refused():
    q, k = _small()
    base = np.full(64, 7.0, np.float32)
    # rows 4 elements apart: the second half of row 0 is the first half of row 1
    out = np.lib.stride_tricks.as_strided(base, (1, 2, 2, 8), (256, 16, 64, 4))
    with pytest.raises(fai.FaiError, match="out has elements that overlap"):
        fai.attention(q, k, k, out=out)
    assert np.all(base == 7.0)


SHAPES = {"q": (1, 4, 2, 8), "k": (1, 4, 2, 8), "v": (1, 4, 2, 8), "mask_add": (4, 4),
          "alibi_slopes": (2,), "sinks": (2,)}


def _carved(name, overlap):
    """float32 q, k, v, mask_add, alibi_slopes and sinks, and an out [1, 4, 2, 8] in one buffer
    with the input `name`: starting at its second element (overlap) or right after it."""
    rng = np.random.default_rng(30)
    arrays = {n: rng.uniform(-1, 1, shape).astype(np.float32) for n, shape in SHAPES.items()}
    size = arrays[name].size
    base = np.zeros(size + 64, np.float32)
    base[:size] = arrays[name].reshape(-1)
    arrays[name] = base[:size].reshape(SHAPES[name])
    at = 1 if overlap else size
    return arrays, base[at:at + 64].reshape(1, 4, 2, 8)


NAMED = tuple(SHAPES)


@pytest.mark.parametrize("name", NAMED)
def test_out_sharing_memory_with_an_input_is_refused(name):
    arrays, out = _carved(name, overlap=True)
    before = out.copy()
    with pytest.raises(fai.FaiError, match=rf"out \(shape \[1, 4, 2, 8\] float32\) shares "
                       rf"memory with {name} \(shape \[.*\] float32\): fai reads {name} while "
                       "it writes out"):
        fai.attention(**arrays, out=out)
    assert np.array_equal(out, before)  # nothing written
    plan = fai.Plan.like(**arrays)
    with pytest.raises(fai.FaiError, match=f"shares memory with {name}"):
        plan.run(**arrays, out=out)


def test_out_sharing_memory_with_the_block_table_is_refused():
    q, k = np.zeros((1, 2, 2, 8), np.float32), np.zeros((2, 4, 2, 8), np.float32)
    raw = np.zeros(64 * 4 + 8, np.uint8)
    out = raw[:128].view(np.float32).reshape(1, 2, 2, 8)
    table = raw[120:128].view(np.int32).reshape(1, 2)
    with pytest.raises(fai.FaiError, match="out .* shares memory with block_table"):
        fai.attention(q, k, k, block_table=table, seqlens_kv=[8], out=out)


@pytest.mark.parametrize("name", NAMED)
def test_out_next_to_an_input_in_one_buffer(name):
    # ranges that touch but do not overlap: accepted, and the result is the one of copies
    arrays, out = _carved(name, overlap=False)
    want = fai.attention(**{n: a.copy() for n, a in arrays.items()})
    assert fai.attention(**arrays, out=out) is out
    assert np.array_equal(out, want)


def test_out_is_the_query_or_the_key_tensor():
    q, _ = _small()
    with pytest.raises(fai.FaiError, match="out .* shares memory with q"):
        fai.attention(q, q, q, out=q)
    kq = np.zeros((1, 2, 2, 8), np.float32)
    with pytest.raises(fai.FaiError, match="out .* shares memory with k"):
        fai.attention(q, kq, kq[:, :, :1].repeat(2, 2), out=kq)


@pytest.mark.parametrize("heads", [2**62, 65537, 0, -1])
def test_alibi_slopes_past_a_plans_heads_are_refused_by_heads(heads):
    # refused before the array is allocated: 2**62 would fail in numpy, not by its name
    with pytest.raises(fai.FaiError, match=rf"heads = {heads}: expected an integer from 1 to "
                       r"65536 \(a plan's limit of query heads\)"):
        fai.alibi_slopes(heads)
    assert fai.alibi_slopes(65536).shape == (65536,)


def test_merge_states_names_out_dtype():
    o, lse = np.zeros((1, 3, 2, 4), np.float32), np.zeros((1, 2, 3), np.float32)
    with pytest.raises(fai.FaiError, match=r"out_dtype = 'int8' \(int8\): expected float32, "
                       "float16 or bfloat16"):
        fai.merge_states([o], [lse], out_dtype="int8")


def _unaligned(shape, dtype):
    """A numpy array whose address is not a multiple of its elements' size."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape))
    raw = np.zeros(count * dtype.itemsize + 1, np.uint8)
    array = np.frombuffer(raw.data, dtype, count, offset=1).reshape(shape)
    assert not array.flags.aligned
    return array


def test_unaligned_inputs_are_copied_and_outputs_refused():
    rng = np.random.default_rng(31)
    q = rng.uniform(-1, 1, (1, 3, 2, 8)).astype(np.float32)
    k = rng.uniform(-1, 1, (1, 5, 2, 8)).astype(np.float32)
    q_odd, k_odd = _unaligned(q.shape, np.float32), _unaligned(k.shape, np.float32)
    q_odd[...], k_odd[...] = q, k
    view = _arrays._view(q_odd, "q", _arrays._want_float("q"))
    assert view.ptr % 4 == 0 and np.array_equal(view.owner, q)  # an aligned copy reaches C
    lengths = _unaligned((1,), np.int32)
    lengths[0] = 4
    slopes = _unaligned((2,), np.float32)
    slopes[...] = [0.5, 0.25]
    want = fai.attention(q, k, k, seqlens_kv=[4], alibi_slopes=np.array([0.5, 0.25], np.float32))
    got = fai.attention(q_odd, k_odd, k_odd, seqlens_kv=lengths, alibi_slopes=slopes)
    assert np.array_equal(got, want)
    out = _unaligned((1, 3, 2, 8), np.float32)
    with pytest.raises(fai.FaiError, match=r"out is not aligned: its address or strides are not "
                       r"multiples of its float32 elements' size \(4 bytes\)"):
        fai.attention(q, k, k, out=out)
    assert not out.any()


def test_float64_values_beyond_float32_are_refused():
    q, k = np.zeros((1, 2, 2, 8)), np.zeros((1, 3, 1, 8))
    big = q.copy()
    big[0, 1, 0, 3] = 1e39
    with pytest.raises(fai.FaiError, match=r"q\[0, 1, 0, 3\] = 1e\+39 is outside float32's"):
        fai.attention(big, k, k)
    add = np.zeros((2, 3))
    add[1, 2] = -1e39
    with pytest.raises(fai.FaiError, match=r"mask_add\[1, 2\] = -1e\+39"):
        fai.attention(q, k, k, mask_add=add)
    add[1, 2] = -np.inf  # float32 holds inf: the key is masked
    o = fai.attention(q, k, k, mask_add=add)
    assert np.isfinite(o).all()

# -- defaults are never taken for computed values; zero sizes ------------------------------------

@pytest.mark.parametrize("scale", [0.0, -0.0, np.float32(0)])
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
               "fai_scale": _lib.Scale, "fai_channel_scale": _lib.ChannelScale,
               "fai_tensors": _lib.Tensors, "fai_plan_info": _lib.PlanInfo,
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


def test_empty_cache_checks_every_argument():
    # a dtype nobody has, and threads checked even when nothing is allocated
    with pytest.raises(fai.FaiError, match="dtype = 'quint8': not a dtype"):
        fai.empty_cache(3, "quint8")
    with pytest.raises(fai.FaiError, match="threads"):
        fai.empty_cache(0, "float32", threads="x")
    with pytest.raises(fai.FaiError, match="threads"):
        fai.empty_cache((2, 0), "float32", threads=0)
    assert fai.empty_cache(0, "float32", threads=1).shape == (0,)


def test_empty_cache_refuses_a_torch_dtype_numpy_lacks():
    torch = pytest.importorskip("torch")
    with pytest.raises(fai.FaiError, match="dtype quint8 has no numpy counterpart"):
        fai.empty_cache(3, torch.quint8)


# -- the plan's and merge_states' own checks, each naming what it refused -------------------------

@pytest.mark.parametrize("kwargs,match", [
    ({"seq_kv": None}, r"seq_kv = None: expected an integer \(only a paged plan"),
    ({"head_dim_v": 0}, r"head_dim_v = 0 is not a head dimension"),
    ({"mask_kind": "sometimes"}, r"mask_kind = 'sometimes': expected None, 'keep'"),
    ({"split": "evenly"}, r"split = 'evenly': expected 'auto', 'units' or 'greedy'"),
    ({"seqlens_q": [2], "cu_seqlens_q": [0, 2]}, "seqlens_q and cu_seqlens_q exclude each other"),
    ({"seqlens_kv": [3], "cu_seqlens_kv": [0, 3]},
     "cu_seqlens_kv excludes seqlens_kv and paged K/V"),
    ({"q_positions": [0]}, "q_positions and kv_positions: give both or neither"),
    ({"kv_positions": [0]}, "q_positions and kv_positions: give both or neither"),
])
def test_plan_refuses(kwargs, match):
    args = dict(batch=1, heads_q=2, heads_kv=1, seq_q=2, seq_kv=3, head_dim=8)
    for name in ("seq_kv", "head_dim_v"):
        if name in kwargs:
            args[name] = kwargs.pop(name)
    with pytest.raises(fai.FaiError, match=match):
        fai.Plan(**args, **kwargs)


def test_run_refuses_what_the_plan_does_not_have():
    q, k = _small()
    with fai.Plan.like(q, k, k) as plan:
        with pytest.raises(fai.FaiError, match="mask given, but the plan has no mask"):
            plan.run(q, k, k, mask=np.ones((2, 3), bool))
        with pytest.raises(fai.FaiError, match="block_table given, but the plan's K and V are "
                                               "not paged"):
            plan.run(q, k, k, block_table=np.zeros((1, 1), np.int32))
        short = np.zeros((1, 2, 1, 8), np.float16)
        with pytest.raises(fai.FaiError, match=r"k has shape \[1, 2, 1, 8\]: fewer than the "
                                               r"plan's seq_kv = 3"):
            plan.run(q, short, k)
    with pytest.raises(fai.FaiError, match="mask_kind = 'drop' does not match the mask given"):
        fai.Plan.like(q, k, k, mask=np.ones((2, 3), bool), mask_kind="drop")


def test_paged_arguments_that_exclude_each_other():
    q = np.zeros((1, 1, 2, 8), np.float32)
    pool = np.zeros((2, 16, 1, 8), np.float16)
    bt = np.array([[0, 1]], np.int32)
    with pytest.raises(fai.FaiError, match="cu_seqlens_kv and block_table exclude each other"):
        fai.attention(q, pool, pool, block_table=bt, seqlens_kv=[20], cu_seqlens_kv=[0, 20])
    packed_q = np.zeros((3, 2, 8), np.float32)
    k = np.zeros((5, 1, 8), np.float16)
    with pytest.raises(fai.FaiError, match=r"cu_seqlens_kv has shape \[3\]; expected \[2\]"):
        fai.attention(packed_q, k, k, cu_seqlens_q=[0, 3], cu_seqlens_kv=[0, 2, 5])


def test_merge_states_refuses():
    o = np.zeros((1, 2, 1, 4), np.float32)
    lse = np.zeros((1, 1, 2), np.float32)
    with pytest.raises(fai.FaiError, match="o_parts is empty"):
        fai.merge_states([], [])
    with pytest.raises(fai.FaiError, match="2 o_parts but 1 lse_parts"):
        fai.merge_states([o, o], [lse])
    with pytest.raises(fai.FaiError, match=r"o_parts\[0\] has shape \[4\]; expected \[B, S, H, D\] "
                                           r"or \[rows, H, D\]"):
        fai.merge_states([np.zeros(4, np.float32)], [lse])
    with pytest.raises(fai.FaiError, match=r"o_parts\[1\] has shape \[1, 3, 1, 4\]; o_parts\[0\] "
                                           r"has \[1, 2, 1, 4\]"):
        fai.merge_states([o, np.zeros((1, 3, 1, 4), np.float32)], [lse, lse])
    with pytest.raises(fai.FaiError, match="o_parts: got int, expected a list or tuple"):
        fai.merge_states(3, [lse])
    # one array is not read as its batch's parts (it would have merged the two sequences)
    with pytest.raises(fai.FaiError, match="o_parts: got ndarray, expected a list or tuple"):
        fai.merge_states(np.zeros((2, 2, 1, 4), np.float32), [lse, lse])
    with pytest.raises(fai.FaiError, match="lse_parts: got ndarray, expected"):
        fai.merge_states([o], lse)


def test_inputs_in_another_byte_order_are_read_and_outputs_refused():
    q, k = _small()
    swapped = q.astype(q.dtype.newbyteorder())
    assert np.array_equal(fai.attention(swapped, k, k), fai.attention(q, k, k))
    out = np.zeros((1, 2, 2, 8), np.dtype(np.float32).newbyteorder())
    with pytest.raises(fai.FaiError, match="out is not in native byte order"):
        fai.attention(q, k, k, out=out)
    assert not out.any()

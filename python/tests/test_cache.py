"""fai.cache_write and fai.empty_cache: rows written into caches of every dtype, with per-token
and fixed scales, read back with numpy's (and ml_dtypes') own conversions; rows not written keep
their bytes; errors name the field and write nothing; cache memory is 2 MiB-aligned, zeroed and
freed with its last view."""
import gc
import os
import threading

import numpy as np
import pytest

import fai
from fai import _cache

try:
    import ml_dtypes
except ImportError:  # pragma: no cover - depends on the environment
    ml_dtypes = None

needs_ml_dtypes = pytest.mark.skipif(ml_dtypes is None, reason="ml_dtypes is not installed: no "
                                     "bfloat16 or fp8 numpy arrays (pip install ml_dtypes)")
ML_DTYPES = ("bfloat16", "float8_e4m3fn", "float8_e5m2")
QMAX = {"int8": 127.0, "float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}
HUGE_PAGE = 2 << 20


def np_dtype(name):
    return np.dtype(getattr(ml_dtypes, name)) if name in ML_DTYPES else np.dtype(name)


def case(dtype, mode):
    return pytest.param(dtype, mode, id=f"{dtype}-{mode or 'unscaled'}",
                        marks=needs_ml_dtypes if dtype in ML_DTYPES else ())


def sentinel_cache(shape, dtype):
    cache = np.empty(shape, np_dtype(dtype))
    raw = cache.view(np.uint8).reshape(-1)
    raw[:] = (np.arange(raw.size) * 131 + 7) % 256
    return cache


def new_rows(rng, tokens, heads, dim, dtype="float32"):
    """Rows whose (token, head) magnitudes run from all zeros to 3000."""
    amp = rng.choice([0.0, 1e-3, 1.0, 100.0, 3000.0], size=(tokens, heads, 1))
    return (amp * rng.uniform(-1, 1, (tokens, heads, dim))).astype(np_dtype(dtype))


def distinct_slots(rng, tokens, rows, skip_every=5):
    slots = rng.permutation(rows)[:tokens].astype(np.int64)
    slots[3::skip_every] = -1
    return slots


def check_quantized(dtype, x, s, codes):
    """int8: scale x q within half a step (s / 2) of x, saturated at +-127 where |x / s| reaches
    it. fp8: the codes bit for bit those of the float32 quotient x / s rounded to nearest even
    (ml_dtypes' conversion), saturated at +-qmax: fai's fp8 codes have no infinities, a quotient
    past qmax is stored as +-qmax (448 e4m3, 57344 e5m2), never as Inf or NaN."""
    if dtype != "int8":
        y = np.asarray(x, np.float32) / np.broadcast_to(np.asarray(s, np.float32), x.shape)
        want = np.clip(y, -QMAX[dtype], QMAX[dtype]).astype(np_dtype(dtype))
        assert codes.dtype == want.dtype
        bad = codes.view(np.uint8) != want.view(np.uint8)
        assert not bad.any(), (f"{bad.sum()} codes differ, e.g. x / s {y[bad][:3]}: got "
                               f"{codes[bad][:3].astype(np.float32)}, want "
                               f"{want[bad][:3].astype(np.float32)}")
        return
    x = x.astype(np.float64)
    s = np.broadcast_to(np.asarray(s, np.float64), x.shape)
    q = codes.astype(np.float64)
    y = x / s
    saturated = np.abs(y) >= QMAX[dtype]
    assert np.array_equal(q[saturated], np.copysign(QMAX[dtype], y[saturated]))
    err = np.abs(x - s * q)
    bad = ~saturated & (err > 0.5 * s * (1 + 1e-5) + 1e-30)
    assert not bad.any(), f"{bad.sum()} elements off, e.g. x {x[bad][:3]}, s x q {(s * q)[bad][:3]}"


@pytest.mark.parametrize("dtype, mode", [case(d, None) for d in ("float32", "float16", "bfloat16")]
                         + [case(d, m) for d in QMAX for m in ("per_token", "fixed")])
@pytest.mark.parametrize("paged", [True, False])
def test_round_trip(dtype, mode, paged):
    rng = np.random.default_rng(7)
    blocks, rows = (12, 16) if paged else (2, 96)
    heads, dim, tokens = 3, 24, 40
    cache = sentinel_cache((blocks, rows, heads, dim), dtype)
    before = cache.copy()
    src = new_rows(rng, tokens, heads, dim, "float16" if paged else "float32")
    slots = distinct_slots(rng, tokens, blocks * rows)
    scale = None
    if dtype in QMAX and mode == "per_token":
        scale = np.full((blocks, rows, heads), -3.0, np.float32)
    elif dtype in QMAX:
        scale = (3000.0 / QMAX[dtype] * rng.uniform(0.5, 1.5, heads)).astype(np.float32)
    scale_before = None if scale is None else scale.copy()
    fai.cache_write(src, cache, slots, scale=scale)

    written = slots >= 0
    block, row = slots[written] // rows, slots[written] % rows
    got = cache[block, row]
    x = src[written].astype(np.float32)
    if dtype not in QMAX:  # rounded to nearest even: what numpy's own conversion gives
        assert np.array_equal(got.view(np.uint8), x.astype(np_dtype(dtype)).view(np.uint8))
    elif mode == "per_token":
        s = scale[block, row]
        amax = np.abs(x).max(axis=-1)
        want = np.where(amax > 0, amax / np.float32(QMAX[dtype]), np.float32(1))
        assert np.array_equal(s, want.astype(np.float32))
        check_quantized(dtype, x, s[..., None], got)
    else:
        check_quantized(dtype, x, scale[None, :, None], got)
    # every other row, and every scale not written, as before
    untouched = np.ones((blocks, rows), bool)
    untouched[block, row] = False
    assert np.array_equal(cache[untouched].view(np.uint8), before[untouched].view(np.uint8))
    if mode == "per_token" and scale is not None:
        assert np.array_equal(scale[untouched], scale_before[untouched])
    elif scale is not None:
        assert np.array_equal(scale, scale_before)


def test_three_dimensional_cache_and_block_rows():
    rng = np.random.default_rng(3)
    src = new_rows(rng, 10, 2, 8)
    slots = distinct_slots(rng, 10, 64)
    flat = np.zeros((64, 2, 8), np.int8)
    flat_scale = np.zeros((64, 2), np.float32)
    fai.cache_write(src, flat, slots, scale=flat_scale, block_rows=16)
    paged = np.zeros((4, 16, 2, 8), np.int8)
    paged_scale = np.zeros((4, 16, 2), np.float32)
    fai.cache_write(src, paged, slots, scale=paged_scale)
    assert np.array_equal(flat, paged.reshape(64, 2, 8))
    assert np.array_equal(flat_scale, paged_scale.reshape(64, 2))
    one_block = np.zeros((64, 2, 8), np.int8)
    fai.cache_write(src, one_block, slots, scale=np.zeros((64, 2), np.float32))
    assert np.array_equal(one_block, flat)


def test_strided_views_are_written_in_place():
    rng = np.random.default_rng(4)
    big = np.zeros((3, 16, 4, 40), np.float16)
    cache = big[:, :, 1:3, 4:36]  # gaps between heads and rows
    src = new_rows(rng, 6, 2, 32)[:, :, :]
    slots = np.array([0, 47, 16, -1, 3, 30])
    fai.cache_write(src[::1], cache, slots.astype(np.int32))
    for t, slot in enumerate(slots):
        if slot >= 0:
            assert np.array_equal(big[slot // 16, slot % 16, 1:3, 4:36], src[t].astype(np.float16))
    assert not big[:, :, 0].any() and not big[:, :, 3].any() and not big[..., :4].any()


def test_fixed_scales_saturate():
    src = np.array([[[100.0, -100.0, 63.5, 63.25, 0.25, -0.75, 1e9, -1e9]]], np.float32)
    cache = np.zeros((1, 1, 1, 8), np.int8)
    fai.cache_write(src, cache, np.array([0]), scale=0.5)
    assert cache.reshape(-1).tolist() == [127, -127, 127, 126, 0, -2, 127, -127]


def test_threads_write_the_same_bytes():
    rng = np.random.default_rng(5)
    src = new_rows(rng, 200, 4, 96)
    slots = distinct_slots(rng, 200, 256)
    results = []
    for threads in (None, 1, 2):
        cache = np.zeros((16, 16, 4, 96), np.int8)
        scale = np.zeros((16, 16, 4), np.float32)
        fai.cache_write(src, cache, slots, scale=scale, threads=threads)
        results.append((cache, scale))
    for cache, scale in results[1:]:
        assert np.array_equal(cache, results[0][0]) and np.array_equal(scale, results[0][1])


# -- errors -----------------------------------------------------------------------------------------


def error_setup():
    src = np.arange(4 * 2 * 8, dtype=np.float32).reshape(4, 2, 8) % 13 - 6
    cache = np.full((2, 4, 2, 8), 0x55, np.int8)
    scale = np.full((2, 4, 2), -3.0, np.float32)
    return src, cache, scale, np.array([5, 0, 7, 2])


@pytest.mark.parametrize("change, match", [
    (lambda s, sl: sl.__setitem__(2, 8), r"slots\[2\] = 8 is outside"),
    (lambda s, sl: sl.__setitem__(1, -2), r"slots\[1\] = -2"),
    (lambda s, sl: sl.__setitem__(3, 5), r"slots\[0\] = 5 and slots\[3\] = 5"),
    (lambda s, sl: s.__setitem__((1, 1, 3), np.nan), r"src \(token 1, head 1, d 3\) = nan"),
])
def test_errors_name_the_field_and_write_nothing(change, match):
    src, cache, scale, slots = error_setup()
    change(src, slots)
    before, scale_before = cache.copy(), scale.copy()
    with pytest.raises(fai.FaiError, match=match) as info:
        fai.cache_write(src, cache, slots, scale=scale)
    assert info.value.status == "FAI_ERR_INVALID_ARG"
    assert np.array_equal(cache, before) and np.array_equal(scale, scale_before)


def test_scale_errors():
    src, cache, scale, slots = error_setup()
    before = cache.copy()
    with pytest.raises(fai.FaiError, match=r"scale = NULL") as info:
        fai.cache_write(src, cache, slots)
    assert info.value.status == "FAI_ERR_INVALID_ARG"
    for bad, text in ((0.0, "0"), (-1.0, "-1"), (np.nan, "nan"), (np.inf, "inf")):
        with pytest.raises(fai.FaiError, match=rf"scale\[1\] = {text}"):
            fai.cache_write(src, cache, slots, scale=np.array([0.5, bad], np.float32))
    assert np.array_equal(cache, before)
    with pytest.raises(fai.FaiError, match="scale given for a float16 cache"):
        fai.cache_write(src, np.zeros((2, 4, 2, 8), np.float16), slots, scale=scale)
    with pytest.raises(fai.FaiError, match=r"scale has shape \[3\]"):
        fai.cache_write(src, cache, slots, scale=np.ones(3, np.float32))
    with pytest.raises(fai.FaiError, match=r"scale has shape \[2, 4\]"):
        fai.cache_write(src, cache, slots, scale=np.ones((2, 4), np.float32))
    with pytest.raises(fai.FaiError, match="scale has dtype float64"):
        fai.cache_write(src, cache, slots, scale=np.ones((2, 4, 2)))


def test_shape_and_dtype_errors():
    src, cache, scale, slots = error_setup()
    with pytest.raises(fai.FaiError, match=r"src has shape \[4, 2, 9\]"):
        fai.cache_write(np.zeros((4, 2, 9), np.float32), cache, slots, scale=scale)
    with pytest.raises(fai.FaiError, match=r"slots has shape \[3\]"):
        fai.cache_write(src, cache, slots[:3], scale=scale)
    with pytest.raises(fai.FaiError, match="slots has dtype float64"):
        fai.cache_write(src, cache, slots.astype(np.float64), scale=scale)
    with pytest.raises(fai.FaiError, match="cache has dtype int16"):
        fai.cache_write(src, cache.astype(np.int16), slots, scale=scale)
    with pytest.raises(fai.FaiError, match="src has dtype int8"):
        fai.cache_write(src.astype(np.int8), cache, slots, scale=scale)
    with pytest.raises(fai.FaiError, match="block_rows = 3"):
        fai.cache_write(src, cache, slots, scale=scale, block_rows=3)
    with pytest.raises(fai.FaiError, match="not a multiple of block_rows = 3"):
        fai.cache_write(src, cache.reshape(8, 2, 8), slots, scale=scale.reshape(8, 2),
                        block_rows=3)
    cache.flags.writeable = False
    with pytest.raises(fai.FaiError, match="cache is read-only"):
        fai.cache_write(src, cache, slots, scale=scale)
    with pytest.raises(fai.FaiError, match="threads"):
        fai.cache_write(src, np.zeros_like(cache), slots, scale=scale, threads=0)
    # the pools' bound is libfai's, said before any pool is asked for
    with pytest.raises(fai.FaiError, match=r"threads = 1025: expected an integer from 1 to 1024"):
        fai.empty_cache((4, 8), np.float32, threads=1025)


@pytest.mark.parametrize("scale, match", [
    (1 + 1j, "scale has dtype complex128; expected float32"),
    (True, "scale = True"),
    ("0.5", "scale has dtype str.*; expected float32"),
    (np.array([1, 2]), "scale has dtype int64; expected float32"),
    (1e39, r"scale = 1e\+39 is outside float32's range"),
    (1e-46, r"scale = 1e-46 is nonzero but rounds to 0"),
    (np.array([0.5, 1e-46]), r"scale\[1\] = 1e-46 is nonzero but rounds to 0"),
])
def test_fixed_scales_are_real_numbers_float32_holds(scale, match):
    src, cache, _, slots = error_setup()
    before = cache.copy()
    with pytest.raises(fai.FaiError, match=match):
        fai.cache_write(src, cache, slots, scale=scale)
    assert np.array_equal(cache, before)


def test_fixed_scales_of_numpy_scalars_and_float64_arrays():
    src, cache, _, slots = error_setup()
    before = cache.copy()
    fai.cache_write(src, cache, slots, scale=0.5)
    for scale in (np.float64(0.5), np.float32(0.5), np.array([0.5, 0.5])):
        again = before.copy()
        fai.cache_write(src, again, slots, scale=scale)
        assert np.array_equal(again, cache)


def test_src_beyond_float32_is_refused():
    src, cache, scale, slots = error_setup()
    src = src.astype(np.float64)
    src[2, 1, 0] = 1e39
    before = cache.copy()
    with pytest.raises(fai.FaiError, match=r"src\[2, 1, 0\] = 1e\+39 is outside float32's"):
        fai.cache_write(src, cache, slots, scale=scale)
    assert np.array_equal(cache, before)


@pytest.mark.parametrize("kwargs, match", [
    ({"threads": 2**64 + 1}, "threads = 18446744073709551617"),
    ({"threads": 1.0}, r"threads = 1\.0"),
    ({"block_rows": 2**64 + 4}, "block_rows = 18446744073709551620"),
])
def test_integer_arguments_outside_int64_are_refused(kwargs, match):
    src, cache, scale, slots = error_setup()
    before = cache.copy()
    with pytest.raises(fai.FaiError, match=match):
        fai.cache_write(src, cache, slots, scale=scale, **kwargs)
    assert np.array_equal(cache, before)


def test_cache_with_overlapping_rows_is_refused():
    src, _, scale, slots = error_setup()
    base = np.full(256, 0x55, np.int8)
    # rows 8 bytes apart but 16 long: each row's second half is the next row's first
    cache = np.lib.stride_tricks.as_strided(base, (2, 4, 2, 8), (64, 8, 8, 1))
    with pytest.raises(fai.FaiError, match="cache has elements that overlap"):
        fai.cache_write(src, cache, slots, scale=scale)
    assert np.all(base == 0x55)


# -- empty_cache ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float16", "int8", pytest.param("e4m3", marks=needs_ml_dtypes),
                                   pytest.param("bfloat16", marks=needs_ml_dtypes)])
def test_empty_cache_is_aligned_and_zeroed(dtype):
    shape = (5, 16, 8, 128)
    cache = fai.empty_cache(shape, dtype)
    assert cache.shape == shape
    assert cache.ctypes.data % HUGE_PAGE == 0
    assert cache.flags.c_contiguous and cache.flags.writeable
    raw = cache.view(np.uint8)
    assert not raw.any()
    raw[...] = 0xA5
    assert (raw == 0xA5).all()
    assert fai.empty_cache(shape, dtype, threads=2).ctypes.data % HUGE_PAGE == 0


def test_empty_cache_dtype_names():
    assert fai.empty_cache(3, np.float32).dtype == np.float32
    assert fai.empty_cache([2, 2], "f16").dtype == np.float16  # fai's name, not numpy's float128
    assert fai.empty_cache([2, 2], "half").dtype == np.float16
    assert fai.empty_cache([2, 2], "fp16").dtype == np.float16
    if ml_dtypes is not None:
        assert fai.empty_cache([4], "e5m2").dtype == np.dtype(ml_dtypes.float8_e5m2)
        assert fai.empty_cache([4], ml_dtypes.float8_e4m3fn).dtype == \
            np.dtype(ml_dtypes.float8_e4m3fn)
    empty = fai.empty_cache((0, 4), "int8")
    assert empty.shape == (0, 4) and empty.dtype == np.int8
    with pytest.raises(fai.FaiError, match="shape"):
        fai.empty_cache((2, -1), "int8")


@pytest.mark.parametrize("name, dtype", [("B", np.uint8), ("F", np.complex64),
                                         ("D", np.complex128), ("H", np.uint16), ("f", np.float32),
                                         ("i1", np.int8)])
def test_empty_cache_reads_dtype_names_as_numpy_does(name, dtype):
    assert fai.empty_cache(3, name).dtype == dtype


@pytest.mark.parametrize("name, dtype", [("float", np.float32), ("f16", np.float16),
                                         ("i8", np.int8), ("d", np.float64),
                                         ("complex", np.complex128), ("u2", np.uint16)])
def test_empty_cache_reads_fais_names_as_fai_others_as_numpy(name, dtype):
    # fai's short names mean what they mean in the rest of fai; other names what numpy reads
    assert fai.empty_cache(3, name).dtype == dtype


@pytest.mark.parametrize("dtype, match", [
    (">f4", "dtype = '>f4': big-endian, not the machine's byte order; fai reads and writes "
            "native float32"),
    (np.dtype(">i2"), r"dtype = dtype\('>i2'\): big-endian"),
])
def test_empty_cache_refuses_a_foreign_byte_order(dtype, match):
    with pytest.raises(fai.FaiError, match=match):
        fai.empty_cache(3, dtype)


@pytest.mark.parametrize("dtype, match", [
    (None, "dtype = None: expected a dtype"),
    ("U4", "dtype = 'U4' .*: expected a numeric dtype"),
    (object, "expected a numeric dtype"),
    ("nonsense", "dtype = 'nonsense': not a dtype"),
])
def test_empty_cache_refuses_what_is_not_a_numeric_dtype(dtype, match):
    with pytest.raises(fai.FaiError, match=match):
        fai.empty_cache(3, dtype)


@pytest.mark.parametrize("shape", [(2**62 + 1, 4), (2**62,), (2**32, 2**32 + 1), (0, 2**62)])
def test_empty_cache_refuses_sizes_past_int64_bytes(shape):
    with pytest.raises(fai.FaiError, match=r"shape \[.*\] of float32 spans \d+ bytes, more than "
                       "an array can address"):
        fai.empty_cache(shape, "float32")


def test_empty_cache_torch_is_true_or_false():
    with pytest.raises(fai.FaiError, match="torch = 'yes': expected True or False"):
        fai.empty_cache(3, "int8", torch="yes")


def owner(array):
    while not isinstance(array, _cache._CacheMemory):
        array = array.base
    return array


def test_empty_cache_is_freed_with_its_last_view():
    cache = fai.empty_cache((3, 1024, 1024), "float16")
    finalizer = owner(cache)._finalizer
    page = cache[1]
    del cache
    gc.collect()
    assert finalizer.alive  # a view keeps the memory
    page[...] = 1.0
    assert page.sum(dtype=np.float64) == 1024 * 1024
    del page
    gc.collect()
    assert not finalizer.alive


def test_cache_sharing_memory_with_what_is_read_is_refused():
    cache = np.arange(4 * 8 * 2 * 16, dtype=np.float32).reshape(4, 8, 2, 16)
    before = cache.copy()
    slots = np.array([9, 20], np.int64)
    with pytest.raises(fai.FaiError, match=r"cache \(shape \[4, 8, 2, 16\] float32\) shares "
                       r"memory with src \(shape \[2, 2, 16\] float32\): fai reads src while "
                       "it writes cache"):
        fai.cache_write(cache[0, :2], cache, slots)  # rows 0 and 1 copied into 9 and 20
    int8 = np.zeros((4, 8, 2, 16), np.int8)
    scale = np.zeros((4, 8, 2), np.float32)
    with pytest.raises(fai.FaiError, match="scale .* shares memory with src"):
        fai.cache_write(scale.reshape(-1)[:64].reshape(2, 2, 16), int8, slots, scale=scale)
    assert np.array_equal(cache, before) and not int8.any() and not scale.any()
    fai.cache_write(cache[0, :2].copy(), cache, slots)  # a copy of the rows: accepted
    assert np.array_equal(cache.reshape(32, 2, 16)[slots], before[0, :2])


def _process_threads():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("Threads:"))


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="counts threads in /proc")
def test_pools_of_many_thread_counts_are_not_all_kept():
    rng = np.random.default_rng(8)
    cache = np.zeros((4, 8, 2, 16), np.float32)
    src, slots = new_rows(rng, 6, 2, 16), distinct_slots(rng, 6, 32)
    fai.cache_write(src, cache, slots)  # the default pool's threads exist before counting
    before = _process_threads()
    counts = range(2, 12)
    for count in counts:
        fai.cache_write(src, cache, slots, threads=count)
        fai.empty_cache(16, "int8", threads=count)
    # a pool of `count` threads starts count - 1 of its own: not one pool kept per count, at
    # most those of the last few
    grown = _process_threads() - before
    assert grown < sum(count - 1 for count in counts)
    assert grown <= sum(count - 1 for count in counts[-_cache._POOLS_KEPT:])


def test_a_forked_child_writes_on_pools_of_its_own():
    # the parent's pools have no threads in a child: the child's cache of pools starts empty,
    # and its writes (on new pools) put the rows where the parent's would
    rng = np.random.default_rng(10)
    src, slots = new_rows(rng, 6, 2, 16), distinct_slots(rng, 6, 32)
    want = np.zeros((4, 8, 2, 16), np.float32)
    fai.cache_write(src, want, slots, threads=2)
    assert _cache._pools
    pid = os.fork()
    if pid == 0:
        ok = False
        try:
            fresh = not _cache._pools
            got = np.zeros_like(want)
            fai.cache_write(src, got, slots, threads=2)
            ok = fresh and np.array_equal(got, want) and len(_cache._pools) == 1
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def test_pools_in_use_on_other_threads_are_not_freed():
    # calls on four threads, each cycling through more counts than are kept: a pool pushed out
    # while another thread writes with it is freed after that write, never during it
    rng = np.random.default_rng(9)
    src = new_rows(rng, 6, 2, 16)
    errors = []

    def work(seed):
        local = np.random.default_rng(seed)
        cache = np.zeros((4, 8, 2, 16), np.float32)
        try:
            for step in range(24):
                slots = distinct_slots(local, 6, 32)
                fai.cache_write(src, cache, slots, threads=1 + (seed + step) % 7)
                written = slots >= 0
                assert np.array_equal(cache.reshape(32, 2, 16)[slots[written]], src[written])
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert not errors, errors


def test_cache_write_into_empty_cache():
    rng = np.random.default_rng(6)
    cache = fai.empty_cache((8, 16, 2, 64), "int8")
    scale = fai.empty_cache((8, 16, 2), "float32")
    src = new_rows(rng, 20, 2, 64)
    slots = distinct_slots(rng, 20, 128)
    fai.cache_write(src, cache, slots, scale=scale, threads=2)
    written = slots >= 0
    s = scale.reshape(128, 2)[slots[written]]
    check_quantized("int8", src[written], s[..., None],
                    cache.reshape(128, 2, 64)[slots[written]])


def test_append_then_attend_with_channel_scales():
    # a K cache with scales per channel: written from the tokens divided by them, then attended
    # with them; the result is attention over code x token scale x channel scale, computed in
    # float64 here, and the codes hold the tokens within the quantization's half step
    rng = np.random.default_rng(7)
    pages, page, heads_kv, dim, tokens = 4, 8, 2, 32, 27
    channels = rng.uniform(0.25, 4.0, (heads_kv, dim)).astype(np.float32)
    k_new = (rng.standard_normal((tokens, heads_kv, dim)) * channels).astype(np.float32)
    v_new = rng.standard_normal((tokens, heads_kv, dim)).astype(np.float32)
    k_cache = fai.empty_cache((pages, page, heads_kv, dim), "int8")
    v_cache = fai.empty_cache((pages, page, heads_kv, dim), "int8")
    k_scale = fai.empty_cache((pages, page, heads_kv), "float32")
    v_scale = fai.empty_cache((pages, page, heads_kv), "float32")
    table = np.array([[2, 0, 3, 1]], np.int32)
    slots = np.array([table[0, t // page] * page + t % page for t in range(tokens)], np.int64)
    fai.cache_write(k_new / channels, k_cache, slots, scale=k_scale)
    fai.cache_write(v_new, v_cache, slots, scale=v_scale)
    rows = k_cache.reshape(-1, heads_kv, dim)[slots].astype(np.float64)
    k_values = rows * k_scale.reshape(-1, heads_kv)[slots][..., None] * channels
    assert np.all(np.abs(k_values - k_new) <= 0.5 * np.max(np.abs(k_new), axis=-1,
                                                           keepdims=True) / 127 * channels + 1e-6)
    v_values = (v_cache.reshape(-1, heads_kv, dim)[slots].astype(np.float64)
                * v_scale.reshape(-1, heads_kv)[slots][..., None])
    q = rng.standard_normal((1, 3, 4, dim)).astype(np.float32)
    o = fai.attention(q, k_cache, v_cache, block_table=table, seqlens_kv=[tokens], causal=True,
                      k_scale=k_scale, v_scale=v_scale, k_channel_scale=channels)
    # float64 reference: query i sees keys j <= i + tokens - 3; q head h reads kv head h // 2
    s = np.einsum("qhd,khd->hqk", q[0].astype(np.float64),
                  np.repeat(k_values, 2, axis=1)) / np.sqrt(dim)
    s[:, np.arange(3)[:, None] + tokens - 3 < np.arange(tokens)[None, :]] = -np.inf
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    ref = np.einsum("hqk,khd->qhd", p / p.sum(axis=-1, keepdims=True),
                    np.repeat(v_values, 2, axis=1))
    assert np.max(np.abs(o[0] - ref)) < 1e-5

"""KV caches: new tokens' K or V rows written into a cache (fai_cache_write), and cache memory on
2 MiB-aligned huge pages (fai_cache_alloc), as numpy arrays freed with their last view."""
import collections
import contextlib
import ctypes
import math
import os
import threading
import weakref

import numpy as np

from . import _lib
from ._arrays import (_ALIASES, _FAI_DTYPES, _check_apart, _dtype_name, _fill_tensor,
                      _numpy_dtype, _scales_view, _view, _want_exact, _want_float)
from ._errors import _check, _fail
from ._scalars import INT64_MAX, _flag, _integer, _is_integer

__all__ = ["cache_write", "empty_cache"]

# the dtypes a cache may have (numpy / torch names), as fai_dtype values
_CACHE_DTYPES = {"float32": _lib.DTYPE_F32, "float16": _lib.DTYPE_F16,
                 "bfloat16": _lib.DTYPE_BF16, "int8": _lib.DTYPE_I8,
                 "float8_e4m3fn": _lib.DTYPE_E4M3, "float8_e5m2": _lib.DTYPE_E5M2}
_QUANTIZED = ("int8", "float8_e4m3fn", "float8_e5m2")


def _require(fn, name):
    if fn is None:
        _fail(f"{_lib.path} has no {name}: rebuild it from this package's source tree")
    return fn


# -- thread pools -----------------------------------------------------------------------------------

# Pools by thread count, the most recently used last. Making a pool starts its threads and
# freeing one joins them, which would cost each cache_write of a decode step more than the write
# itself: the pools of the last few counts are kept (their threads sleep when idle), and one
# pushed out is freed by the last call still using it. A program uses one count or two; a few
# kept bounds the threads a program that tries many counts is left with.
_POOLS_KEPT = 4
_pools = collections.OrderedDict()
_pools_lock = threading.Lock()


def _forget_pools_after_fork():
    """A child forked from a process with pools has none of their threads (libfai would run
    them on the caller alone) and may inherit the lock held: it starts a cache of its own, and
    the parent's pools are left to the parent."""
    global _pools, _pools_lock
    _pools = collections.OrderedDict()
    _pools_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_pools_after_fork)


class _Pool:
    """A fai_pool, the calls using it, and whether it has been pushed out of _pools."""

    __slots__ = ("handle", "users", "evicted")

    def __init__(self, handle):
        self.handle = handle
        self.users = 0
        self.evicted = False


def _checkout(count):
    """The pool of `count` threads, made if need be, counted as in use; returns it and the pools
    pushed out that no call uses (to free outside the lock)."""
    with _pools_lock:
        pool = _pools.get(count)
        if pool is None:
            handle = ctypes.c_void_p()
            _check(_lib.pool_create(count, ctypes.byref(handle)))
            pool = _pools[count] = _Pool(handle.value)
        _pools.move_to_end(count)
        pool.users += 1
        idle = []
        while len(_pools) > _POOLS_KEPT:
            _, old = _pools.popitem(last=False)
            old.evicted = True
            if not old.users:
                idle.append(old)
        return pool, idle


def _checkin(pool):
    with _pools_lock:
        pool.users -= 1
        return pool.evicted and not pool.users


def _thread_count(threads):
    """A pool's thread count as given (None: libfai's default pool), checked."""
    if threads is None:
        return None
    return _integer(threads, "threads", 1, _lib.MAX_WORKERS, note=" (None: libfai's default pool)")


@contextlib.contextmanager
def _pool(threads):
    """The fai_pool to write or touch memory with, for the duration of a with block: None (NULL)
    is libfai's default pool; a count gets a pool of that many threads (see _POOLS_KEPT)."""
    if threads is None:
        yield None
        return
    pool, idle = _checkout(_thread_count(threads))
    for old in idle:
        _lib.pool_free(old.handle)
    try:
        yield pool.handle
    finally:
        if _checkin(pool):
            _lib.pool_free(pool.handle)


# -- cache_write ------------------------------------------------------------------------------------


def _want_cache(dtype):
    if dtype in _CACHE_DTYPES:
        return dtype
    _fail(f"cache has dtype {dtype}; expected one of {', '.join(_CACHE_DTYPES)}")


def _want_int64(dtype):
    if dtype == "int64":
        return dtype
    if dtype in ("int8", "int16", "int32", "uint8", "uint16", "uint32"):
        return "int64"
    _fail(f"slots has dtype {dtype}; expected int64")


def _geometry(cv, block_rows):
    """(blocks, block_rows, heads, dim) and the element strides (block, row, head) of a cache
    [blocks, block_rows, heads, dim], or of [rows, heads, dim] cut into blocks of block_rows
    (None: one block)."""
    if cv.ndim == 4:
        blocks, rows, heads, dim = cv.shape
        if block_rows is not None and _integer(block_rows, "block_rows", 1) != rows:
            _fail(f"block_rows = {block_rows} but cache has shape {list(cv.shape)} ([blocks, "
                  "block_rows, heads, dim])")
        return (blocks, rows, heads, dim), (cv.stride(0), cv.stride(1), cv.stride(2))
    if cv.ndim == 3:
        total, heads, dim = cv.shape
        rows = max(total, 1) if block_rows is None else _integer(block_rows, "block_rows", 1)
        if total % rows:
            _fail(f"cache has {total} rows, not a multiple of block_rows = {rows}")
        return (total // rows, rows, heads, dim), (rows * cv.stride(0), cv.stride(0),
                                                   cv.stride(1))
    _fail(f"cache has shape {list(cv.shape)}; expected [blocks, block_rows, heads, dim] or "
          "[rows, heads, dim]")


def _scale_struct(scale, cache_dtype, cv, geometry):
    """The fai_scale of `scale` and the view that owns its memory: per token, float32 [blocks,
    block_rows, heads] (or [rows, heads] for a 3-D cache), written; fixed, [heads] or one number
    for every head, read."""
    struct = _lib.Scale()
    if scale is None:
        return struct, None
    blocks, rows, heads, _ = geometry
    if cache_dtype not in _QUANTIZED:
        _fail(f"scale given for a {cache_dtype} cache: only int8, float8_e4m3fn and float8_e5m2 "
              "caches take scales")
    if np.ndim(scale) >= 2:  # per token
        sv = _view(scale, "scale", _want_exact("scale", ("float32",)), writable=True)
        want = [blocks, rows, heads] if cv.ndim == 4 else [blocks * rows, heads]
        if list(sv.shape) != want:
            _fail(f"scale has shape {list(sv.shape)}; expected {want} (one scale per token and "
                  "head) or [heads] (fixed)")
        if cv.ndim == 4:
            batch, seq, head = sv.stride(0), sv.stride(1), sv.stride(2)
        else:
            batch, seq, head = rows * sv.stride(0), sv.stride(0), sv.stride(1)
        # a block of one row never moves along the rows; any nonzero stride says "per token"
        struct.stride_seq = seq or 1
        struct.stride_batch, struct.stride_head = batch, head
    else:
        sv = _scales_view(scale, "scale")
        if sv.ndim > 1 or (sv.ndim == 1 and sv.shape[0] not in (1, heads)):
            _fail(f"scale has shape {list(sv.shape)}; expected [{heads}] (fixed, one per head), "
                  f"one number, or {[blocks, rows, heads]} (per token)")
        struct.stride_head = sv.stride(0) if sv.ndim == 1 else 0
    struct.data = sv.ptr
    return struct, sv


def _check_outputs_apart(cv, sv, slot_view, scale_view, scale_written):
    """The cache (and per-token scales, written too) share no memory with what is read or with
    each other: a row written could change one still to be read."""
    _check_apart("cache", cv, [("src", sv), ("slots", slot_view), ("scale", scale_view)])
    if scale_written:
        _check_apart("scale", scale_view, [("src", sv), ("slots", slot_view)])


def cache_write(src, cache, slots, *, scale=None, block_rows=None, threads=None):
    """Writes the K (or V) rows of new tokens into a cache, in place (fai_cache_write).

    src: [tokens, heads, dim], float32, float16 or bfloat16 (float64 is read as float32).
    cache: [blocks, block_rows, heads, dim] (a page pool, or a dense [B, Skv, Hkv, D] cache),
        or [rows, heads, dim] cut into blocks of block_rows; float32, float16, bfloat16, int8,
        ml_dtypes.float8_e4m3fn or ml_dtypes.float8_e5m2. Written in place.
    slots: int [tokens]: token t goes to row slots[t] % block_rows of block
        slots[t] // block_rows; -1 skips the token.
    scale: for int8 and fp8 caches only, and required for them. float32 [blocks, block_rows,
        heads] ([rows, heads] for a 3-D cache): one scale per token and head, max |x| / qmax
        (qmax 127, 448, 57344), written here for each token written. Or [heads] (or one number):
        fixed scales, read; values beyond qmax x scale saturate. A value stands for scale x q.
    threads: None writes on libfai's default pool, a count on a pool of that many threads.

    Everything is checked before anything is written; errors raise FaiError naming the field.
    """
    write = _require(_lib.cache_write, "fai_cache_write")
    sv = _view(src, "src", _want_float("src"))
    if sv.ndim != 3:
        _fail(f"src has shape {list(sv.shape)}; expected [tokens, heads, dim]")
    cv = _view(cache, "cache", _want_cache, writable=True)
    geometry, strides = _geometry(cv, block_rows)
    blocks, rows, heads, dim = geometry
    tokens = sv.shape[0]
    if tuple(sv.shape[1:]) != (heads, dim):
        _fail(f"src has shape {list(sv.shape)}; the cache's rows are [{heads}, {dim}] (heads, "
              "dim)")
    slot_view = _view(slots, "slots", _want_int64)
    if slot_view.shape != (tokens,):
        _fail(f"slots has shape {list(slot_view.shape)}; expected [{tokens}] (one per token)")
    scale_struct, scale_view = _scale_struct(scale, cv.dtype, cv, geometry)
    _check_outputs_apart(cv, sv, slot_view, scale_view, np.ndim(scale) >= 2)

    src_tensor = _lib.Tensor()
    _fill_tensor(src_tensor, sv, 0, sv.stride(0), sv.stride(1))
    cache_tensor = _lib.Tensor(cv.ptr, _CACHE_DTYPES[cv.dtype], strides[0], strides[1],
                               strides[2], 1)
    slot_ptr = ctypes.cast(ctypes.c_void_p(slot_view.ptr), ctypes.POINTER(ctypes.c_int64))
    with _pool(threads) as pool:
        _check(write(tokens, heads, dim, ctypes.byref(src_tensor), slot_ptr, blocks, rows,
                     ctypes.byref(cache_tensor),
                     ctypes.byref(scale_struct) if scale_view is not None else None, pool))
    del sv, slot_view, scale_view  # the arrays (and any copies) lived until the write finished


# -- empty_cache ------------------------------------------------------------------------------------


class _CacheMemory:
    """Memory from fai_cache_alloc, exposed to numpy as bytes. Arrays made over it keep it as
    their base; when the last one is gone it is returned with fai_cache_free."""

    def __init__(self, address, nbytes):
        self.__array_interface__ = {"data": (address, False), "shape": (nbytes,),
                                    "typestr": "|u1", "version": 3}
        self.nbytes = nbytes
        self._finalizer = weakref.finalize(self, _lib.cache_free, address, nbytes)
        # at exit the process's memory goes back whole; arrays may still be in use by then
        self._finalizer.atexit = False


def empty_cache(shape, dtype, *, threads=None, torch=False):
    """A zeroed numpy array of `shape` and `dtype` on memory from fai_cache_alloc: aligned to
    2 MiB, transparent huge pages asked for, first touched by the threads of libfai's default
    pool (threads: a pool of that many). dtype: a numeric numpy dtype (bool, integers, floats,
    complex, ml_dtypes' bfloat16 and float8) in the machine's byte order, given as a dtype, as
    one of fai's names, read as fai reads them everywhere ("float16", "bfloat16", "int8",
    "float8_e4m3fn", "float8_e5m2", and the short "f32", "f16", "bf16", "i8", "e4m3", "e5m2",
    "float" = float32), or as any other name numpy reads, read as numpy reads it.
    The memory is released when the array and every view of it are gone. torch=True: a torch
    tensor over the same memory (of the torch dtype of the same name), which keeps it alive
    likewise."""
    as_torch = _flag(torch, "torch")
    shape, dt = _cache_shape(shape), _cache_dtype(dtype)
    target = _torch_dtype(dt) if as_torch else None  # refused before anything is allocated
    array = _empty_cache_array(shape, dt, threads)
    return _as_torch(array, target) if as_torch else array


def _cache_shape(shape):
    """shape (one integer, or a sequence of them) as a tuple of non-negative Python ints."""
    extents = (shape,) if _is_integer(shape) else shape
    try:
        extents = tuple(extents)
    except TypeError:
        _fail(f"shape = {shape!r}: expected a sequence of integers >= 0")
    if not all(_is_integer(e) and 0 <= int(e) <= INT64_MAX for e in extents):
        _fail(f"shape = {shape!r}: expected a sequence of integers from 0 to {INT64_MAX}")
    return tuple(int(e) for e in extents)


def _is_numeric(dt):
    return dt.kind in "biufc" or dt.type.__module__.split(".")[0] == "ml_dtypes"


def _cache_dtype(dtype):
    """The numpy dtype of a cache: a numeric one (Python objects, strings, dates and records are
    not what a cache holds), in the machine's byte order (what fai reads and writes)."""
    dt = _read_dtype(dtype)
    if not _is_numeric(dt):
        _fail(f"dtype = {dtype!r} ({dt.name}): expected a numeric dtype (bool, integers, floats, "
              "complex, or ml_dtypes' bfloat16 and float8)")
    if not dt.isnative:
        order = "big" if dt.byteorder == ">" else "little"
        _fail(f"dtype = {dtype!r}: {order}-endian, not the machine's byte order; fai reads and "
              f"writes native {dt.name}")
    return dt


def _read_dtype(dtype):
    """A dtype as the caller means it: fai's names mean what they mean everywhere in fai (its
    full names, float16, bfloat16, float8_e4m3fn, ..., and its short ones as fai's tools print
    them: "f16" is float16, "i8" int8, "float" float32, as in C), torch's dtypes by name, and
    anything else as numpy reads it ("d" is float64)."""
    if dtype is None:
        _fail("dtype = None: expected a dtype")
    if (isinstance(dtype, str) and (dtype in _FAI_DTYPES or dtype in _ALIASES)) or \
            type(dtype).__module__.split(".")[0] == "torch":
        return _numpy_dtype(_dtype_name(dtype, "dtype"))
    try:
        return np.dtype(dtype)
    except (TypeError, ValueError):
        _fail(f"dtype = {dtype!r}: not a dtype")


def _torch_dtype(dt):
    import torch
    target = getattr(torch, dt.name, None)
    if target is None or not isinstance(target, torch.dtype):
        _fail(f"dtype {dt.name} has no torch counterpart")
    return target


def _as_torch(array, target):
    """A torch tensor of dtype target over a numpy array's memory: through its bytes, since
    torch does not take ml_dtypes' arrays (bfloat16, float8) from numpy."""
    import torch
    raw = torch.from_numpy(array.reshape(-1).view(np.uint8))
    return raw.view(target).reshape(array.shape)


def _empty_cache_array(shape, dt, threads):
    alloc = _require(_lib.cache_alloc, "fai_cache_alloc")
    # Python ints: a product in int64 would wrap and allocate too little. numpy refuses an
    # array whose nonzero extents span more than int64's bytes, even an empty one
    span = math.prod(max(extent, 1) for extent in shape) * dt.itemsize
    if span > INT64_MAX:
        _fail(f"shape {list(shape)} of {dt.name} spans {span} bytes, more than an array can "
              f"address ({INT64_MAX})")
    nbytes = math.prod(shape) * dt.itemsize
    if nbytes == 0:
        _thread_count(threads)  # checked all the same
        return np.zeros(shape, dtype=dt)  # nothing to allocate
    address = ctypes.c_void_p()
    with _pool(threads) as pool:
        _check(alloc(nbytes, pool, ctypes.byref(address)))
    memory = _CacheMemory(address.value, nbytes)
    return np.asarray(memory).view(dt).reshape(shape)

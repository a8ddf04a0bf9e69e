"""ctypes view of libfai: the structs of include/fai.h field for field, and the functions.

The library is looked up in this order:
  1. the file named by the environment variable FAI_LIBRARY;
  2. libfai.so shipped inside this package (what `pip install` builds);
  3. build/libfai.so of the source tree this package sits in (running from a checkout);
  4. the system's libfai (ctypes.util.find_library).
"""
import ctypes
import ctypes.util
import os
import sys

c_int64 = ctypes.c_int64
c_int = ctypes.c_int  # the C enums (fai_dtype, fai_causal, ...) are int-sized
c_void_p = ctypes.c_void_p
c_int32_p = ctypes.POINTER(ctypes.c_int32)

# fai_status (the names come from the library: STATUS_NAMES below)
FAI_OK = 0

# fai_dtype (the last three: quantized K/V, each element scale x code)
DTYPE_F32, DTYPE_F16, DTYPE_BF16 = 0, 1, 2
DTYPE_I8, DTYPE_E4M3, DTYPE_E5M2 = 3, 4, 5
# fai_causal
CAUSAL_NONE, CAUSAL_BOTTOM_RIGHT, CAUSAL_TOP_LEFT = 0, 1, 2
# fai_mask_kind
MASK_NONE, MASK_KEEP, MASK_DROP, MASK_ADD, MASK_KEEP_BITS = 0, 1, 2, 3, 4
# fai_split
SPLIT_AUTO, SPLIT_UNITS, SPLIT_GREEDY = 0, 1, 2

MAX_HEAD_DIM = 576
MAX_WORKERS = 1024

# the defaults fai_problem_init sets (fai.h): values no computation of the field produces
SCALE_DEFAULT_BITS = 0x7FC00FA1  # a NaN of its own: scale = 1/sqrt(head_dim)
HEAD_DIM_V_DEFAULT = -1  # head_dim_v = head_dim
WINDOW_UNBOUNDED = -1


class Problem(ctypes.Structure):
    """fai_problem."""

    _fields_ = [
        ("batch", c_int64),
        ("heads_q", c_int64),
        ("heads_kv", c_int64),
        ("seq_q", c_int64),
        ("seq_kv", c_int64),
        ("head_dim", c_int64),
        ("head_dim_v", c_int64),
        ("q_dtype", c_int),
        ("k_dtype", c_int),
        ("v_dtype", c_int),
        ("o_dtype", c_int),
        ("scale", ctypes.c_float),
        ("causal", c_int),
        ("window_left", c_int64),
        ("window_right", c_int64),
        ("mask_kind", c_int),
        ("seqlens_q", c_int32_p),
        ("seqlens_kv", c_int32_p),
        ("cu_seqlens_q", c_int32_p),
        ("cu_seqlens_kv", c_int32_p),
        ("page_size", c_int64),
        ("num_pages", c_int64),
        ("pages_per_seq", c_int64),
        ("trust_block_table", c_int),
        ("workers", c_int64),
        ("threads", c_int64),
        ("split", c_int),
        ("tile_q", c_int64),
        ("tile_kv", c_int64),
        ("q_positions", c_int32_p),
        ("kv_positions", c_int32_p),
        ("ignore_tuning", c_int),
        ("round_p_bf16", c_int),
        ("softcap", ctypes.c_float),
        ("alibi", c_int),
        ("sinks", c_int),
        ("trust_scales", c_int),
        ("k_channel_scales", c_int),
        ("pipeline_tiles", c_int),
    ]


class Tensor(ctypes.Structure):
    """fai_tensor: element (b, s, h, d) at data[b*stride_batch + s*stride_seq + h*stride_head + d],
    strides in elements."""

    _fields_ = [
        ("data", c_void_p),
        ("dtype", c_int),
        ("stride_batch", c_int64),
        ("stride_seq", c_int64),
        ("stride_head", c_int64),
        ("stride_dim", c_int64),
    ]


class Mask(ctypes.Structure):
    """fai_mask: element (b, h, i, j) at data[b*stride_batch + h*stride_head + i*stride_q + j]."""

    _fields_ = [
        ("data", c_void_p),
        ("stride_batch", c_int64),
        ("stride_head", c_int64),
        ("stride_q", c_int64),
    ]


class Scale(ctypes.Structure):
    """fai_scale: the f32 scale of (b, s, h) of a quantized K or V at data[b*stride_batch +
    s*stride_seq + h*stride_head], strides in elements (0 broadcasts)."""

    _fields_ = [
        ("data", c_void_p),
        ("stride_batch", c_int64),
        ("stride_seq", c_int64),
        ("stride_head", c_int64),
    ]


class ChannelScale(ctypes.Structure):
    """fai_channel_scale: the f32 scale of channel d of kv head h of a quantized K at
    data[h*stride_head + d] (stride_head 0: the same for every head)."""

    _fields_ = [
        ("data", c_void_p),
        ("stride_head", c_int64),
    ]


class Tensors(ctypes.Structure):
    """fai_tensors."""

    _fields_ = [
        ("q", Tensor),
        ("k", Tensor),
        ("v", Tensor),
        ("o", Tensor),
        ("lse", Tensor),
        ("mask", Mask),
        ("block_table", c_int32_p),
        ("block_table_stride", c_int64),
        ("alibi_slopes", c_void_p),
        ("sinks", c_void_p),
        ("k_scale", Scale),
        ("v_scale", Scale),
        ("k_channel_scale", ChannelScale),
    ]


class PlanInfo(ctypes.Structure):
    """fai_plan_info."""

    _fields_ = [
        ("tile_q", c_int64),
        ("tile_kv", c_int64),
        ("tile_rows", c_int64),
        ("units", c_int64),
        ("workers", c_int64),
        ("threads", c_int64),
        ("total_weight", c_int64),
        ("imbalance", ctypes.c_double),
        ("split_kv", c_int),
        ("split_units", c_int64),
        ("partials", c_int64),
        ("visible_pairs", c_int64),
        ("workspace_bytes", ctypes.c_size_t),
        ("l1d_bytes", c_int64),
        ("l1d_capacity", c_int64),
        ("l2_bytes", c_int64),
        ("l2_capacity", c_int64),
        ("tile_fits", c_int),
        ("isa", ctypes.c_char_p),
        ("tile_source", ctypes.c_char_p),
        ("tile_class", ctypes.c_char_p),
        ("p_parts", c_int),
        ("pipeline_tiles", c_int),
    ]


class WorkerRange(ctypes.Structure):
    """fai_worker_range."""

    _fields_ = [
        ("unit_begin", c_int64),
        ("unit_end", c_int64),
        ("weight", c_int64),
        ("line_begin", c_int64),
        ("line_end", c_int64),
    ]


class UnitInfo(ctypes.Structure):
    """fai_unit_info."""

    _fields_ = [
        ("batch", c_int64),
        ("head_kv", c_int64),
        ("q_begin", c_int64),
        ("q_len", c_int64),
        ("kv_tile_begin", c_int64),
        ("kv_tiles", c_int64),
        ("head_q_begin", c_int64),
        ("heads_q", c_int64),
    ]


def _candidates():
    env = os.environ.get("FAI_LIBRARY")
    if env:
        return [env], True
    here = os.path.dirname(os.path.abspath(__file__))
    names = ["libfai.dylib", "fai.dll"] if sys.platform in ("darwin", "win32") else []
    paths = [os.path.join(here, "libfai.so")] + [os.path.join(here, n) for n in names]
    paths.append(os.path.join(os.path.dirname(os.path.dirname(here)), "build", "libfai.so"))
    found = ctypes.util.find_library("fai")
    if found:
        paths.append(found)
    return paths, False


def _load():
    paths, forced = _candidates()
    errors = []
    for path in paths:
        if os.sep in path and not os.path.exists(path):
            errors.append(f"{path}: no such file")
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as exc:
            errors.append(f"{path}: {exc}")
    how = ("FAI_LIBRARY names a file that cannot be loaded" if forced else
           "no libfai found; reinstall the package (pip install ./python builds it with CMake) "
           "or set FAI_LIBRARY to the path of libfai.so")
    raise ImportError(f"fai: {how} ({'; '.join(errors)})")


lib, path = _load()


def _declare(name, restype, argtypes):
    fn = getattr(lib, name)
    fn.restype = restype
    fn.argtypes = argtypes
    return fn


status_string = _declare("fai_status_string", ctypes.c_char_p, [c_int])
last_error = _declare("fai_last_error", ctypes.c_char_p, [])
problem_init = _declare("fai_problem_init", None, [ctypes.POINTER(Problem)])
tensor_bshd = _declare("fai_tensor_bshd", Tensor, [c_void_p, c_int, c_int64, c_int64, c_int64])
plan_create = _declare("fai_plan_create", c_int,
                       [ctypes.POINTER(Problem), ctypes.POINTER(c_void_p)])
plan_free = _declare("fai_plan_free", None, [c_void_p])
plan_workspace_size = _declare("fai_plan_workspace_size", ctypes.c_size_t, [c_void_p])
run = _declare("fai_run", c_int,
               [c_void_p, ctypes.POINTER(Tensors), c_void_p, ctypes.c_size_t])
# fai_check_tensors: fai_run's tensor checks alone (libfai builds that have it)
check_tensors = (_declare("fai_check_tensors", c_int, [c_void_p, ctypes.POINTER(Tensors)])
                 if hasattr(lib, "fai_check_tensors") else None)
# fai_plan_wake: the pool's threads woken while a run's arguments are converted (libfai builds
# that have it)
plan_wake = (_declare("fai_plan_wake", None, [c_void_p])
             if hasattr(lib, "fai_plan_wake") else None)
plan_get_info = _declare("fai_plan_get_info", c_int, [c_void_p, ctypes.POINTER(PlanInfo)])
plan_get_worker = _declare("fai_plan_get_worker", c_int,
                           [c_void_p, c_int64, ctypes.POINTER(WorkerRange)])
plan_get_unit = _declare("fai_plan_get_unit", c_int,
                         [c_void_p, c_int64, ctypes.POINTER(UnitInfo)])
merge_states = _declare("fai_merge_states", c_int,
                        [c_int64, ctypes.POINTER(Tensor), ctypes.POINTER(Tensor), c_int64, c_int64,
                         c_int64, c_int64, ctypes.POINTER(Tensor), ctypes.POINTER(Tensor)])
apply_sinks = _declare("fai_apply_sinks", c_int,
                       [c_void_p, c_int64, c_int64, c_int64, c_int64, ctypes.POINTER(Tensor),
                        ctypes.POINTER(Tensor)])
alibi_slopes = _declare("fai_alibi_slopes", c_int, [c_int64, c_void_p])
pool_create = _declare("fai_pool_create", c_int, [c_int64, ctypes.POINTER(c_void_p)])
pool_free = _declare("fai_pool_free", None, [c_void_p])
plan_set_pool = _declare("fai_plan_set_pool", None, [c_void_p, c_void_p])
cpu_count = _declare("fai_cpu_count", c_int64, [])
cpu_cache_bytes = _declare("fai_cpu_cache_bytes", c_int64, [c_int])
# the KV-cache functions (libfai builds that have them)
cache_write = (_declare("fai_cache_write", c_int,
                        [c_int64, c_int64, c_int64, ctypes.POINTER(Tensor),
                         ctypes.POINTER(c_int64), c_int64, c_int64, ctypes.POINTER(Tensor),
                         ctypes.POINTER(Scale), c_void_p])
               if hasattr(lib, "fai_cache_write") else None)
cache_alloc = (_declare("fai_cache_alloc", c_int,
                        [ctypes.c_size_t, c_void_p, ctypes.POINTER(c_void_p)])
               if hasattr(lib, "fai_cache_alloc") else None)
cache_free = (_declare("fai_cache_free", None, [c_void_p, ctypes.c_size_t])
              if hasattr(lib, "fai_cache_alloc") else None)


def status_name(status):
    """The name of a fai_status value, from the library (fai_status_string): "FAI_OK",
    "FAI_ERR_INVALID_ARG", ...; "FAI_ERR_UNKNOWN" for a value that is not a status."""
    return status_string(int(status)).decode()


# fai_status value -> name, read from the library once (the codes run from FAI_OK = 0 up)
STATUS_NAMES = {}
while status_name(len(STATUS_NAMES)) != "FAI_ERR_UNKNOWN":
    STATUS_NAMES[len(STATUS_NAMES)] = status_name(len(STATUS_NAMES))


def _check_layout():
    """fai_problem_init clears the whole struct and sets the defaults: run it on a buffer with a
    sentinel tail and compare with the bytes this module's Problem should hold, so a library
    built from another version of fai.h (fields added or moved) is refused at import instead of
    misreading every problem."""
    size = ctypes.sizeof(Problem)
    buf = (ctypes.c_ubyte * (size + 64))(*([0xA5] * (size + 64)))
    problem_init(ctypes.cast(buf, ctypes.POINTER(Problem)))
    want = Problem()
    want.q_dtype, want.k_dtype, want.v_dtype, want.o_dtype = (DTYPE_F32, DTYPE_F16, DTYPE_F16,
                                                              DTYPE_F32)
    want.head_dim_v = HEAD_DIM_V_DEFAULT
    ctypes.memmove(ctypes.addressof(want) + Problem.scale.offset,
                   ctypes.byref(ctypes.c_uint32(SCALE_DEFAULT_BITS)), 4)
    want.window_left = want.window_right = WINDOW_UNBOUNDED
    got = bytes(buf)
    if got[:size] != bytes(want) or got[size:] != bytes([0xA5] * 64):
        raise ImportError(
            f"fai: {path} was built from a fai.h whose fai_problem differs from this package's "
            "(another version of the library): rebuild it from the same source tree "
            "(pip install ./python), or point FAI_LIBRARY at a matching libfai.so")


_check_layout()

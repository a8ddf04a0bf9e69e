"""Array interop: numpy arrays, torch CPU tensors and anything with __array__ or __dlpack__ as
views (pointer, dtype, shape, element strides) that libfai reads in place, and the outputs fai
allocates."""
import sys

import numpy as np

from . import _lib
from ._errors import _fail
from ._scalars import _fail_float32, _float32_scalar, _is_real


_FLOAT_DTYPES = {"float32": _lib.DTYPE_F32, "float16": _lib.DTYPE_F16,
                 "bfloat16": _lib.DTYPE_BF16}
# K and V only: each element stands for scale x code, the scales given as k_scale / v_scale
_QUANT_DTYPES = {"int8": _lib.DTYPE_I8, "float8_e4m3fn": _lib.DTYPE_E4M3,
                 "float8_e5m2": _lib.DTYPE_E5M2}
_FAI_DTYPES = dict(_FLOAT_DTYPES, **_QUANT_DTYPES)
_ALIASES = {"f32": "float32", "fp32": "float32", "float": "float32", "f16": "float16",
            "fp16": "float16", "half": "float16", "bf16": "bfloat16", "i8": "int8",
            "e4m3": "float8_e4m3fn", "e4m3fn": "float8_e4m3fn", "e5m2": "float8_e5m2"}
_FLOAT_NAMES = "float32, float16 or bfloat16"
_KV_NAMES = "float32, float16, bfloat16, int8, float8_e4m3fn or float8_e5m2"
# dtypes numpy has through the ml_dtypes package only
_ML_DTYPES = ("bfloat16", "float8_e4m3fn", "float8_e5m2")


def _is_torch(obj):
    # torch is only asked for once the caller has imported it (a tensor cannot exist before);
    # isinstance takes subclasses of torch.Tensor too
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def _dtype_name(dt, what="dtype"):
    """'float32', 'float16', 'bfloat16' (or another name) for a string, numpy or torch dtype. A
    string is taken as given: one of fai's names or aliases, else what numpy reads it as ("f" is
    float32, "F" complex64, "B" uint8)."""
    if dt is None:
        _fail(f"{what} = None: expected a dtype")
    if isinstance(dt, str) and (dt in _ALIASES or dt in _FAI_DTYPES):
        return _ALIASES.get(dt, dt)
    if type(dt).__module__.split(".")[0] == "torch":
        return str(dt).replace("torch.", "")
    try:
        return np.dtype(dt).name
    except (TypeError, ValueError):
        _fail(f"{what} = {dt!r}: not a dtype")


def _numpy_dtype(name):
    if name in _ML_DTYPES:
        try:
            import ml_dtypes
        except ImportError:
            _fail(f"a {name} numpy array needs the ml_dtypes package (pip install ml_dtypes)")
        return np.dtype(getattr(ml_dtypes, name))
    try:
        return np.dtype(name)
    except (TypeError, ValueError):
        _fail(f"dtype {name} has no numpy counterpart")


def _fai_dtype(name, what, quantized=False):
    """The fai_dtype of a dtype name; quantized: K or V, which may also be int8 or fp8."""
    if name in _FLOAT_DTYPES or (quantized and name in _QUANT_DTYPES):
        return _FAI_DTYPES[name]
    _fail(f"{what} dtype {name} is not {_KV_NAMES if quantized else _FLOAT_NAMES}")


# -- array views ------------------------------------------------------------------------------------

class _View:
    """A pointer, dtype name, shape and element strides of a numpy array or torch tensor, the
    bytes per element, the object that owns the memory (kept alive while the view is used), and
    the dtype the caller gave (`given`: dtype unless the view is a converted copy)."""

    __slots__ = ("ptr", "dtype", "shape", "strides", "owner", "torch", "itemsize", "given")

    def __init__(self, ptr, dtype, shape, strides, owner, is_torch, itemsize, given):
        self.ptr = ptr
        self.dtype = dtype
        self.itemsize = itemsize
        self.given = given
        # torch sizes and strides are ints already (a run converts four of them: decode calls are
        # short enough for this to show)
        self.shape = tuple(shape) if is_torch else tuple(int(s) for s in shape)
        self.strides = tuple(strides) if is_torch else tuple(int(s) for s in strides)
        self.owner = owner
        self.torch = is_torch

    @property
    def ndim(self):
        return len(self.shape)

    def stride(self, i):
        # a dimension of extent 1 never moves: its stride is irrelevant, report 0
        return self.strides[i] if self.shape[i] > 1 else 0

    def describe(self):
        return f"shape {list(self.shape)} {self.dtype}"

    def byte_range(self):
        """(first, end): the addresses of the lowest byte the view reaches and one past its
        highest; None when it has no elements (it reaches nothing)."""
        low = high = 0  # element offsets
        for extent, st in zip(self.shape, self.strides):
            if extent == 0:
                return None
            if st < 0:
                low += st * (extent - 1)
            else:
                high += st * (extent - 1)
        return self.ptr + low * self.itemsize, self.ptr + (high + 1) * self.itemsize


def _byte_range(obj):
    """The byte range of a _View, or of a C-contiguous numpy array (the copies fai makes of
    per-head values and channel scales)."""
    if isinstance(obj, _View):
        return obj.byte_range()
    if obj.size == 0:
        return None
    return obj.ctypes.data, obj.ctypes.data + obj.nbytes


def _check_apart(name, view, inputs):
    """Refuses an output whose bytes overlap those of an input (name, view or array), by the
    ranges each reaches: fai would read values it has already overwritten."""
    mine = view.byte_range()
    if mine is None:
        return
    for other, obj in inputs:
        theirs = _byte_range(obj) if obj is not None else None
        if theirs is not None and mine[0] < theirs[1] and theirs[0] < mine[1]:
            what = (obj.describe() if isinstance(obj, _View)
                    else f"shape {list(obj.shape)} {obj.dtype.name}")
            _fail(f"{name} ({view.describe()}) shares memory with {other} ({what}): fai reads "
                  f"{other} while it writes {name}, which must share memory with no input")


def _layout_ok(shape, strides, need_last_contiguous, writable=False):
    if 0 in tuple(shape):
        return True  # nothing is read or written
    for extent, st in zip(shape, strides):
        if extent > 1 and (st < 0 or (writable and st == 0)):
            return False
    if need_last_contiguous and shape and shape[-1] > 1 and strides[-1] != 1:
        return False
    return True


def _may_overlap(shape, strides):
    """True when two elements of a view (strides >= 0) may share memory: taken by increasing
    stride, each dimension must step past all that the smaller ones reach (a zero stride on a
    dimension longer than 1 is the simplest overlap). Written through, such a view would get
    some elements twice, from different rows."""
    reach = 0  # the largest offset the dimensions taken so far reach
    for stride, extent in sorted((st, n) for n, st in zip(shape, strides) if n > 1):
        if stride <= reach:
            return True
        reach += stride * (extent - 1)
    return False


def _check_destination(name, shape, strides):
    if 0 not in tuple(shape) and _may_overlap(shape, strides):
        _fail(f"{name} has elements that overlap in memory (shape {list(shape)}, element strides "
              f"{list(strides)}): fai writes each element once; pass an array of distinct "
              "elements")


def _size(array):
    return array.numel() if hasattr(array, "numel") else array.size


def _check_int_range(name, src, target):
    """Refuses an integer array (numpy or torch) with values outside target's range, before it is
    converted (the conversion would wrap them)."""
    if target in ("int32", "int64") and _size(src):
        info = np.iinfo(target)
        lo, hi = int(src.min()), int(src.max())
        if lo < info.min or hi > info.max:
            _fail(f"{name} holds values outside {target} ({lo} .. {hi})")


# the float dtypes wider than float32: converted to it, a value may overflow or round to 0
_WIDE_FLOATS = ("float64", "float96", "float128", "longdouble")


def _check_float_rounding(name, src, dtype, converted, nonzero):
    """Refuses a conversion of src (numpy or torch, of dtype) to float32, converted, that turned
    a finite value into inf and, with nonzero (scales), a nonzero value into 0."""
    if dtype not in _WIDE_FLOATS or not _size(src):
        return
    inf = float("inf")
    overflow = (abs(converted) == inf) & (abs(src) < inf)
    underflow = ((converted == 0) & (src != 0)) if nonzero else None
    for found, to_zero in ((overflow, False), (underflow, True)):
        if found is not None and bool(found.any()):
            index = tuple(int(i) for i in np.argwhere(np.asarray(found))[0])
            label = f"{name}[{', '.join(map(str, index))}]" if index else name
            _fail_float32(label, float(src[index]), rounds_to_zero=to_zero)


_TORCH_DTYPE_NAMES = {}  # torch.dtype -> its name ("float32", ...), filled as dtypes are seen


def _resolved_torch(t, name, writable):
    """t with torch's lazy negation or conjugation applied (a copy); refused for a destination,
    whose copy fai would write and drop while the caller's tensor stays as it was."""
    if hasattr(t, "is_neg") and (t.is_neg() or t.is_conj()):
        if writable:
            kind = "negative" if t.is_neg() else "conjugate"
            _fail(f"{name} is a {kind} view (torch's lazy negation or conjugation, is_neg() / "
                  "is_conj()): fai writes in place and cannot write through one; pass a "
                  "resolved tensor (.resolve_neg(), .resolve_conj() or .clone()) and read the "
                  "result from it")
        t = t.resolve_neg().resolve_conj()
    return t


def _check_strided(t, name):
    """Refuses a sparse (or other non-strided) tensor: it has no pointer and strides to read."""
    if t.layout is not sys.modules["torch"].strided:
        layout = str(t.layout).replace("torch.", "")
        _fail(f"{name} has layout {layout}; fai reads strided (dense) tensors: pass "
              f"{name}.to_dense()")


def _check_no_grad(t, name):
    """Refuses a destination autograd tracks (a view of a tensor that requires grad requires
    grad too): fai's writes would bypass it, and gradients through the tensor would be wrong."""
    if t.requires_grad:
        _fail(f"{name} requires grad: fai writes in place, behind autograd; pass a tensor "
              "autograd does not track")


# what a view of no elements points to when torch gives it no memory (data_ptr() 0): like
# numpy's empty arrays, a valid address that nothing is read from or written to
_NOWHERE = np.zeros(64, dtype=np.uint8)


def _from_torch(t, name, want, last_contiguous, writable, nonzero):
    if t.device.type != "cpu":
        _fail(f"{name} is on device {t.device}; fai computes on CPU tensors")
    _check_strided(t, name)
    if writable:
        _check_no_grad(t, name)
    t = _resolved_torch(t, name, writable)
    dtype = given = _TORCH_DTYPE_NAMES.get(t.dtype)
    if dtype is None:
        dtype = given = _TORCH_DTYPE_NAMES.setdefault(t.dtype,
                                                      str(t.dtype).replace("torch.", ""))
    convert = want(dtype)
    if convert is not None and convert != dtype:
        if writable:
            _fail(f"{name} has dtype {dtype}; expected {convert}")
        import torch

        source = t.detach()
        _check_int_range(name, source, convert)
        t = source.to(getattr(torch, convert))
        _check_float_rounding(name, source, dtype, t, nonzero)
        dtype = convert
    if not _layout_ok(t.shape, t.stride(), last_contiguous, writable):
        if writable:
            _fail(f"{name}: the last dimension must be contiguous, no stride may be 0")
        t = t.contiguous()
    if writable:
        _check_destination(name, t.shape, t.stride())
    ptr = t.data_ptr() or _NOWHERE.ctypes.data
    return _View(ptr, dtype, t.shape, t.stride(), t, True, t.element_size(), given)


def _from_numpy(a, name, want, last_contiguous, writable, nonzero):
    if writable and not a.flags.writeable:
        _fail(f"{name} is read-only")
    if not a.dtype.isnative:
        if writable:
            _fail(f"{name} is not in native byte order")
        a = a.astype(a.dtype.newbyteorder("="))
    if not a.flags.aligned:  # C reads elements at addresses that are multiples of their size
        if writable:
            _fail(f"{name} is not aligned: its address or strides are not multiples of its "
                  f"{a.dtype.name} elements' size ({a.itemsize} bytes)")
        a = a.copy()
    dtype = given = a.dtype.name
    convert = want(dtype)
    if convert is not None and convert != dtype:
        if writable:
            _fail(f"{name} has dtype {dtype}; expected {convert}")
        _check_int_range(name, a, convert)
        with np.errstate(over="ignore", under="ignore"):  # refused below if a value changed so
            converted = a.astype(convert)
        _check_float_rounding(name, a, dtype, converted, nonzero)
        a, dtype = converted, convert
    item = a.itemsize
    strides = []
    ok = True
    for extent, st in zip(a.shape, a.strides):
        if extent <= 1:
            strides.append(0)
        elif st % item:
            ok = False
            break
        else:
            strides.append(st // item)
    if not ok or not _layout_ok(a.shape, strides, last_contiguous, writable):
        if writable:
            _fail(f"{name}: the last dimension must be contiguous and the strides positive")
        a = np.ascontiguousarray(a)
        strides = [st // item if n > 1 else 0 for n, st in zip(a.shape, a.strides)]
    if writable:
        _check_destination(name, a.shape, strides)
    return _View(a.__array_interface__["data"][0], dtype, a.shape, strides, a, False, a.itemsize,
                 given)


def _view(obj, name, want, last_contiguous=True, writable=False, nonzero=False):
    """A _View of obj. want(dtype_name) returns the dtype to use (dtype_name itself when usable
    as it is, another name to convert to) or raises; a conversion that would change a value is
    refused (nonzero: also a nonzero float that becomes 0, for scales). Copies only when the
    layout or the dtype needs it, never for writable outputs (fai would write the copy)."""
    if isinstance(obj, _View):
        return obj
    if _is_torch(obj):
        return _from_torch(obj, name, want, last_contiguous, writable, nonzero)
    if isinstance(obj, np.ndarray):
        return _from_numpy(obj, name, want, last_contiguous, writable, nonzero)
    if writable:
        _fail(f"{name} must be a numpy array or a torch tensor (got {type(obj).__name__})")
    arr = None
    if hasattr(obj, "__dlpack__"):
        try:
            arr = np.from_dlpack(obj)  # zero-copy for CPU producers
        except (TypeError, ValueError, RuntimeError, BufferError, AttributeError) as exc:
            if not hasattr(obj, "__array__"):
                _fail(f"{name}: cannot read it through DLPack ({exc})")
    if arr is None:
        arr = _numbers(obj, name)
    return _from_numpy(arr, name, want, last_contiguous, writable, nonzero)


def _numbers(obj, name):
    """obj (a sequence, a scalar, anything numpy reads) as a numpy array of numbers; a ragged
    list or anything else numpy cannot read as one raises FaiError naming it."""
    try:
        arr = np.asarray(obj)
    except Exception as exc:  # noqa: BLE001 - any failure means "not an array"
        _fail(f"{name}: not an array ({type(obj).__name__}: {exc})")
    if arr.dtype == object:
        _fail(f"{name}: not an array of numbers ({type(obj).__name__})")
    return arr


def _want_dtypes(name, accepted, expected):
    """A check for _view: a dtype in `accepted` is read as it is, float64 as float32."""
    def want(dtype):
        if dtype in accepted:
            return dtype
        if dtype == "float64":
            return "float32"
        _fail(f"{name} has dtype {dtype}; expected {expected}")
    return want


def _want_float(name):
    return _want_dtypes(name, _FLOAT_DTYPES, _FLOAT_NAMES)


def _want_kv(name):
    """K or V: a float dtype (float64 read as float32) or a quantized one, read as it is."""
    return _want_dtypes(name, _FAI_DTYPES, _KV_NAMES)


def _want_exact(name, allowed):
    def want(dtype):
        if dtype in allowed:
            return dtype
        _fail(f"{name} has dtype {dtype}; expected {' or '.join(allowed)}")
    return want


_BYTE_MASK = ("bool", "uint8", "int8")
_FLOATS = ("float16", "float32", "float64", "bfloat16")


def _want_f32(name, expected):
    """A check for _view: any float dtype, used as float32."""
    def want(dtype):
        if dtype in _FLOATS:
            return "float32"
        _fail(f"{name} has dtype {dtype}; expected {expected}")
    return want


_want_add_mask = _want_f32("mask_add", "a float dtype (it is used as float32)")


def _scales_view(scale, name, last_contiguous=True):
    """The view of quantization scales: one number (Python's or numpy's) or an array of a float
    dtype, read as float32; a bool is refused, and so is a finite value float32 turns into inf or
    a nonzero one it turns into 0. libfai names a scale that is not finite or not > 0."""
    if isinstance(scale, (bool, np.bool_)):
        _fail(f"{name} = {scale!r}: expected float32 scales")
    if _is_real(scale):
        scale = np.float32(_float32_scalar(scale, name, "float32 scales", nonzero=True))
    return _view(scale, name, _want_f32(name, "float32 scales"), last_contiguous=last_contiguous,
                 nonzero=True)


def _want_int32(name):
    def want(dtype):
        if dtype == "int32":
            return dtype
        if dtype in ("int8", "int16", "int64", "uint8", "uint16", "uint32", "uint64"):
            return "int32"
        _fail(f"{name} has dtype {dtype}; expected int32")
    return want


def _lengths(obj, name, count):
    """A contiguous int32 numpy copy of a lengths array (the plan copies it too)."""
    if obj is None:
        return None
    arr = _torch_integers(obj, name) if _is_torch(obj) else _numbers(obj, name)
    if arr.size == 0 and arr.dtype == np.float64 and not isinstance(obj, np.ndarray):
        arr = arr.astype(np.int32)  # an empty list: numpy's float64 is not the caller's dtype
    if arr.dtype.kind not in "iu":
        _fail(f"{name} has dtype {arr.dtype}; expected integers (int32)")
    if arr.ndim != 1 or (count is not None and arr.shape[0] != count):
        want = f"[{count}]" if count is not None else "one-dimensional"
        _fail(f"{name} has shape {list(arr.shape)}; expected {want}")
    _check_int_range(name, arr, "int32")
    return np.require(arr, np.int32, ["C", "A"])  # contiguous and aligned: C reads it


def _torch_integers(t, name):
    """A torch tensor of integers as a numpy array (floats are refused by their torch name:
    bfloat16 has no numpy counterpart)."""
    _check_strided(t, name)
    t = t.detach().cpu().resolve_neg()
    if t.is_floating_point() or t.is_complex() or str(t.dtype) == "torch.bool":
        _fail(f"{name} has dtype {str(t.dtype).replace('torch.', '')}; expected integers "
              "(int32)")
    return t.numpy()


def _int32_ptr(arr):
    if arr is None:
        return None
    return arr.ctypes.data_as(_lib.c_int32_p)


def _alloc(like_torch, shape, dtype):
    if like_torch:
        import torch

        return torch.empty(shape, dtype=getattr(torch, dtype))
    return np.empty(shape, dtype=_numpy_dtype(dtype))


def _fill_tensor(t, view, batch, seq, head):
    t.data = view.ptr
    t.dtype = _FAI_DTYPES[view.dtype]
    t.stride_batch = batch
    t.stride_seq = seq
    t.stride_head = head
    t.stride_dim = 1


# -- options ----------------------------------------------------------------------------------------


def _expect(view, name, shape, what):
    ok = view.ndim == len(shape) and all(w is None or d == w for d, w in zip(view.shape, shape))
    if not ok:
        want = ", ".join("*" if w is None else str(w) for w in shape)
        _fail(f"{name} has shape {list(view.shape)}; expected [{want}] {what}")

"""merge_states: (O, LSE) of attention over disjoint key sets merged into those over their union
(fai_merge_states), with sinks applied once to the merged result (fai_apply_sinks)."""
import ctypes

from . import _lib
from ._arrays import (_FLOAT_DTYPES, _FLOAT_NAMES, _alloc, _dtype_name, _expect, _fill_tensor,
                      _view, _want_exact, _want_f32, _want_float)
from ._errors import _check, _fail
from ._options import _head_values

__all__ = ["merge_states"]


def _parts(parts, name):
    """The arrays of a list or tuple of parts, as a list. One array is refused: iterating it
    would take its first axis (the batch) for the parts."""
    if not isinstance(parts, (list, tuple)):
        kind = type(parts).__name__
        _fail(f"{name}: got {kind}, expected a list or tuple of arrays, one per part (one array "
              f"is not split into parts)")
    return list(parts)


def _fill_o_lse(t_o, t_l, o, lse, packed):
    """The fai_tensors of an O and its LSE: [B, S, H, D] and [B, H, S], or packed [rows, H, D]
    and [H, rows]."""
    if packed:
        _fill_tensor(t_o, o, 0, o.stride(0), o.stride(1))
        _fill_tensor(t_l, lse, 0, lse.stride(1), lse.stride(0))
    else:
        _fill_tensor(t_o, o, o.stride(0), o.stride(1), o.stride(2))
        _fill_tensor(t_l, lse, lse.stride(0), lse.stride(2), lse.stride(1))
    t_l.dtype = _lib.DTYPE_F32


def merge_states(o_parts, lse_parts, *, out_dtype=None, sinks=None):
    """Merges attention results over disjoint key sets: (O, LSE) over their union.

    o_parts: a list (or tuple) of O [B, S, H, D] (or packed [rows, H, D]), each float32, float16
    or bfloat16; lse_parts: the matching LSE float32 [B, H, S] (or [H, rows]), as
    attention(return_lse=True) gives them. Returns O in the first part's dtype (or out_dtype) and
    LSE float32, shaped like the parts. A part whose LSE is -inf contributes nothing; rows where
    every part is -inf get O = 0, LSE = -inf. sinks (float32 [H]): the parts were computed
    without sinks, and the merged result gets them once (fai_apply_sinks); parts computed with
    sinks would each count them.
    """
    o_list = _parts(o_parts, "o_parts")
    l_list = _parts(lse_parts, "lse_parts")
    if not o_list:
        _fail("o_parts is empty")
    if len(o_list) != len(l_list):
        _fail(f"{len(o_list)} o_parts but {len(l_list)} lse_parts")
    ov = [_view(o, f"o_parts[{i}]", _want_float(f"o_parts[{i}]")) for i, o in enumerate(o_list)]
    lv = [_view(x, f"lse_parts[{i}]", _want_f32(f"lse_parts[{i}]", "float32"),
                last_contiguous=False) for i, x in enumerate(l_list)]
    shape = ov[0].shape
    if len(shape) not in (3, 4):
        _fail(f"o_parts[0] has shape {list(shape)}; expected [B, S, H, D] or [rows, H, D]")
    packed = len(shape) == 3
    if packed:
        B, (S, H, D) = 1, shape
        lse_shape = [H, S]
    else:
        B, S, H, D = shape
        lse_shape = [B, H, S]
    tensors_o = (_lib.Tensor * len(ov))()
    tensors_l = (_lib.Tensor * len(lv))()
    for i, (o, x) in enumerate(zip(ov, lv)):
        if list(o.shape) != list(shape):
            _fail(f"o_parts[{i}] has shape {list(o.shape)}; o_parts[0] has {list(shape)}")
        _expect(x, f"lse_parts[{i}]", lse_shape, "([B, H, S], or [H, rows] for packed parts)")
        _fill_o_lse(tensors_o[i], tensors_l[i], o, x, packed)
    o_dtype = _dtype_name(out_dtype, "out_dtype") if out_dtype is not None else ov[0].dtype
    if o_dtype not in _FLOAT_DTYPES:
        _fail(f"out_dtype = {out_dtype!r} ({o_dtype}): expected {_FLOAT_NAMES}")
    out = _alloc(ov[0].torch, list(shape), o_dtype)
    lse = _alloc(ov[0].torch, lse_shape, "float32")
    oo = _view(out, "out", _want_exact("out", (o_dtype,)), writable=True)
    lo = _view(lse, "lse", _want_exact("lse", ("float32",)), writable=True, last_contiguous=False)
    t_o, t_l = _lib.Tensor(), _lib.Tensor()
    _fill_o_lse(t_o, t_l, oo, lo, packed)
    _check(_lib.merge_states(len(ov), tensors_o, tensors_l, B, S, H, D, ctypes.byref(t_o),
                             ctypes.byref(t_l)))
    if sinks is not None:
        arr = _head_values(sinks, "sinks", H)
        _check(_lib.apply_sinks(arr.ctypes.data, B, S, H, D, ctypes.byref(t_o),
                                ctypes.byref(t_l)))
    return out, lse

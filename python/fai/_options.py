"""The keyword arguments of Plan and attention checked and turned into libfai's problem fields."""
import math

import numpy as np

from . import _lib
from ._arrays import (_QUANT_DTYPES, _check_float_rounding, _check_strided, _dtype_name,
                      _fai_dtype, _int32_ptr, _is_torch, _lengths, _numbers, _scales_view)
from ._errors import _fail
from ._scalars import (INT64_MAX, INT64_MIN, _fail_float32, _flag, _float32_scalar, _integer,
                       _is_integer, _real)


def _causal(causal, causal_top_left):
    causal, causal_top_left = _flag(causal, "causal"), _flag(causal_top_left, "causal_top_left")
    if causal and causal_top_left:
        _fail("causal and causal_top_left exclude each other")
    if causal_top_left:
        return _lib.CAUSAL_TOP_LEFT
    return _lib.CAUSAL_BOTTOM_RIGHT if causal else _lib.CAUSAL_NONE


def _pair(value, name, form, note):
    """The two items of a pair option: a tuple, a list or a 1-D array (numpy or torch) of
    length 2. Sets, dicts and other iterables are refused: their order is not the caller's."""
    if isinstance(value, (tuple, list)):
        items = list(value)
    elif getattr(value, "ndim", None) == 1 and hasattr(value, "tolist"):
        items = value.tolist()  # numpy's and torch's scalars as Python numbers
    else:
        items = None
    if items is None or len(items) != 2:
        _fail(f"{name} = {value!r}: expected {form}, a tuple, list or 1-D array of length 2 "
              f"({note})")
    return items


def _window(window):
    unbounded = _lib.WINDOW_UNBOUNDED
    if window is None:
        return unbounded, unbounded
    left, right = _pair(window, "window", "(left, right)",
                        "-1 or None leaves a side unbounded")
    sides = []
    for side in (left, right):
        if side is None:
            sides.append(unbounded)
            continue
        if not _is_integer(side) or not INT64_MIN <= int(side) <= INT64_MAX:
            _fail(f"window = {window!r}: expected two integers from {INT64_MIN} to "
                  f"{INT64_MAX} (-1 or None for unbounded)")
        sides.append(int(side))
    return sides[0], sides[1]


def _scale(scale):
    """The float32 scale to give libfai, or None to keep fai_problem_init's default. A given
    scale is used as given (0 weighs every visible key alike); one that float32 would turn into
    0 or inf is refused, as the command line refuses it, rather than changed."""
    if scale is None:
        return None
    s = _real(scale, "scale", "a number (None: 1/sqrt(head_dim))")
    with np.errstate(over="ignore", under="ignore"):
        f = float(np.float32(s))
    if not math.isfinite(s) or not math.isfinite(f):
        _fail(f"scale = {scale!r} is not a finite float32 (None: 1/sqrt(head_dim))")
    if s != 0 and f == 0:
        _fail_float32("scale", scale, rounds_to_zero=True)
    return s


def _count(value, name):
    if value is None:
        return 0
    return _integer(value, name, 0, note=" (None: automatic)")


_SPLITS = {"auto": _lib.SPLIT_AUTO, "units": _lib.SPLIT_UNITS, "greedy": _lib.SPLIT_GREEDY}
_MASK_KINDS = {None: _lib.MASK_NONE, "none": _lib.MASK_NONE, "keep": _lib.MASK_KEEP,
               "drop": _lib.MASK_DROP, "add": _lib.MASK_ADD, "bits": _lib.MASK_KEEP_BITS}
_KIND_NAMES = {_lib.MASK_NONE: None, _lib.MASK_KEEP: "keep", _lib.MASK_DROP: "drop",
               _lib.MASK_ADD: "add", _lib.MASK_KEEP_BITS: "bits"}
_MASK_ARGS = {_lib.MASK_KEEP: "mask", _lib.MASK_DROP: "mask_drop", _lib.MASK_ADD: "mask_add",
              _lib.MASK_KEEP_BITS: "mask_bits"}


def _mask_kind_of(mask, mask_drop, mask_add, mask_bits=None):
    given = [(k, m) for k, m in ((_lib.MASK_KEEP, mask), (_lib.MASK_DROP, mask_drop),
                                 (_lib.MASK_ADD, mask_add), (_lib.MASK_KEEP_BITS, mask_bits))
             if m is not None]
    if len(given) > 1:
        _fail(" and ".join(_MASK_ARGS[k] for k, _ in given) + " exclude each other")
    return given[0] if given else (_lib.MASK_NONE, None)


def _mask_kind_value(mask_kind):
    """The fai_mask_kind of a mask_kind option (None or a name, in any case)."""
    key = mask_kind.lower() if isinstance(mask_kind, str) else mask_kind
    if not (key is None or isinstance(key, str)) or key not in _MASK_KINDS:
        _fail(f"mask_kind = {mask_kind!r}: expected None, 'keep', 'drop', 'add' or 'bits'")
    return _MASK_KINDS[key]


def _softcap(softcap):
    """softcap as a float32 for the problem (None: 0, off); libfai judges its sign and whether it
    is finite."""
    if softcap is None:
        return 0.0
    # a nonzero cap that rounds to 0 would switch soft-capping off: refused
    return _float32_scalar(softcap, "softcap", "a number (None or 0: no soft-capping)",
                           nonzero=True)


def _real_array(values, name, expected):
    """values (numpy, torch or a sequence) as a numpy array of real numbers; `expected` names
    the dtype and shapes wanted, for the message."""
    if _is_torch(values):
        _check_strided(values, name)
        values = values.detach().cpu().resolve_neg()
        if str(values.dtype) == "torch.bfloat16":
            values = values.float()  # exact, and numpy cannot take torch's bfloat16
        values = values.numpy()
    arr = _numbers(values, name)
    if arr.dtype.kind not in "fiu" or arr.dtype == np.bool_:
        _fail(f"{name} has dtype {arr.dtype}: expected {expected}")
    return arr


def _float32_values(arr, name):
    """A real array of scales or per-head values as a contiguous float32 array; a finite value
    that float32 turns into inf, or a nonzero one it turns into 0, is refused."""
    with np.errstate(over="ignore", under="ignore"):
        converted = np.require(arr, np.float32, ["C", "A"])  # contiguous and aligned for C
    _check_float_rounding(name, arr, arr.dtype.name, converted, nonzero=True)
    return converted


def _head_values(values, name, heads):
    """A float32 [heads] array of per-head values (ALiBi slopes, sink logits), contiguous."""
    arr = _real_array(values, name, "float32 [heads_q]")
    if arr.shape != (heads,):
        _fail(f"{name} has shape {list(arr.shape)}; expected [{heads}] (one per query head)")
    return _float32_values(arr, name)


def _channel_scale_values(values, heads_kv, head_dim):
    """K's per-channel scales as a float32 array, contiguous, and its head stride: [Hkv, D], or
    [D] (the same channels for every kv head, stride 0)."""
    arr = _real_array(values, "k_channel_scale", "float32 [Hkv, D] or [D]")
    if arr.shape == (heads_kv, head_dim):
        return _float32_values(arr, "k_channel_scale"), head_dim
    if arr.shape == (head_dim,):
        return _float32_values(arr, "k_channel_scale"), 0
    _fail(f"k_channel_scale has shape {list(arr.shape)}; expected [{heads_kv}, {head_dim}] "
          f"(kv heads, channels) or [{head_dim}] (the same for every kv head)")


# -- scales of a quantized K or V -------------------------------------------------------------------

def _scale_forms(lead, labels):
    """The shapes a K's (V's) scales may take, for messages."""
    return (f"per token [{', '.join(labels)}] = {list(lead)}, per kv head [{lead[-1]}], or one "
            "for the tensor [] or [1]")


def _kv_scale(scale, name, kv, lead, labels, axes):
    """The scales of a quantized K or V (name 'k_scale' or 'v_scale', kv the tensor's view) as
    (view, (stride_batch, stride_seq, stride_head)) for fai_scale; None for a float K (V) without
    scales. lead: the tensor's leading dims without the head dim ([B, Skv, Hkv], [num_pages,
    page_size, Hkv] or packed [rows, Hkv]), labels their names and axes their fai_scale axes
    ('batch', 'seq', 'head'). The scales' shape broadcasts to lead as numpy broadcasts: dims of
    1 and missing leading dims repeat (stride 0)."""
    tensor = name.split("_")[0]
    if kv.dtype not in _QUANT_DTYPES:
        if scale is not None:
            _fail(f"{name} given, but {tensor} has dtype {kv.dtype}: scales belong to an int8, "
                  f"float8_e4m3fn or float8_e5m2 {tensor}")
        return None
    if scale is None:
        _fail(f"{tensor} has dtype {kv.dtype}: {name} is required (float32 scales, "
              f"{_scale_forms(lead, labels)})")
    view = _scales_view(scale, name, last_contiguous=False)
    shape = view.shape
    if view.ndim > len(lead) or any(d not in (1, w) for d, w in zip(shape[::-1], lead[::-1])):
        _fail(f"{name} has shape {list(shape)}; expected a shape that broadcasts to {tensor}'s "
              f"{_scale_forms(lead, labels)}")
    strides = dict.fromkeys(("batch", "seq", "head"), 0)
    for i in range(1, view.ndim + 1):
        strides[axes[-i]] = view.stride(view.ndim - i)
    return view, (strides["batch"], strides["seq"], strides["head"])


# -- the fields of a plan's problem, group by group (Plan.__init__) ------------------------------

def _set_shape(pb, batch, heads_q, heads_kv, seq_q, seq_kv, head_dim, head_dim_v, page_size,
               num_pages, pages_per_seq):
    """The counts into pb; returns them by name (seq_kv and head_dim_v resolved)."""
    ints = {name: _integer(value, name) for name, value in (
        ("batch", batch), ("heads_q", heads_q), ("heads_kv", heads_kv), ("seq_q", seq_q),
        ("head_dim", head_dim), ("page_size", page_size), ("num_pages", num_pages),
        ("pages_per_seq", pages_per_seq))}
    if ints["page_size"] > 0:
        ints["seq_kv"] = _paged_seq_kv(seq_kv, ints["pages_per_seq"], ints["page_size"])
    elif seq_kv is None:
        _fail("seq_kv = None: expected an integer (only a paged plan may leave it out)")
    else:
        ints["seq_kv"] = _integer(seq_kv, "seq_kv")
    ints["head_dim_v"] = _integer(ints["head_dim"] if head_dim_v is None else head_dim_v,
                                  "head_dim_v")
    if ints["head_dim_v"] < 1:  # libfai reads -1 as "head_dim": never pass a computed one on
        _fail(f"head_dim_v = {ints['head_dim_v']} is not a head dimension (>= 1; None: "
              "head_dim)")
    for name in ("batch", "heads_q", "heads_kv", "seq_q", "seq_kv", "head_dim", "head_dim_v",
                 "page_size", "num_pages", "pages_per_seq"):
        setattr(pb, name, ints[name])
    return ints


def _paged_seq_kv(seq_kv, pages_per_seq, page_size):
    """A paged plan's seq_kv: libfai does not read it (a sequence's keys are its pages, at most
    pages_per_seq x page_size, its length given by seqlens_kv), so a value given must be that
    product; one that is not would be ignored without a word."""
    span = pages_per_seq * page_size
    if seq_kv is not None and (not _is_integer(seq_kv) or int(seq_kv) != span):
        _fail(f"seq_kv = {seq_kv!r}: a paged plan's keys are its pages, pages_per_seq x "
              f"page_size = {pages_per_seq} x {page_size} = {span}; give that or None")
    if not INT64_MIN <= span <= INT64_MAX:  # the problem's field would wrap it
        _fail(f"pages_per_seq x page_size = {pages_per_seq} x {page_size} = {span} is past "
              "int64")
    return span


def _set_dtypes(pb, q_dtype, k_dtype, v_dtype, out_dtype):
    """The four dtypes into pb (v_dtype None: k_dtype); returns their names by tensor."""
    names = {}
    for field, dt in (("q", q_dtype), ("k", k_dtype),
                      ("v", k_dtype if v_dtype is None else v_dtype), ("o", out_dtype)):
        names[field] = _dtype_name(dt, f"{field if field != 'o' else 'out'}_dtype")
        setattr(pb, field + "_dtype", _fai_dtype(names[field], field if field != "o" else "out",
                                                 quantized=field in ("k", "v")))
    return names


def _set_scores(pb, scale, round_p_bf16, softcap, alibi, sinks, causal, causal_top_left, window,
                mask_kind):
    """How the scores are formed and masked: scale, rounding of P, modifiers, masks."""
    given_scale = _scale(scale)
    if given_scale is not None:
        pb.scale = given_scale
    pb.round_p_bf16 = _flag(round_p_bf16, "round_p_bf16")
    pb.softcap = _softcap(softcap)
    pb.alibi, pb.sinks = _flag(alibi, "alibi"), _flag(sinks, "sinks")
    pb.causal = _causal(causal, causal_top_left)
    pb.window_left, pb.window_right = _window(window)
    pb.mask_kind = _mask_kind_value(mask_kind)


def _set_lengths(pb, ints, seqlens_q, seqlens_kv, cu_seqlens_q, cu_seqlens_kv, q_positions,
                 kv_positions):
    """The length and position arrays into pb (int32 copies, which the returned dict keeps alive
    until the plan has copied them)."""
    if cu_seqlens_q is not None and seqlens_q is not None:
        _fail("seqlens_q and cu_seqlens_q exclude each other")
    if cu_seqlens_kv is not None and (seqlens_kv is not None or ints["page_size"] > 0):
        _fail("cu_seqlens_kv excludes seqlens_kv and paged K/V")
    if (q_positions is None) != (kv_positions is None):
        _fail("q_positions and kv_positions: give both or neither")
    b = ints["batch"]
    lens = {"seqlens_q": _lengths(seqlens_q, "seqlens_q", b),
            "seqlens_kv": _lengths(seqlens_kv, "seqlens_kv", b),
            "cu_seqlens_q": _lengths(cu_seqlens_q, "cu_seqlens_q", b + 1),
            "cu_seqlens_kv": _lengths(cu_seqlens_kv, "cu_seqlens_kv", b + 1),
            "q_positions": _lengths(q_positions, "q_positions", b),
            "kv_positions": _lengths(kv_positions, "kv_positions", b)}
    for name, arr in lens.items():
        setattr(pb, name, _int32_ptr(arr))
    return lens


def _set_execution(pb, trust_block_table, trust_scales, threads, workers, split, tile):
    """How the plan runs: what it trusts, threads, workers, the split and a tile override."""
    pb.trust_block_table = _flag(trust_block_table, "trust_block_table")
    pb.trust_scales = _flag(trust_scales, "trust_scales")
    pb.threads = _count(threads, "threads")
    pb.workers = _count(workers, "workers")
    if not isinstance(split, str) or split not in _SPLITS:
        _fail(f"split = {split!r}: expected 'auto', 'units' or 'greedy'")
    pb.split = _SPLITS[split]
    if tile is not None:
        tq, tkv = _pair(tile, "tile", "(tile_q, tile_kv)", "0 or None: fai chooses that side")
        pb.tile_q = _count(tq, "tile_q")
        pb.tile_kv = _count(tkv, "tile_kv")

"""attention and Plan on numpy arrays, torch CPU tensors and anything with __array__ or
__dlpack__, passed to libfai by pointer and element strides (no copy when the layout allows one
to be avoided). The arrays are read through _arrays, the keyword arguments checked in _options,
and libfai's errors raised as FaiError by _errors; a run's arrays are bound to fai_tensors by
_binding; merge_states is in _merge."""
import ctypes
import threading
import weakref

import numpy as np

from . import _lib
from ._arrays import _alloc, _dtype_name, _lengths, _view, _want_float, _want_int32, _want_kv
from ._binding import _RunBinding
from ._errors import FaiError, _check, _fail
from ._options import (_KIND_NAMES, _MASK_ARGS, _mask_kind_of, _mask_kind_value, _set_dtypes,
                       _set_execution, _set_lengths, _set_scores, _set_shape)
from ._scalars import INT_MAX, INT_MIN, _flag, _integer

__all__ = ["FaiError", "Plan", "attention", "alibi_slopes", "cpu_count", "cpu_cache_bytes",
           "library_path"]


def cpu_count():
    """Online CPUs as libfai sees them (the default pool's size)."""
    return int(_lib.cpu_count())


def cpu_cache_bytes(level):
    """The size in bytes of the CPU's cache of `level` as libfai reads it: 1 (L1 data) and 2 (L2),
    per core, the ones the planner sizes tiles by; 3 (L3, shared; 0 if unknown); else 0."""
    return int(_lib.cpu_cache_bytes(_integer(level, "level", INT_MIN, INT_MAX)))


def library_path():
    """The libfai file this package loaded."""
    return _lib.path


# -- dtypes -----------------------------------------------------------------------------------------


# the most query heads a plan takes (fai_problem.heads_q): slopes for more serve no plan
_MAX_HEADS = 1 << 16


def alibi_slopes(heads):
    """The standard ALiBi slopes of `heads` query heads (fai_alibi_slopes), float32 [heads];
    heads at most 65536, a plan's limit."""
    # checked before the array is allocated: a huge count would fail in numpy, not by its name
    heads = _integer(heads, "heads", 1, _MAX_HEADS, note=" (a plan's limit of query heads)")
    out = np.empty(heads, dtype=np.float32)
    _check(_lib.alibi_slopes(heads, out.ctypes.data))
    return out


# -- the plan ---------------------------------------------------------------------------------------

_tls = threading.local()


def _scratch(size):
    """A per-thread workspace buffer, grown as needed (attention() without a Plan)."""
    buf = getattr(_tls, "ws", None)
    if buf is None or buf.size < size:
        buf = np.empty(max(size, 1), dtype=np.uint8)
        _tls.ws = buf
    return buf


class Plan(_RunBinding):
    """A libfai plan: the problem validated, the tile shape chosen, the work split. Reuse it for
    every call with the same shapes, lengths and options (the layers of a model, or repeated
    runs); it owns a workspace buffer.

    Shapes (DESIGN: Q [B, Sq, Hq, D], K [B, Skv, Hkv, D], V [B, Skv, Hkv, Dv]):
      batch, heads_q, heads_kv, seq_q, seq_kv, head_dim, head_dim_v (None: head_dim).
    With cu_seqlens_q (cu_seqlens_kv) the queries (keys) are packed: seq_q (seq_kv) is the number
    of rows of the packed tensor [rows, H, D]. With page_size > 0, K and V are page pools
    [num_pages, page_size, Hkv, D] read through a block table given to run(); seqlens_kv is then
    required and seq_kv is None or pages_per_seq x page_size (libfai reads no other).
    Options as in attention(), plus mask_kind (None, 'keep', 'drop', 'add': the mask itself is
    given to run()), q_dtype, k_dtype, v_dtype (None: k_dtype), out_dtype, split ('auto',
    'units', 'greedy'), trust_block_table (True: runs do not check the block-table entries
    they read, which must then lie inside the pool), trust_scales (True: runs do not check a
    quantized K/V's scales, which must then be finite and > 0; a bad one gives wrong values,
    never a bad access), and q_positions / kv_positions (int32 [B], both or neither: the
    global positions of each sequence's first query and first key when K/V are a shard of a
    longer sequence; causal and window masks then compare global positions).

    Score modifiers: softcap (a number, None/0 off), alibi and sinks (True: the slopes and
    sink logits are given to run()), mask_kind 'bits' (a bit-packed keep mask, mask_bits).

    k_dtype and v_dtype may also be 'int8', 'float8_e4m3fn' ('e4m3') or 'float8_e5m2'
    ('e5m2'): quantized K / V, whose scales are given to run() as k_scale / v_scale.
    k_channel_scales (True): a quantized K also has a scale per kv head and channel, given to
    run() as k_channel_scale.

    Plan.like(q, k, v, **options) makes the plan that attention(q, k, v, **options) would use.
    """

    def __init__(self, batch, heads_q, heads_kv, seq_q, seq_kv, head_dim, head_dim_v=None, *,
                 q_dtype="float32", k_dtype="float16", v_dtype=None, out_dtype="float32",
                 causal=False, causal_top_left=False, window=None, mask_kind=None, scale=None,
                 seqlens_q=None, seqlens_kv=None, cu_seqlens_q=None, cu_seqlens_kv=None,
                 page_size=0, num_pages=0, pages_per_seq=0, threads=None, workers=None,
                 split="auto", tile=None, trust_block_table=False, q_positions=None,
                 kv_positions=None, round_p_bf16=False, softcap=None, alibi=False,
                 sinks=False, trust_scales=False, k_channel_scales=False):
        self._handle = None
        pb = _lib.Problem()
        _lib.problem_init(ctypes.byref(pb))
        ints = _set_shape(pb, batch, heads_q, heads_kv, seq_q, seq_kv, head_dim, head_dim_v,
                          page_size, num_pages, pages_per_seq)
        names = _set_dtypes(pb, q_dtype, k_dtype, v_dtype, out_dtype)
        _set_scores(pb, scale, round_p_bf16, softcap, alibi, sinks, causal, causal_top_left,
                    window, mask_kind)
        self._alibi, self._sinks = bool(alibi), bool(sinks)
        lens = _set_lengths(pb, ints, seqlens_q, seqlens_kv, cu_seqlens_q, cu_seqlens_kv,
                            q_positions, kv_positions)
        _set_execution(pb, trust_block_table, trust_scales, threads, workers, split, tile)
        pb.k_channel_scales = _flag(k_channel_scales, "k_channel_scales")
        self._k_channels = bool(k_channel_scales)

        handle = ctypes.c_void_p()
        _check(_lib.plan_create(ctypes.byref(pb), ctypes.byref(handle)))
        self._handle = handle
        self._finalizer = weakref.finalize(self, _lib.plan_free, handle)
        self._ws_size = int(_lib.plan_workspace_size(handle))
        self._ws = None  # allocated by the first run (attention() lends its own)
        self._ws_lock = threading.Lock()
        # calls into libfai in progress (ctypes lets other threads run meanwhile): close()
        # waits for them before it frees the plan, and refuses new ones once it has begun
        self._uses = 0
        self._closing = False
        self._uses_changed = threading.Condition(threading.Lock())

        # what run() checks the arrays against
        self._packed_q = lens["cu_seqlens_q"] is not None
        self._packed_kv = lens["cu_seqlens_kv"] is not None
        self._paged = ints["page_size"] > 0
        self._shape = ints
        self._dtypes = names
        self._mask_kind = pb.mask_kind

        def longest(cu, plain, default):
            if cu is not None:
                return int(np.max(np.diff(cu))) if cu.size > 1 else 0
            if plain is not None:
                return int(plain.max()) if plain.size else 0
            return default

        self._max_q = longest(lens["cu_seqlens_q"], lens["seqlens_q"], ints["seq_q"])
        self._max_kv = longest(lens["cu_seqlens_kv"], lens["seqlens_kv"], ints["seq_kv"])

    @classmethod
    def like(cls, q, k, v, *, causal=False, causal_top_left=False, window=None, mask=None,
             mask_drop=None, mask_add=None, scale=None, seqlens_q=None, seqlens_kv=None,
             cu_seqlens_q=None, cu_seqlens_kv=None, block_table=None, threads=None,
             workers=None, out_dtype=None, split="auto", tile=None, mask_kind=None,
             q_positions=None, kv_positions=None, round_p_bf16=False, softcap=None,
             alibi_slopes=None, sinks=None, mask_bits=None, k_scale=None, v_scale=None,
             k_channel_scale=None):
        """The plan for attention(q, k, v, **options) (mask, block_table, alibi_slopes and sinks
        are looked at for their kind and shape only, k_scale, v_scale and k_channel_scale only
        for whether they are given; give them again to run())."""
        qv = _view(q, "q", _want_float("q"))
        kv = _view(k, "k", _want_kv("k"))
        vv = _view(v, "v", _want_kv("v"))
        kind, _ = _mask_kind_of(mask, mask_drop, mask_add, mask_bits)
        name = _KIND_NAMES[kind]
        if mask_kind is not None:
            if kind != _lib.MASK_NONE and _mask_kind_value(mask_kind) != kind:
                _fail(f"mask_kind = {mask_kind!r} does not match the {_MASK_ARGS[kind]} given")
            name = mask_kind
        shape = _infer(qv, kv, vv, seqlens_q, seqlens_kv, cu_seqlens_q, cu_seqlens_kv,
                       block_table)
        return cls(**shape, q_dtype=qv.dtype, k_dtype=kv.dtype, v_dtype=vv.dtype,
                   out_dtype=out_dtype if out_dtype is not None else qv.dtype, causal=causal,
                   causal_top_left=causal_top_left, window=window,
                   mask_kind=name,
                   scale=scale, seqlens_q=seqlens_q, seqlens_kv=seqlens_kv,
                   cu_seqlens_q=cu_seqlens_q, cu_seqlens_kv=cu_seqlens_kv, threads=threads,
                   workers=workers, split=split, tile=tile, q_positions=q_positions,
                   kv_positions=kv_positions, round_p_bf16=round_p_bf16, softcap=softcap,
                   alibi=alibi_slopes is not None, sinks=sinks is not None,
                   k_channel_scales=k_channel_scale is not None)

    # -- inspection --

    def _acquire(self):
        """The C plan for a call, counted as in use until _release(); refused once closed."""
        with self._uses_changed:
            if self._handle is None or self._closing or not self._finalizer.alive:
                _fail("the plan is closed")
            self._uses += 1
        return self._handle

    def _release(self):
        with self._uses_changed:
            self._uses -= 1
            if not self._uses:
                self._uses_changed.notify_all()

    @property
    def info(self):
        """fai_plan_info as a dict: tile_q, tile_kv, tile_rows, units, workers, threads,
        total_weight, imbalance, split_kv, split_units, partials, visible_pairs,
        workspace_bytes, l1d_bytes, l1d_capacity, l2_bytes, l2_capacity, tile_fits, isa,
        tile_source ('user', 'tuned' or 'heuristic'), tile_class, p_parts (how PV multiplies P:
        0 in f32, 2 as bf16 hi + lo, 1 rounded to bf16), pipeline_tiles (kv tiles in flight per
        unit: 1 or 2 on the matrix engine, 1 elsewhere)."""
        size = ctypes.sizeof(_lib.PlanInfo)
        buf = (ctypes.c_ubyte * (size + 64))(*([0xA5] * (size + 64)))  # a tail to check
        handle = self._acquire()
        try:
            _check(_lib.plan_get_info(handle, ctypes.cast(buf, ctypes.POINTER(_lib.PlanInfo))))
        finally:
            self._release()
        if bytes(buf[size:]) != bytes([0xA5] * 64):
            _fail("libfai's fai_plan_info is larger than this package's: the library and the "
                  "package come from different versions of fai.h")
        info = _lib.PlanInfo.from_buffer_copy(bytes(buf[:size]))
        out = {name: getattr(info, name) for name, _ in _lib.PlanInfo._fields_}
        out["split_kv"] = bool(out["split_kv"])
        out["tile_fits"] = bool(out["tile_fits"])
        for name in ("isa", "tile_source", "tile_class"):
            value = getattr(info, name)
            out[name] = value.decode() if value else None
        return out

    def worker_ranges(self):
        """Each worker's unit range, weight and line range (fai_plan_get_worker), as dicts."""
        workers = self.info["workers"]
        ranges = []
        handle = self._acquire()
        try:
            for w in range(workers):
                r = _lib.WorkerRange()
                _check(_lib.plan_get_worker(handle, w, ctypes.byref(r)))
                ranges.append({name: getattr(r, name) for name, _ in _lib.WorkerRange._fields_})
        finally:
            self._release()
        return ranges

    def unit(self, index):
        """Unit `index` (fai_plan_get_unit) as a dict."""
        u = _lib.UnitInfo()
        index = _integer(index, "index")
        handle = self._acquire()
        try:
            _check(_lib.plan_get_unit(handle, index, ctypes.byref(u)))
        finally:
            self._release()
        return {name: getattr(u, name) for name, _ in _lib.UnitInfo._fields_}

    @property
    def workspace_bytes(self):
        return self._ws_size

    def close(self):
        """Frees the plan now (it is freed with the object otherwise). Runs in progress on other
        threads finish first; runs started after close() raise FaiError."""
        if self._handle is None:
            return
        with self._uses_changed:
            self._closing = True
            while self._uses:
                self._uses_changed.wait()
        self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        s = self._shape
        return (f"fai.Plan(batch={s['batch']}, heads_q={s['heads_q']}, heads_kv={s['heads_kv']}, "
                f"seq_q={s['seq_q']}, seq_kv={s['seq_kv']}, head_dim={s['head_dim']}, "
                f"head_dim_v={s['head_dim_v']}{', closed' if not self._finalizer.alive else ''})")

    # -- run --

    def run(self, q, k, v, *, mask=None, mask_drop=None, mask_add=None, block_table=None,
            return_lse=False, out=None, mask_bits=None, alibi_slopes=None, sinks=None,
            k_scale=None, v_scale=None, k_channel_scale=None):
        """Attention of the plan's problem on these arrays: O, or (O, LSE) with return_lse.
        q, k, v (and out, if given) must have the plan's shapes and dtypes; mask (keep),
        mask_drop, mask_add or mask_bits must be the plan's mask_kind; block_table is int32
        [B, pages]; alibi_slopes and sinks (float32 [Hq]) exactly when the plan has them;
        k_scale and v_scale (float32) exactly when k and v are quantized, k_channel_scale exactly
        when the plan has k_channel_scales (as in attention()); out shares no memory with any of
        them. Runs may overlap on several threads; close() waits for those in progress."""
        handle = self._acquire()
        try:
            return_lse = _flag(return_lse, "return_lse")
            if _lib.plan_wake:  # the pool's threads wake while the arguments below are converted
                _lib.plan_wake(handle)
            qv = _view(q, "q", _want_float("q"))
            kv = _view(k, "k", _want_kv("k"))
            vv = _view(v, "v", _want_kv("v"))
            for name, view in (("q", qv), ("k", kv), ("v", vv)):
                if view.dtype != self._dtypes[name]:
                    _fail(f"{name} has dtype {view.given}; the plan's is {self._dtypes[name]}")
            t = _lib.Tensors()
            self._fill_inputs(t, qv, kv, vv)
            # what C reads, by the caller's names: the arrays (and copies) must live until the
            # run has finished, and out may share memory with none of them
            inputs = [("q", qv), ("k", kv), ("v", vv),
                      *self._fill_scales(t, kv, vv, k_scale, v_scale),
                      *self._fill_head_arrays(t, alibi_slopes, sinks),
                      ("k_channel_scale", self._fill_channel_scales(t, k_channel_scale)),
                      self._fill_mask_of(t, mask, mask_drop, mask_add, mask_bits),
                      ("block_table", self._fill_block_table(t, block_table))]
            out, lse = self._fill_outputs(t, qv, out, return_lse, inputs)
            self._execute(handle, t)
            del inputs
            return (out, lse) if return_lse else out
        finally:
            self._release()

    def _execute(self, handle, t):
        if self._ws_lock.acquire(blocking=False):
            try:
                if self._ws is None or self._ws.size < self._ws_size:
                    self._ws = np.empty(max(self._ws_size, 1), dtype=np.uint8)
                ws = self._ws
                _check(_lib.run(handle, ctypes.byref(t), ws.ctypes.data, ws.size))
            finally:
                self._ws_lock.release()
        else:  # another thread runs this plan: give this run its own workspace
            ws = np.empty(max(self._ws_size, 1), dtype=np.uint8)
            _check(_lib.run(handle, ctypes.byref(t), ws.ctypes.data, ws.size))


def _infer(qv, kv, vv, seqlens_q, seqlens_kv, cu_seqlens_q, cu_seqlens_kv, block_table):
    """The shape fields of a problem from the arrays (as fai run reads its .npy files)."""
    packed_q = cu_seqlens_q is not None
    packed_kv = cu_seqlens_kv is not None
    paged = block_table is not None
    if packed_kv and paged:
        _fail("cu_seqlens_kv and block_table exclude each other")
    if packed_q:
        if qv.ndim != 3:
            _fail(f"q has shape {list(qv.shape)}; with cu_seqlens_q it is packed: [rows, Hq, D]")
        cu = _lengths(cu_seqlens_q, "cu_seqlens_q", None)
        if cu.size < 1:
            _fail("cu_seqlens_q is empty; expected [B + 1] prefix sums starting at 0")
        B = cu.size - 1
        Sq, Hq, D = qv.shape
    else:
        if qv.ndim != 4:
            extra = " (a packed q needs cu_seqlens_q)" if qv.ndim == 3 else ""
            _fail(f"q has shape {list(qv.shape)}; expected [B, Sq, Hq, D]{extra}")
        B, Sq, Hq, D = qv.shape
    if packed_kv:
        cu = _lengths(cu_seqlens_kv, "cu_seqlens_kv", None)
        if cu.size != B + 1:
            _fail(f"cu_seqlens_kv has shape [{cu.size}]; expected [{B + 1}] (B + 1)")
        want = "[rows, Hkv, D] (packed by cu_seqlens_kv)"
        if kv.ndim != 3:
            _fail(f"k has shape {list(kv.shape)}; expected {want}")
        if vv.ndim != 3:
            _fail(f"v has shape {list(vv.shape)}; expected {want}")
        Skv, Hkv = kv.shape[0], kv.shape[1]
        dims = [("rows", 0), ("heads_kv", 1)]
    else:
        want = "[num_pages, page_size, Hkv, D] (a page pool)" if paged else "[B, Skv, Hkv, D]"
        if kv.ndim != 4:
            _fail(f"k has shape {list(kv.shape)}; expected {want}")
        if vv.ndim != 4:
            _fail(f"v has shape {list(vv.shape)}; expected {want.replace('D]', 'Dv]')}")
        if not paged and kv.shape[0] != B:
            _fail(f"k has shape {list(kv.shape)}, which does not match q's batch {B}")
        Skv, Hkv = kv.shape[1], kv.shape[2]
        dims = ([("num_pages", 0), ("page_size", 1), ("heads_kv", 2)] if paged else
                [("batch", 0), ("seq_kv", 1), ("heads_kv", 2)])
    if kv.shape[-1] != D:
        _fail(f"k has shape {list(kv.shape)}, which does not match q's head_dim {D}")
    for label, i in dims:
        if vv.shape[i] != kv.shape[i]:
            _fail(f"v has shape {list(vv.shape)}, which does not match k's {label} "
                  f"{kv.shape[i]}")
    shape = dict(batch=B, heads_q=Hq, heads_kv=Hkv, seq_q=Sq, seq_kv=Skv, head_dim=D,
                 head_dim_v=vv.shape[-1])
    if paged:
        if seqlens_kv is None:
            _fail("block_table needs seqlens_kv (paged K/V have no implicit length)")
        bt = _view(block_table, "block_table", _want_int32("block_table"))
        if bt.ndim != 2 or bt.shape[0] != B:
            _fail(f"block_table has shape {list(bt.shape)}; expected [B, max_pages] with "
                  f"q's batch {B}")
        if kv.shape[1] < 1:
            _fail(f"k has shape {list(kv.shape)}: a page pool [num_pages, page_size, Hkv, D] "
                  "needs page_size >= 1")
        shape.update(page_size=kv.shape[1], num_pages=kv.shape[0], pages_per_seq=bt.shape[1],
                     seq_kv=bt.shape[1] * kv.shape[1])
    return shape


# -- the functions ----------------------------------------------------------------------------------

def attention(q, k, v, *, causal=False, causal_top_left=False, window=None, mask=None,
              mask_drop=None, mask_add=None, scale=None, seqlens_q=None, seqlens_kv=None,
              cu_seqlens_q=None, cu_seqlens_kv=None, block_table=None, return_lse=False,
              threads=None, workers=None, out_dtype=None, out=None, split="auto", tile=None,
              q_positions=None, kv_positions=None, round_p_bf16=False, softcap=None,
              alibi_slopes=None, sinks=None, mask_bits=None, k_scale=None, v_scale=None,
              k_channel_scale=None):
    """O = softmax(scale * Q K^T + mask) V, and LSE = log sum exp of the logits.

    q [B, Sq, Hq, D], k [B, Skv, Hkv, D], v [B, Skv, Hkv, Dv] (numpy arrays, torch CPU tensors or
    anything with __array__ / __dlpack__; float32, float16 or bfloat16, each its own). Strided
    layouts (BHSD views, slices of a bigger cache) are read in place when the last dimension is
    contiguous. Returns O [B, Sq, Hq, Dv] in q's dtype (or out_dtype, or into `out`, which may
    share no memory with an input, nor be a torch tensor that requires grad), and with
    return_lse also LSE float32 [B, Hq, Sq]; torch tensors in give torch tensors out.

    scale: the logit scale, used as given (0 weighs every visible key alike; a nonzero value
    that rounds to 0 in float32 is refused); None: 1/sqrt(D).
    causal: bottom-right aligned (query i sees keys j <= i + Skv - Sq); causal_top_left:
    PyTorch's is_causal. window=(left, right) around the same diagonal, -1/None unbounded
    (with causal or causal_top_left, right is 0 whatever is given, as in fai.h).
    mask (bool/uint8, True attends), mask_drop (True is masked) or mask_add (float, added to the
    scaled logit), shaped [Sq, Skv], [B, Sq, Skv] or [B, Hq, Sq, Skv] (dimensions of 1
    broadcast). seqlens_q / seqlens_kv: int [B] valid lengths of a padded batch.
    cu_seqlens_q / cu_seqlens_kv: int [B + 1] prefix sums of a packed batch, whose q (k, v) are
    then [rows, H, D] (and O [rows, Hq, Dv], LSE [Hq, rows]). block_table: int [B, max_pages];
    k and v are then page pools [num_pages, page_size, Hkv, D] and seqlens_kv is required.
    threads: threads to run on (None or 0: automatic, the pool's threads, fewer for a small
    problem); fai runs on at most its pool's threads, fai.cpu_count(), and a larger count runs
    on those. workers: pieces of the split (None or 0: one per online CPU; the result does not
    depend on threads). tile: (tile_q, tile_kv) overrides (0 or None leaves a side to fai).
    window and tile take a tuple, a list or a 1-D array of two (a set or a dict is refused: its
    order is not the caller's). Rows past a length and fully masked rows give O = 0,
    LSE = -inf. q_positions / kv_positions: int [B], both or neither: the global positions of
    each sequence's first query and first key when k and v are a shard of a longer sequence
    (causal and window then compare global positions; merge the shards with merge_states).
    round_p_bf16: where fai multiplies P in bfloat16 for O = P V (plan info p_parts: the matrix
    engine, or bf16 dot products for all-bf16 Q, K and V), round P to bfloat16 first, as torch
    and vLLM do: faster, and O may differ by up to 2^-8 sum p|v| more than the documented
    tolerances (False: P held to 2^-16; where PV runs in f32, P is exact anyway).

    Score modifiers: softcap=c (S <- c tanh(S / c) after the scale, before masks; None or 0:
    off); alibi_slopes (float32 [Hq]: S -= slope_h |key position - query position|, positions
    as for causal; alibi_slopes(Hq) gives the standard ones); sinks (float32 [Hq]: each row's
    denominator gains exp(sink_h), the LSE includes it, a row that sees nothing gets LSE =
    sink_h); mask_bits (uint8, one bit per key, bit j of byte j // 8 least significant first,
    1 attends: [Sq, ceil(Skv / 8)], [B, Sq, ...] or [B, Hq, Sq, ...]).

    Quantized K and V: k (v) may also be int8 (numpy or torch), ml_dtypes' float8_e4m3fn or
    float8_e5m2 (torch.float8_e4m3fn, torch.float8_e5m2), each element standing for
    scale x code; k_scale (v_scale) then gives the scales, float32, in a shape that broadcasts
    to k's leading dims without the head dim: [B, Skv, Hkv] (one per token and kv head), [Hkv]
    (one per kv head), or [] / [1] / a number (one for the tensor); for page pools
    [num_pages, page_size, Hkv], for packed k [rows, Hkv]. Every scale a run reads must be
    finite and > 0. K and V are quantized independently, their scales may differ in shape.
    k_channel_scale (float32 [Hkv, D], or [D] for every kv head alike): a quantized K's scale
    per channel as well (KIVI's and OpenVINO's keys), element d of a key of kv head h then
    standing for code x k_scale x k_channel_scale[h, d]; finite and > 0.
    """
    qv = _view(q, "q", _want_float("q"))
    kv = _view(k, "k", _want_kv("k"))
    vv = _view(v, "v", _want_kv("v"))
    kind, _ = _mask_kind_of(mask, mask_drop, mask_add, mask_bits)
    if out is not None:
        ov = _view(out, "out", _want_float("out"), writable=True)
        if out_dtype is not None and _dtype_name(out_dtype, "out_dtype") != ov.dtype:
            _fail(f"out_dtype {_dtype_name(out_dtype)} does not match out's dtype {ov.dtype}")
        out_dtype = ov.dtype
    o_dtype = _dtype_name(out_dtype, "out_dtype") if out_dtype is not None else qv.dtype
    shape = _infer(qv, kv, vv, seqlens_q, seqlens_kv, cu_seqlens_q, cu_seqlens_kv, block_table)
    plan = Plan(**shape, q_dtype=qv.dtype, k_dtype=kv.dtype, v_dtype=vv.dtype,
                out_dtype=o_dtype, causal=causal, causal_top_left=causal_top_left,
                window=window, mask_kind=_KIND_NAMES[kind],
                scale=scale, seqlens_q=seqlens_q, seqlens_kv=seqlens_kv,
                cu_seqlens_q=cu_seqlens_q, cu_seqlens_kv=cu_seqlens_kv, threads=threads,
                workers=workers, split=split, tile=tile, q_positions=q_positions,
                kv_positions=kv_positions, round_p_bf16=round_p_bf16, softcap=softcap,
                alibi=alibi_slopes is not None, sinks=sinks is not None,
                k_channel_scales=k_channel_scale is not None)
    try:
        # one-shot plans share a per-thread workspace instead of owning one
        plan._ws = _scratch(plan._ws_size)
        return plan.run(qv, kv, vv, mask=mask, mask_drop=mask_drop, mask_add=mask_add,
                        mask_bits=mask_bits, alibi_slopes=alibi_slopes, sinks=sinks,
                        k_scale=k_scale, v_scale=v_scale, k_channel_scale=k_channel_scale,
                        block_table=block_table, return_lse=return_lse,
                        out=out if out is not None else _alloc(qv.torch, _o_shape(plan),
                                                               o_dtype))
    finally:
        plan.close()


def _o_shape(plan):
    s = plan._shape
    if plan._packed_q:
        return [s["seq_q"], s["heads_q"], s["head_dim_v"]]
    return [s["batch"], s["seq_q"], s["heads_q"], s["head_dim_v"]]

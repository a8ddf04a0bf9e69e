"""The part of Plan that binds one run's arrays to libfai's fai_tensors: each array checked
against the plan's shapes, dtypes and layouts (paged, packed or padded), the scales, per-head
arrays, mask and block table the plan was made for (no more, no less), and O and LSE allocated
or checked to share no memory with the inputs. Each method fills its fields of the fai_tensors
and returns what C will read, so the caller keeps it alive until the run has finished."""
import ctypes

import numpy as np

from . import _lib
from ._arrays import (_BYTE_MASK, _alloc, _check_apart, _expect, _fill_tensor, _view,
                      _want_add_mask, _want_exact, _want_int32)
from ._errors import _fail
from ._options import _MASK_ARGS, _channel_scale_values, _head_values, _kv_scale, _mask_kind_of


class _RunBinding:
    """Plan's binding of a run's arrays; reads the plan's _shape, _dtypes, _paged, _packed_q,
    _packed_kv, _max_q, _max_kv, _mask_kind, _alibi, _sinks and _k_channels."""

    def _fill_inputs(self, t, qv, kv, vv):
        """Q, K and V into t, checked against the plan's shapes and layouts."""
        s = self._shape
        B, Hq, Hkv, D, Dv = s["batch"], s["heads_q"], s["heads_kv"], s["head_dim"], s["head_dim_v"]
        Sq, Skv = s["seq_q"], s["seq_kv"]
        if self._packed_q:
            _expect(qv, "q", [Sq, Hq, D], "[rows, Hq, D] (packed by cu_seqlens_q)")
            _fill_tensor(t.q, qv, 0, qv.stride(0), qv.stride(1))
        else:
            _expect(qv, "q", [B, Sq, Hq, D], "[B, Sq, Hq, D]")
            _fill_tensor(t.q, qv, qv.stride(0), qv.stride(1), qv.stride(2))
        for name, view, dim in (("k", kv, D), ("v", vv, Dv)):
            tensor = getattr(t, name)
            if self._paged:
                _expect(view, name, [s["num_pages"], s["page_size"], Hkv, dim],
                        f"[num_pages, page_size, Hkv, {'D' if name == 'k' else 'Dv'}] (a page "
                        "pool)")
                _fill_tensor(tensor, view, view.stride(0), view.stride(1), view.stride(2))
            elif self._packed_kv:
                _expect(view, name, [Skv, Hkv, dim], "[rows, Hkv, D] (packed by cu_seqlens_kv)")
                _fill_tensor(tensor, view, 0, view.stride(0), view.stride(1))
            else:
                _expect(view, name, [B, None, Hkv, dim], "[B, Skv, Hkv, D]")
                if view.shape[1] < Skv:
                    _fail(f"{name} has shape {list(view.shape)}: fewer than the plan's seq_kv = "
                          f"{Skv} positions")
                _fill_tensor(tensor, view, view.stride(0), view.stride(1), view.stride(2))

    def _fill_scales(self, t, kv, vv, k_scale, v_scale):
        """The scales of a quantized K and V into t; returns their views by name."""
        views = []
        for name, view, given in (("k_scale", kv, k_scale), ("v_scale", vv, v_scale)):
            got = _kv_scale(given, name, view, *self._scale_layout(view))
            if got is not None:
                sv, strides = got
                views.append((name, sv))
                dst = getattr(t, name)
                dst.data = sv.ptr
                dst.stride_batch, dst.stride_seq, dst.stride_head = strides
        return views

    def _fill_channel_scales(self, t, values):
        """K's per-channel scales into t, exactly when the plan has them; returns their array."""
        if self._k_channels and values is None:
            _fail("k_channel_scale is required: the plan was made with k_channel_scales")
        if not self._k_channels and values is not None:
            _fail("k_channel_scale given, but the plan was made without k_channel_scales "
                  "(Plan(..., k_channel_scales=True))")
        if values is None:
            return None
        arr, stride = _channel_scale_values(values, self._shape["heads_kv"],
                                            self._shape["head_dim"])
        t.k_channel_scale.data = arr.ctypes.data
        t.k_channel_scale.stride_head = stride
        return arr

    def _fill_head_arrays(self, t, alibi_slopes, sinks):
        """The modifiers' per-head arrays into t, exactly those the plan has; returns them by
        name."""
        arrays = []
        for name, wanted, values in (("alibi_slopes", self._alibi, alibi_slopes),
                                     ("sinks", self._sinks, sinks)):
            if wanted and values is None:
                _fail(f"{name} is required: the plan was made with {name.split('_')[0]}")
            if not wanted and values is not None:
                _fail(f"{name} given, but the plan was made without "
                      f"{name.split('_')[0]} (Plan(..., {name.split('_')[0]}=True))")
            if values is not None:
                arr = _head_values(values, name, self._shape["heads_q"])
                arrays.append((name, arr))
                setattr(t, name, arr.ctypes.data)
        return arrays

    def _fill_mask_of(self, t, mask, mask_drop, mask_add, mask_bits):
        """The mask the plan was made for into t; returns its name and view (None without
        one)."""
        kind, m = _mask_kind_of(mask, mask_drop, mask_add, mask_bits)
        if kind != self._mask_kind:
            if self._mask_kind == _lib.MASK_NONE:
                _fail(f"{_MASK_ARGS[kind]} given, but the plan has no mask")
            _fail(f"the plan's mask is {_MASK_ARGS[self._mask_kind]}, which is missing"
                  + (f" ({_MASK_ARGS[kind]} given)" if kind != _lib.MASK_NONE else ""))
        if m is None:
            return "mask", None
        name = _MASK_ARGS[kind]
        mv = _view(m, name, _want_add_mask if kind == _lib.MASK_ADD
                   else _want_exact(name, ("uint8",)) if kind == _lib.MASK_KEEP_BITS
                   else _want_exact(name, _BYTE_MASK))
        self._fill_mask(t.mask, mv, name)
        return name, mv

    def _fill_block_table(self, t, block_table):
        """A paged plan's block table into t; returns its view (None when not paged)."""
        s = self._shape
        if not self._paged:
            if block_table is not None:
                _fail("block_table given, but the plan's K and V are not paged")
            return None
        if block_table is None:
            _fail("block_table is required: the plan's K and V are page pools")
        bt = _view(block_table, "block_table", _want_int32("block_table"))
        if bt.ndim != 2 or bt.shape[0] != s["batch"] or bt.shape[1] != s["pages_per_seq"]:
            _fail(f"block_table has shape {list(bt.shape)}; expected [{s['batch']}, "
                  f"{s['pages_per_seq']}] ([B, pages_per_seq])")
        if bt.shape[0] > 1 and bt.stride(0) == 0:  # one row for all (0 means "packed")
            bt = _view(np.ascontiguousarray(np.broadcast_to(
                np.asarray(bt.owner) if not bt.torch else bt.owner.numpy(), bt.shape)),
                "block_table", _want_int32("block_table"))
        t.block_table = ctypes.cast(ctypes.c_void_p(bt.ptr), _lib.c_int32_p)
        t.block_table_stride = bt.stride(0) if bt.shape[0] > 1 else s["pages_per_seq"]
        return bt

    def _fill_outputs(self, t, qv, out, return_lse, inputs):
        """O (given, or allocated like q) and, with return_lse, LSE into t; returns both. A given
        out must share no memory with the inputs (name, view or array); LSE is fai's own."""
        s = self._shape
        B, Hq, Sq, Dv = s["batch"], s["heads_q"], s["seq_q"], s["head_dim_v"]
        o_shape = [Sq, Hq, Dv] if self._packed_q else [B, Sq, Hq, Dv]
        if out is None:
            out = _alloc(qv.torch, o_shape, self._dtypes["o"])
        ov = _view(out, "out", _want_exact("out", (self._dtypes["o"],)), writable=True)
        _expect(ov, "out", o_shape, "the shape of O")
        _check_apart("out", ov, inputs)
        if self._packed_q:
            _fill_tensor(t.o, ov, 0, ov.stride(0), ov.stride(1))
        else:
            _fill_tensor(t.o, ov, ov.stride(0), ov.stride(1), ov.stride(2))
        if not return_lse:
            return out, None
        if self._packed_q:
            lse = _alloc(qv.torch, [Hq, Sq], "float32")
            t.lse.stride_batch, t.lse.stride_head, t.lse.stride_seq = 0, Sq, 1
        else:
            lse = _alloc(qv.torch, [B, Hq, Sq], "float32")
            t.lse.stride_batch, t.lse.stride_head, t.lse.stride_seq = Hq * Sq, Sq, 1
        t.lse.data = _view(lse, "lse", _want_exact("lse", ("float32",)), writable=True).ptr
        t.lse.dtype = _lib.DTYPE_F32
        t.lse.stride_dim = 1
        return out, lse

    def _scale_layout(self, view):
        """The leading dims of K (or V, by its view) that its scales broadcast to, their names
        and their fai_scale axes."""
        s = self._shape
        if self._paged:
            return ([s["num_pages"], s["page_size"], s["heads_kv"]],
                    ("num_pages", "page_size", "Hkv"), ("batch", "seq", "head"))
        if self._packed_kv:
            return [s["seq_kv"], s["heads_kv"]], ("rows", "Hkv"), ("seq", "head")
        return ([s["batch"], view.shape[1], s["heads_kv"]], ("B", "Skv", "Hkv"),
                ("batch", "seq", "head"))

    def _fill_mask(self, dst, mv, name):
        s = self._shape
        B, Hq = s["batch"], s["heads_q"]
        if mv.ndim < 2 or mv.ndim > 4:
            _fail(f"{name} has shape {list(mv.shape)}; expected [Sq, Skv], [B, Sq, Skv] or "
                  "[B, Hq, Sq, Skv]")
        lq, lk = mv.shape[-2], mv.shape[-1]
        # a padded side needs the mask to cover it exactly; a packed or paged side needs the
        # longest sequence's positions (the mask is indexed by positions inside a sequence)
        exact_q = not self._packed_q
        exact_kv = not (self._packed_kv or self._paged)
        need_q = s["seq_q"] if exact_q else self._max_q
        need_kv = s["seq_kv"] if exact_kv else self._max_kv
        bits = self._mask_kind == _lib.MASK_KEEP_BITS
        if bits:  # one bit per key, rows of whole bytes
            need_kv = (need_kv + 7) // 8
        ok = lq == 1 or (lq == need_q if exact_q else lq >= need_q)
        ok = ok and (lk == need_kv if exact_kv else lk >= need_kv)
        if mv.ndim >= 3:
            ok = ok and mv.shape[0] in (B, 1)
        if mv.ndim == 4:
            ok = ok and mv.shape[1] in (Hq, 1)
        if not ok:
            kv_what = "" if exact_kv else " or more: the longest key length"
            q_what = "" if exact_q else " or more: the longest query length"
            last = "ceil(Skv / 8)" if bits else "Skv"
            _fail(f"{name} has shape {list(mv.shape)}; expected [Sq, {last}], [B, Sq, {last}] "
                  f"or [B, Hq, Sq, {last}] with B = {B}, Hq = {Hq}, Sq = {need_q}{q_what}, "
                  f"{last} = {need_kv}{kv_what} (B, Hq and Sq may be 1 to broadcast)")
        dst.data = mv.ptr
        dst.stride_q = mv.stride(mv.ndim - 2)
        dst.stride_head = mv.stride(1) if mv.ndim == 4 else 0
        dst.stride_batch = mv.stride(0) if mv.ndim >= 3 else 0

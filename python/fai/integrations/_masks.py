"""transformers' attention masks read as fai's problem. The "fai" mask builder is sdpa's, so fai
gets what torch's SDPA gets: None (plain causal, or none) or a boolean [B, 1, Sq, Skv] mask,
True attends. A dense mask costs fai a byte read per logit and hides the causal structure that
lets fai skip whole tiles, so a mask that is exactly "keys of a padded batch, causal, within the
layer's sliding window" is handed over as what it is: bottom-right causal, fai's window, and a
[B, 1, 1, Skv] key mask. Any other mask (a static cache's, bidirectional blocks, chunks) is
passed whole. The check costs about as much as building the mask did, and is made once per mask:
every layer of a forward pass is given the same mask tensor (under torch.inference_mode(), once
per layer: see MaskReader)."""
import collections
import weakref

import torch

from .._errors import FaiError


class MaskArgs:
    """fai keywords for one mask: plan ones (causal, window) and run ones (a key mask made from
    it), and `whole`, the run keyword ("mask", "mask_add") under which the given mask itself is
    passed, if it is (kept apart so that a cached reading holds no reference to the mask)."""

    __slots__ = ("plan", "run", "whole")

    def __init__(self, plan, run, whole=None):
        self.plan = plan
        self.run = run
        self.whole = whole

    def run_keywords(self, mask):
        """The keywords of Plan.run for this reading of `mask`."""
        return dict(self.run, **{self.whole: mask}) if self.whole else self.run

    def mask_kind(self):
        """The plan's mask_kind: the kind of the tensor run() is given."""
        if self.whole == "mask_add":
            return "add"
        return "keep" if self.whole or self.run else None


def _structured(mask, q_len, kv_len, sliding_window):
    """For a boolean [b, 1, Sq, Skv] mask: the key mask [b, 1, 1, Skv] (None when every key is
    seen) if the mask is exactly those keys, bottom-right causal, within the window; else False."""
    m = mask[:, 0]
    seen = m.any(dim=1)  # [b, Skv]: the keys some query attends to
    q_pos = torch.arange(q_len).unsqueeze(1) + (kv_len - q_len)
    kv_pos = torch.arange(kv_len).unsqueeze(0)
    band = kv_pos <= q_pos
    if sliding_window is not None:
        band &= kv_pos > q_pos - sliding_window  # transformers' sliding_window_overlay
    if not torch.equal(seen.unsqueeze(1) & band.unsqueeze(0), m):
        return False
    if bool(seen.all()):
        return None
    return seen[:, None, None, :]


def _window_of(sliding_window):
    # transformers sees keys kv > q - w; fai's window (left, 0) sees kv >= q - left
    return (int(sliding_window) - 1, 0) if sliding_window is not None else None


def check_mask(mask, batch, heads, q_len, kv_len):
    """Refuses, by the caller's name and shape, a mask that is not [B, H, Sq, Skv] of the query's
    batch and heads and the key's length (B, H and Sq may be 1 to broadcast), boolean or float."""
    if not isinstance(mask, torch.Tensor) or mask.ndim != 4:
        is_tensor = isinstance(mask, torch.Tensor)
        what = f"shape {list(mask.shape)}" if is_tensor else f"type {type(mask).__name__}"
        raise FaiError(f"attention_mask has {what}; expected None or a 4D mask [B, 1 or H, Sq, "
                       "Skv] (the mask of attn_implementation='fai' is sdpa's; 2D and 3D masks "
                       "are refused)")
    if mask.dtype != torch.bool and not mask.dtype.is_floating_point:
        raise FaiError(f"attention_mask has dtype {mask.dtype}; expected torch.bool (True "
                       "attends) or a float dtype (added to the scaled logits)")
    b, h, sq, skv = mask.shape
    if b not in (1, batch) or h not in (1, heads) or sq not in (1, q_len) or skv != kv_len:
        raise FaiError(f"attention_mask has shape {list(mask.shape)}; expected [B, H, Sq, Skv] = "
                       f"[{batch}, {heads}, {q_len}, {kv_len}] (the query's batch, heads and "
                       "length, the key's length; B, H and Sq may be 1 to broadcast)")


def read_mask(mask, batch, heads, q_len, kv_len, is_causal, sliding_window):
    """MaskArgs for an attention mask as transformers hands it to an attention function. As
    sdpa, is_causal counts only without a mask: a given mask is the whole pattern."""
    if mask is None:
        # as sdpa: is_causal only for several queries, top-left (with a static cache's unfilled
        # tail the keys outnumber the queries, and the tail must stay unseen)
        causal = bool(is_causal) and q_len > 1
        return MaskArgs({"causal_top_left": causal}, {})
    check_mask(mask, batch, heads, q_len, kv_len)
    if mask.dtype != torch.bool:
        return MaskArgs({}, {}, "mask_add")  # additive, as eager's
    if mask.shape[1] == 1 and mask.shape[2] == q_len:
        keys = _structured(mask, q_len, kv_len, sliding_window)
        if keys is not False:
            plan = {"causal": True, "window": _window_of(sliding_window)}
            return MaskArgs(plan, {"mask": keys} if keys is not None else {})
    return MaskArgs({}, {}, "mask")


class MaskReader:
    """read_mask with its result kept for the last few mask tensors (by identity and version),
    so that the layers after the first reuse the first one's reading. An inference tensor
    (made under torch.inference_mode()) has no version counter to tell an in-place change by,
    so it is read on every call."""

    def __init__(self, capacity=4):
        self.capacity = capacity
        self.reads = 0
        self._seen = collections.OrderedDict()

    def __call__(self, mask, batch, heads, q_len, kv_len, is_causal, sliding_window):
        shape = (batch, heads, q_len, kv_len)
        if mask is None:
            return read_mask(mask, *shape, is_causal, sliding_window)
        if not isinstance(mask, torch.Tensor) or mask.is_inference():
            args = read_mask(mask, *shape, is_causal, sliding_window)
            self.reads += 1
            return args
        key = (id(mask), mask._version, shape, sliding_window)
        hit = self._seen.get(key)
        if hit is not None and hit[0]() is mask:
            return hit[1]
        args = read_mask(mask, *shape, is_causal, sliding_window)
        self.reads += 1
        self._seen[key] = (weakref.ref(mask), args)
        while len(self._seen) > self.capacity:
            self._seen.popitem(last=False)
        return args

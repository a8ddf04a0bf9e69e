"""fai as an attention implementation of Hugging Face transformers on CPUs.

    import fai.integrations.transformers        # registers "fai"
    model = AutoModelForCausalLM.from_pretrained(name, attn_implementation="fai")

Importing this module registers "fai" in transformers' AttentionInterface (the attention
function) and AttentionMaskInterface (its masks are sdpa's: without an entry there transformers
would hand a custom implementation no mask at all, and a padded batch would attend to its
padding). Every model that takes attn_implementation="sdpa" takes "fai".

The attention function reads transformers' [B, H, S, D] query, key and value tensors in place
(transposed views, never copies), GQA included, and writes O as [B, S, H, D], the layout the
model reshapes next. Plans are cached (PLANS), so a forward pass plans once for all its layers.
fai runs on as many threads as torch (torch.get_num_threads()), at most fai.cpu_count().

The attention is what sdpa computes from the same arguments: attention_mask (None, or 4D
[B, 1 or H, Sq, Skv], boolean with True attending or float added to the logits; 2D and 3D masks
are refused), scaling, sliding_window, softcap and s_aux (gpt-oss's sinks). is_causal counts only
when there is no mask, as in sdpa: a given mask is the whole pattern. What fai cannot compute is
refused with a FaiError naming the argument, never approximated: dropout, output_attentions,
head_mask, position_bias, inputs that want gradients while autograd records (fai computes no
gradients: run under torch.no_grad() or torch.inference_mode()), and any keyword that may change
the attention and that fai does not read (a model's sinks=, indices=, ...). Packed sequences
(cu_seq_lens_q / cu_seq_lens_k) are taken when the mask keeps them apart.
"""
import math
import numbers

import torch
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.masking_utils import sdpa_mask

import fai

from .._errors import FaiError
from ._masks import MaskReader
from ._plans import PlanCache

__all__ = ["NAME", "PLANS", "MASKS", "attention_forward", "register"]

NAME = "fai"
PLANS = PlanCache()
MASKS = MaskReader()

_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

# Keywords transformers passes that leave the attention as the mask, scaling, sliding_window,
# softcap and s_aux define it: positions (sdpa's mask is built from them, packed sequences
# included), cache and output bookkeeping, and flash kernels' length bounds and determinism
# switch (fai's result never depends on threads). Any other keyword with a value is refused:
# it may change the attention (sinks=, indices=, block_indices= of some models).
_NO_EFFECT = frozenset({
    "position_ids", "cache_position", "use_cache", "cache", "past_key_values", "past_key_value",
    "output_attentions", "output_hidden_states", "output_router_logits", "num_items_in_batch",
    "max_length_q", "max_length_k", "deterministic"})
# handled here: packed sequences, allowed when the mask already keeps them apart
_PACKING = ("cu_seq_lens_q", "cu_seq_lens_k")


def _refuse(argument, value, why):
    raise FaiError(f"{argument} = {value!r}: {why}")


def _described(value):
    """A keyword's value for a message: a tensor by its shape, not its elements."""
    if isinstance(value, torch.Tensor):
        return f"<tensor of shape {list(value.shape)}>"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_unsupported(dropout, kwargs):
    if dropout:
        _refuse("dropout", dropout, "fai computes inference attention, without dropout (call "
                "model.eval(), or train with another attn_implementation)")
    if kwargs.get("output_attentions"):
        _refuse("output_attentions", True, "fai never forms the attention weights (use "
                "attn_implementation='eager' to get them)")
    for name in ("head_mask", "position_bias"):
        if kwargs.get(name) is not None:
            _refuse(name, "a tensor", "fai has no per-head mask or additive position bias here")
    for name, value in kwargs.items():
        if value is not None and name not in _NO_EFFECT and name not in _PACKING:
            raise FaiError(f"{name} = {_described(value)}: a keyword attn_implementation='fai' "
                           "does not know, which may change the attention (fai computes what "
                           "attention_mask, scaling, sliding_window, softcap and s_aux define); "
                           "use another attn_implementation for this model")


def _check_no_grad(tensors):
    """fai's output has no grad_fn: under autograd, an input that wants gradients is refused
    rather than left without them."""
    if not torch.is_grad_enabled():
        return
    for name, t in tensors:
        if isinstance(t, torch.Tensor) and t.requires_grad:
            _refuse(f"{name}.requires_grad", True, "fai computes no gradients (use it under "
                    "torch.no_grad() or torch.inference_mode())")


def _check_tensors(query, key, value, module):
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor):
            raise FaiError(f"{name} is a {type(t).__name__}; expected a torch tensor "
                           "[B, H, S, D]")
        if t.dtype not in _DTYPES:
            _refuse(f"{name}.dtype", t.dtype, "fai reads float32, float16 and bfloat16")
        if t.ndim != 4:
            _refuse(f"{name}.shape", list(t.shape), "expected [B, H, S, D]")
    batch, head_dim = query.shape[0], query.shape[3]
    if key.shape[0] != batch or key.shape[3] != head_dim:
        _refuse("key.shape", list(key.shape), f"expected [B, Hkv, Skv, D] with query's B = "
                f"{batch} and D = {head_dim} (query.shape = {list(query.shape)})")
    if value.shape[:3] != key.shape[:3]:
        _refuse("value.shape", list(value.shape), "expected [B, Hkv, Skv, Dv] with key's B, Hkv "
                f"and Skv (key.shape = {list(key.shape)})")
    heads_q, heads_kv = query.shape[1], key.shape[1]
    groups = getattr(module, "num_key_value_groups", heads_q // max(heads_kv, 1))
    if heads_kv * groups != heads_q:
        _refuse("num_key_value_groups", groups, f"query has {heads_q} heads and key "
                f"{heads_kv}: expected {heads_q} = key heads x groups")


def _is_real(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _check_numbers(scaling, sliding_window, softcap):
    """The scalar arguments, refused by the caller's names before fai's own checks see them."""
    if scaling is not None and not (_is_real(scaling) and math.isfinite(scaling)):
        _refuse("scaling", scaling, "expected a finite number (None: 1/sqrt(head_dim))")
    if sliding_window is not None and not (isinstance(sliding_window, numbers.Integral)
                                           and not isinstance(sliding_window, bool)
                                           and sliding_window >= 1):
        _refuse("sliding_window", sliding_window, "expected an integer >= 1 (the keys a query "
                "sees, itself included) or None")
    if softcap is not None and not _is_real(softcap):
        _refuse("softcap", softcap, "expected a number or None")


def _segments(cu, name, tokens, rows):
    """The packed sequence of each row of a [B, rows] tensor flattened to `tokens` rows, from
    cu_seq_lens (int [n + 1], 0 to tokens): [B, rows]."""
    if not isinstance(cu, torch.Tensor) or cu.ndim != 1 or cu.dtype.is_floating_point:
        _refuse(name, _described(cu), "expected an integer tensor [n + 1] of prefix sums")
    cu = cu.to(torch.int64)
    if cu.numel() < 2 or cu[0] != 0 or cu[-1] != tokens or bool((cu.diff() < 0).any()):
        _refuse(name, cu.tolist() if cu.numel() <= 8 else _described(cu), "expected prefix "
                f"sums of the packed sequences' lengths, from 0 to {tokens} (the rows of the "
                "batch)")
    return torch.searchsorted(cu[1:], torch.arange(tokens), right=True).view(-1, rows)


def _check_packing(kwargs, mask, batch, q_len, kv_len):
    """cu_seq_lens_q / cu_seq_lens_k (flash kernels' packed sequences) change nothing when the
    mask already keeps each packed sequence to itself, as transformers' masks do when built from
    packed position_ids; otherwise fai would let the sequences see each other, and refuses."""
    cu_q, cu_k = (kwargs.get(name) for name in _PACKING)
    if cu_q is None and cu_k is None:
        return
    if cu_q is None or cu_k is None:
        given, missing = _PACKING if cu_k is None else _PACKING[::-1]
        raise FaiError(f"{given} given without {missing}: give both or neither")
    seg_q = _segments(cu_q, "cu_seq_lens_q", batch * q_len, q_len)
    seg_k = _segments(cu_k, "cu_seq_lens_k", batch * kv_len, kv_len)
    across = (seg_q[:, :, None] != seg_k[:, None, :]).unsqueeze(1)  # [B, 1, Sq, Skv]
    if not bool(across.any()):
        return
    if mask is not None:
        blocked = ~mask if mask.dtype == torch.bool else mask <= torch.finfo(mask.dtype).min
        if not bool((across & ~blocked).any()):
            return
    raise FaiError(f"cu_seq_lens_q = {_described(cu_q)}: packed sequences that attention_mask "
                   f"({'None' if mask is None else 'given'}) does not keep apart; fai computes "
                   "what the mask defines, as sdpa does (pass packed position_ids so that "
                   "transformers builds a mask that separates the sequences)")


def _modifiers(softcap, s_aux, heads_q):
    """The plan and run keywords of the logit softcap and the attention sinks (s_aux, one logit
    per query head, a key with no value)."""
    plan, run = {}, {}
    if s_aux is not None and (not isinstance(s_aux, torch.Tensor) or s_aux.shape != (heads_q,)
                              or not s_aux.dtype.is_floating_point):
        what = (f"a {s_aux.dtype} tensor of shape {list(s_aux.shape)}"
                if isinstance(s_aux, torch.Tensor) else type(s_aux).__name__)
        raise FaiError(f"s_aux is {what}; expected a float tensor [{heads_q}] (one sink logit "
                       "per query head)")
    if softcap is not None:
        plan["softcap"] = float(softcap)
    if s_aux is not None:
        plan["sinks"] = True  # the plan has sinks; their values (float32 [Hq]) come per run
        run["sinks"] = s_aux.detach().float()
    return plan, run


def _threads():
    """The threads torch computes on (torch.set_num_threads), which fai follows too, up to its
    pool's size (fai.cpu_count())."""
    return max(1, min(torch.get_num_threads(), fai.cpu_count()))


def _plan_key(q, k, v, options):
    def hashable(value):
        if isinstance(value, torch.Tensor):  # a tensor given to the plan: one plan per tensor
            return ("tensor", value.data_ptr(), value._version)
        return value

    return (tuple(q.shape), k.shape[0], k.shape[1], k.shape[2], k.shape[3], v.shape[3],
            q.dtype, k.dtype, v.dtype,
            tuple(sorted((name, hashable(value)) for name, value in options.items())))


def attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                      is_causal=None, sliding_window=None, softcap=None, s_aux=None, **kwargs):
    """transformers' attention-function contract: query [B, Hq, Sq, D], key and value
    [B, Hkv, Skv, D] (Hq a multiple of Hkv), attention_mask None or 4D (sdpa's boolean mask, or
    an additive float mask); returns (O [B, Sq, Hq, D] in query's dtype, None). is_causal
    counts only without a mask, as in sdpa. Inputs that want gradients under autograd, and
    keywords that may change the attention and that fai does not read, are refused."""
    _check_unsupported(dropout, kwargs)
    _check_tensors(query, key, value, module)
    _check_no_grad((("query", query), ("key", key), ("value", value), ("s_aux", s_aux),
                    ("attention_mask", attention_mask)))
    _check_numbers(scaling, sliding_window, softcap)
    q = query.transpose(1, 2)  # [B, Sq, Hq, D] views: fai reads the strides
    k = key.transpose(1, 2)
    v = value.transpose(1, 2)
    batch, q_len, heads_q = q.shape[:3]
    if is_causal is None:
        is_causal = getattr(module, "is_causal", True)
    mask = MASKS(attention_mask, batch, heads_q, q_len, k.shape[1], is_causal, sliding_window)
    _check_packing(kwargs, attention_mask, batch, q_len, k.shape[1])
    plan_mods, run_mods = _modifiers(softcap, s_aux, heads_q)
    options = dict(mask.plan, mask_kind=mask.mask_kind(), scale=scaling, threads=_threads(),
                   **plan_mods)
    plan = PLANS.get(_plan_key(q, k, v, options), lambda: fai.Plan.like(q, k, v, **options))
    out = plan.run(q, k, v, **mask.run_keywords(attention_mask), **run_mods)
    return out, None


def register(name=NAME):
    """Registers the attention function and its masks under `name` (done for "fai" on import)."""
    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, sdpa_mask)


register()

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
What fai cannot compute is refused with a FaiError naming the argument, never approximated.
"""
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


def _refuse(argument, value, why):
    raise FaiError(f"{argument} = {value!r}: {why}")


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


def _check_tensors(query, key, value, module):
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.dtype not in _DTYPES:
            _refuse(f"{name}.dtype", t.dtype, "fai reads float32, float16 and bfloat16")
        if t.ndim != 4:
            _refuse(f"{name}.shape", list(t.shape), "expected [B, H, S, D]")
    heads_q, heads_kv = query.shape[1], key.shape[1]
    groups = getattr(module, "num_key_value_groups", heads_q // max(heads_kv, 1))
    if heads_kv * groups != heads_q:
        _refuse("num_key_value_groups", groups, f"query has {heads_q} heads and key "
                f"{heads_kv}: expected {heads_q} = key heads x groups")


def _modifiers(softcap, s_aux):
    """The plan and run keywords of the logit softcap and the attention sinks (s_aux, one logit
    per query head, a key with no value)."""
    plan, run = {}, {}
    if softcap is not None:
        plan["softcap"] = float(softcap)
    if s_aux is not None:
        plan["sinks"] = True  # the plan has sinks; their values (float32 [Hq]) come per run
        run["sinks"] = s_aux.detach().float()
    return plan, run


def _threads():
    """The threads torch computes on (torch.set_num_threads), which fai follows too."""
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
    an additive float mask); returns (O [B, Sq, Hq, D] in query's dtype, None)."""
    _check_unsupported(dropout, kwargs)
    _check_tensors(query, key, value, module)
    q = query.transpose(1, 2)  # [B, Sq, Hq, D] views: fai reads the strides
    k = key.transpose(1, 2)
    v = value.transpose(1, 2)
    if is_causal is None:
        is_causal = getattr(module, "is_causal", True)
    mask = MASKS(attention_mask, q.shape[1], k.shape[1], is_causal, sliding_window)
    plan_mods, run_mods = _modifiers(softcap, s_aux)
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

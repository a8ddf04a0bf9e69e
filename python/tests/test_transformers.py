"""attn_implementation="fai" in Hugging Face transformers against "sdpa" (or "eager" where sdpa
lacks the feature), on tiny randomly initialised models built from transformers' own configs: no
download. Batches are left padded, as generate() pads them.

Tolerances. The models differ only in their attention, so the logits differ by the attention's
rounding carried through the layers after it.
  float32: each implementation is within 2 eps (L + sqrt n) max(1, sum p|v|) of exact attention
  (README, "Tolerances"); with these models' small logits that is a few 1e-7 of the output, and
  the few layers after it keep it within F32_TOL of the logits' scale.
  bfloat16: both round their outputs to bfloat16 (2^-8 relative) and torch rounds P to bfloat16
  as well, after which every bfloat16 operation of the later layers may round either way. No
  fixed bound follows; what does is that fai's bfloat16 model is as close to the exact model (the
  same bfloat16 weights computed in float32) as sdpa's bfloat16 model is: within BF16_FACTOR
  times sdpa's distance, plus one bfloat16 step of the logits' scale.
Greedy generation: 32 tokens equal in float32, where the logits agree to about 1e-6 and these
models' top two logits are far further apart. Not in bfloat16: there the logits of either
implementation are about 0.15 from exact (0.2 in fai, 0.17 in sdpa at most over four seeds), as
far as the gaps between a random model's top logits often are, so some step of 32 flips a
near-tie and the sequences part (in 11 of 12 runs of three models and four seeds).
"""
import copy

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the transformers "
                            "integration tests are skipped (pip install torch transformers)")
transformers = pytest.importorskip("transformers", reason="transformers is not installed: the "
                                   "integration tests are skipped (pip install transformers)")

import fai  # noqa: E402
from fai.integrations import transformers as fai_hf  # noqa: E402

F32_TOL = 1e-5
BF16_FACTOR = 2.0
BF16_STEP = 2.0**-8
NEW_TOKENS = 32
VOCAB = 256

SMALL = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, head_dim=16,
             max_position_embeddings=256, initializer_range=0.2)


def _config(name):
    """The tiny config of each model family, and the implementation to compare with."""
    if name == "llama-gqa":
        return transformers.LlamaConfig(**SMALL), "sdpa"
    if name == "qwen2":
        return transformers.Qwen2Config(**SMALL), "sdpa"
    if name == "mistral-window":
        return transformers.MistralConfig(**SMALL, sliding_window=8), "sdpa"
    if name == "gemma2-softcap":  # sdpa refuses softcap: eager is the reference
        return transformers.Gemma2Config(**SMALL, sliding_window=8, query_pre_attn_scalar=16,
                                         attn_logit_softcapping=5.0,
                                         final_logit_softcapping=None), "eager"
    if name == "gpt-oss-sinks":  # sdpa ignores s_aux: eager is the reference
        cfg = dict(SMALL, num_local_experts=4, num_experts_per_tok=2, sliding_window=8,
                   layer_types=["sliding_attention", "full_attention"])
        return transformers.GptOssConfig(**cfg), "eager"
    raise AssertionError(name)


MODELS = ["llama-gqa", "qwen2", "mistral-window", "gemma2-softcap", "gpt-oss-sinks"]


def _model(name, dtype, seed=0):
    cfg, ref = _config(name)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(cfg),
                                                          attn_implementation="fai")
    return model.to(dtype).eval(), ref


def _batch(seed=1):
    """Three prompts of 20, 13 and 5 tokens, left padded to 20 (longer than the window)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (3, 20), generator=g)
    mask = torch.ones(3, 20, dtype=torch.long)
    mask[1, :7] = 0
    mask[2, :15] = 0
    return ids, mask


def _logits(model, impl, ids, mask):
    model.set_attn_implementation(impl)
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask).logits.float()


@pytest.mark.parametrize("name", MODELS)
def test_logits_float32(name):
    model, ref = _model(name, torch.float32)
    ids, mask = _batch()
    got = _logits(model, "fai", ids, mask)
    want = _logits(model, ref, ids, mask)
    assert torch.isfinite(got).all(), "padding rows must not give NaN or Inf"
    real = mask.bool()
    err = (got - want)[real].abs().max().item()
    assert err <= F32_TOL * max(1.0, want[real].abs().max().item()), err


@pytest.mark.parametrize("name", MODELS)
def test_logits_bfloat16(name):
    model, ref = _model(name, torch.bfloat16)
    ids, mask = _batch()
    got = _logits(model, "fai", ids, mask)
    near = _logits(model, ref, ids, mask)
    exact = _logits(copy.deepcopy(model).float(), ref, ids, mask)
    assert torch.isfinite(got).all()
    real = mask.bool()
    scale = max(1.0, exact[real].abs().max().item())
    fai_err = (got - exact)[real].abs().max().item()
    ref_err = (near - exact)[real].abs().max().item()
    assert fai_err <= BF16_FACTOR * ref_err + BF16_STEP * scale, (fai_err, ref_err)


def _generate(model, impl, ids, mask, tokens):
    model.set_attn_implementation(impl)
    with torch.no_grad():
        return model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=tokens,
                              min_new_tokens=tokens, do_sample=False, pad_token_id=0)


@pytest.mark.parametrize("name", MODELS)
def test_greedy_generate_float32(name):
    model, ref = _model(name, torch.float32)
    ids, mask = _batch()
    got = _generate(model, "fai", ids, mask, NEW_TOKENS)
    want = _generate(model, ref, ids, mask, NEW_TOKENS)
    assert got.shape[1] == ids.shape[1] + NEW_TOKENS
    assert torch.equal(got, want)


def test_static_cache_generate_float32():
    """A static cache hands attention its whole buffer: the keys past the prompt are unfilled,
    and the mask (not a plain causal one) is passed to fai whole."""
    model, _ = _model("llama-gqa", torch.float32)
    ids, mask = _batch()
    kw = dict(cache_implementation="static")
    model.set_attn_implementation("fai")
    with torch.no_grad():
        got = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=8,
                             min_new_tokens=8, do_sample=False, pad_token_id=0, **kw)
    model.set_attn_implementation("sdpa")
    with torch.no_grad():
        want = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=8,
                              min_new_tokens=8, do_sample=False, pad_token_id=0, **kw)
    assert torch.equal(got, want)


def test_from_config_registers_fai():
    model, _ = _model("llama-gqa", torch.float32)
    assert model.config._attn_implementation == "fai"
    assert transformers.AttentionInterface._global_mapping["fai"] is fai_hf.attention_forward


def test_one_plan_per_forward_pass_and_per_step():
    """Every layer of a forward pass reuses the first layer's plan, and each decode step plans
    once: plans made = forward passes, whatever the number of layers."""
    cfg = transformers.LlamaConfig(**dict(SMALL, num_hidden_layers=4))
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="fai").eval()
    ids, mask = _batch()
    fai_hf.PLANS.clear()
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask)
    assert (fai_hf.PLANS.created, fai_hf.PLANS.reused) == (1, 3)
    fai_hf.PLANS.clear()
    _generate(model, "fai", ids, mask, 6)
    assert (fai_hf.PLANS.created, fai_hf.PLANS.reused) == (6, 6 * 3)


def _qkv(dtype=torch.float32, heads=4, heads_kv=2, s_q=5, s_kv=9, d=16):
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, heads, s_q, d, generator=g).to(dtype)
    k = torch.randn(2, heads_kv, s_kv, d, generator=g).to(dtype)
    v = torch.randn(2, heads_kv, s_kv, d, generator=g).to(dtype)
    return q, k, v


class _Module(torch.nn.Module):
    num_key_value_groups = 2
    is_causal = True


def test_strided_cache_views_read_in_place():
    """K and V as a slice of a longer cache buffer (as a static cache holds them): the same result
    as sdpa on the same views, with a boolean padding mask, GQA and a given scale."""
    q, k, v = _qkv()
    k_buf = torch.zeros(2, 2, 32, 16)
    v_buf = torch.zeros(2, 2, 32, 16)
    k_buf[:, :, :9] = k
    v_buf[:, :, :9] = v
    mask = torch.ones(2, 1, 5, 9, dtype=torch.bool)
    mask[1, :, :, :3] = False
    k_view, v_view = k_buf[:, :, :9], v_buf[:, :, :9]
    out, weights = fai_hf.attention_forward(_Module(), q, k_view, v_view, mask, scaling=0.3)
    want = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), attn_mask=mask, scale=0.3)
    assert weights is None
    assert out.shape == (2, 5, 4, 16)
    assert torch.allclose(out, want.transpose(1, 2), atol=1e-5)


def test_fully_masked_rows_give_zero():
    q, k, v = _qkv()
    mask = torch.zeros(2, 1, 5, 9, dtype=torch.bool)
    mask[:, :, 2:] = True
    out, _ = fai_hf.attention_forward(_Module(), q, k, v, mask)
    assert torch.isfinite(out).all()
    assert (out[:, :2] == 0).all()


@pytest.mark.parametrize("argument,kwargs,word", [
    ("dropout", dict(dropout=0.1), "dropout = 0.1"),
    ("output_attentions", dict(output_attentions=True), "output_attentions"),
    ("head_mask", dict(head_mask=torch.ones(4)), "head_mask"),
])
def test_refused_by_name(argument, kwargs, word):
    q, k, v = _qkv()
    with pytest.raises(fai.FaiError, match=word):
        fai_hf.attention_forward(_Module(), q, k, v, None, **kwargs)


def test_float64_refused_by_name():
    q, k, v = _qkv(torch.float64)
    with pytest.raises(fai.FaiError, match="query.dtype"):
        fai_hf.attention_forward(_Module(), q, k, v, None)


def test_two_dimensional_mask_refused():
    q, k, v = _qkv()
    with pytest.raises(fai.FaiError, match="attention_mask"):
        fai_hf.attention_forward(_Module(), q, k, v, torch.ones(2, 9, dtype=torch.bool))


def test_softcap_and_sinks_match_float64():
    """softcap and s_aux (gpt-oss's sinks: a logit per query head that joins each row's
    denominator and carries no value) reach fai's modifiers: causal attention with both against
    float64 written out."""
    q, k, v = _qkv(s_q=9)
    sinks = torch.tensor([0.5, -1.0, 2.0, 0.0])
    out, _ = fai_hf.attention_forward(_Module(), q, k, v, None, scaling=0.4, softcap=3.0,
                                      s_aux=sinks)
    qd, kd, vd = (t.double() for t in (q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)))
    s = qd @ kd.transpose(-1, -2) * 0.4
    s = 3.0 * torch.tanh(s / 3.0)
    s = s.masked_fill(torch.ones(9, 9, dtype=torch.bool).triu(1), float("-inf"))
    sink = sinks.double().view(1, 4, 1, 1).expand(2, 4, 9, 1)
    p = torch.softmax(torch.cat([s, sink], dim=-1), dim=-1)[..., :9]
    want = (p @ vd).transpose(1, 2)
    assert torch.allclose(out.double(), want, atol=1e-5)


@pytest.mark.parametrize("name", ["query", "key", "value", "s_aux"])
def test_inputs_wanting_gradients_refused_under_autograd(name):
    """fai's output has no grad_fn: an input that wants gradients while autograd records is
    refused, not left without them; under no_grad or inference_mode the same call runs."""
    q, k, v = _qkv()
    args = {"query": q, "key": k, "value": v, "s_aux": torch.zeros(4)}
    args[name].requires_grad_(True)
    with pytest.raises(fai.FaiError, match=rf"{name}.requires_grad = True: fai computes no "
                       r"gradients .*torch.no_grad\(\)"):
        fai_hf.attention_forward(_Module(), attention_mask=None, **args)
    with torch.no_grad():
        fai_hf.attention_forward(_Module(), attention_mask=None, **args)
    with torch.inference_mode():
        fai_hf.attention_forward(_Module(), attention_mask=None, **args)


def test_model_forward_under_autograd_refused():
    model, _ = _model("llama-gqa", torch.float32)
    ids, mask = _batch()
    with pytest.raises(fai.FaiError, match="requires_grad = True"):
        model(input_ids=ids, attention_mask=mask)


def test_inference_mode_mask_read_each_call():
    """A mask made under torch.inference_mode() has no version counter: it is read on every call,
    never taken from the cache of readings, and gives what the same mask gives outside."""
    q, k, v = _qkv()
    mask = torch.ones(2, 1, 5, 9, dtype=torch.bool)
    mask[1, :, :, :3] = False
    want, _ = fai_hf.attention_forward(_Module(), q, k, v, mask.clone())
    with torch.inference_mode():
        frozen = mask.clone()
        reads = fai_hf.MASKS.reads
        got, _ = fai_hf.attention_forward(_Module(), q, k, v, frozen)
        assert torch.equal(got, want)
        frozen[1, :, :, 3:5] = False  # in place: an inference tensor's version does not move
        changed, _ = fai_hf.attention_forward(_Module(), q, k, v, frozen)
        assert fai_hf.MASKS.reads == reads + 2
    assert not torch.equal(changed, want)
    sdpa = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), attn_mask=frozen.clone())
    assert torch.allclose(changed, sdpa.transpose(1, 2), atol=1e-5)


def test_model_under_inference_mode_matches_no_grad():
    model, _ = _model("mistral-window", torch.float32)
    ids, mask = _batch()
    want = _logits(model, "fai", ids, mask)
    with torch.inference_mode():
        got = model(input_ids=ids, attention_mask=mask).logits.float()
    assert torch.equal(got, want)


@pytest.mark.parametrize("name", ["sinks", "indices", "block_indices", "some_new_keyword"])
def test_unknown_keyword_with_a_value_refused(name):
    q, k, v = _qkv()
    with pytest.raises(fai.FaiError, match=rf"^{name} = <tensor of shape \[4\]>: a keyword "
                       "attn_implementation='fai' does not know"):
        fai_hf.attention_forward(_Module(), q, k, v, None, **{name: torch.zeros(4)})


def test_keywords_that_leave_the_attention_unchanged_accepted():
    """What transformers passes for standard models (positions, cache and output bookkeeping,
    flash kernels' bounds) and unknown keywords given as None change nothing."""
    q, k, v = _qkv()
    want, _ = fai_hf.attention_forward(_Module(), q, k, v, None)
    got, _ = fai_hf.attention_forward(
        _Module(), q, k, v, None, position_ids=torch.arange(4, 9)[None], use_cache=True,
        output_attentions=False, output_router_logits=False, max_length_q=5, max_length_k=9,
        deterministic=True, sinks=None, indices=None)
    assert torch.equal(got, want)


def _packed(lengths):
    cu = torch.tensor([0] + lengths).cumsum(0)
    seq = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    keep = (seq[:, None] == seq[None, :]) & torch.ones(len(seq), len(seq), dtype=torch.bool).tril()
    return cu, keep[None, None]


def test_packed_sequences_taken_when_the_mask_keeps_them_apart():
    q, k, v = _qkv(s_q=9)
    q, k, v = q[:1], k[:1], v[:1]
    cu, keep = _packed([4, 5])
    want, _ = fai_hf.attention_forward(_Module(), q, k, v, keep)
    got, _ = fai_hf.attention_forward(_Module(), q, k, v, keep, cu_seq_lens_q=cu,
                                      cu_seq_lens_k=cu, max_length_q=5, max_length_k=5)
    assert torch.equal(got, want)
    additive = torch.zeros(keep.shape).masked_fill(~keep, torch.finfo(torch.float32).min)
    fai_hf.attention_forward(_Module(), q, k, v, additive, cu_seq_lens_q=cu, cu_seq_lens_k=cu)


@pytest.mark.parametrize("case", ["no mask", "causal mask", "one side", "bad sums"])
def test_packed_sequences_refused_when_the_mask_joins_them(case):
    q, k, v = _qkv(s_q=9)
    q, k, v = q[:1], k[:1], v[:1]
    cu, _ = _packed([4, 5])
    mask = torch.ones(1, 1, 9, 9, dtype=torch.bool).tril() if case == "causal mask" else None
    kwargs = {"no mask": dict(cu_seq_lens_q=cu, cu_seq_lens_k=cu),
              "causal mask": dict(cu_seq_lens_q=cu, cu_seq_lens_k=cu),
              "one side": dict(cu_seq_lens_q=cu),
              "bad sums": dict(cu_seq_lens_q=cu + 1, cu_seq_lens_k=cu)}[case]
    word = {"no mask": "does not keep apart", "causal mask": "does not keep apart",
            "one side": "cu_seq_lens_q given without cu_seq_lens_k",
            "bad sums": r"cu_seq_lens_q = \[1, 5, 10\]: expected prefix sums"}[case]
    with pytest.raises(fai.FaiError, match=word):
        fai_hf.attention_forward(_Module(), q, k, v, mask, **kwargs)


@pytest.mark.parametrize("shape", [(2, 1, 5, 7), (2, 1, 5, 12), (3, 1, 5, 9), (2, 3, 5, 9),
                                   (2, 1, 4, 9)])
@pytest.mark.parametrize("dtype", [torch.bool, torch.float32])
def test_mask_of_wrong_shape_refused_by_its_name(shape, dtype):
    """A mask whose key length differs from the key's, or whose batch, head or query dim is
    neither 1 nor the query's, is refused as attention_mask with the shape given."""
    q, k, v = _qkv()
    mask = torch.ones(shape, dtype=dtype)
    with pytest.raises(fai.FaiError, match=rf"^attention_mask has shape "
                       rf"\[{', '.join(map(str, shape))}\]; expected \[B, H, Sq, Skv\] = "
                       r"\[2, 4, 5, 9\]"):
        fai_hf.attention_forward(_Module(), q, k, v, mask)


@pytest.mark.parametrize("shape", [(1, 1, 5, 9), (2, 4, 5, 9), (2, 1, 1, 9), (1, 4, 1, 9)])
@pytest.mark.parametrize("dtype", [torch.bool, torch.float32])
def test_broadcast_mask_shapes_accepted(shape, dtype):
    q, k, v = _qkv()
    mask = torch.ones(shape, dtype=dtype) if dtype == torch.bool else torch.zeros(shape)
    out, _ = fai_hf.attention_forward(_Module(), q, k, v, mask)
    want = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), attn_mask=mask)
    assert torch.allclose(out, want.transpose(1, 2), atol=1e-5)


@pytest.mark.parametrize("dimensions", [2, 3])
def test_two_and_three_dimensional_masks_refused(dimensions):
    q, k, v = _qkv()
    mask = torch.ones((2, 5, 9)[-dimensions:], dtype=torch.bool)
    with pytest.raises(fai.FaiError, match=r"attention_mask has shape .*2D and 3D masks"):
        fai_hf.attention_forward(_Module(), q, k, v, mask)


def test_integer_mask_refused_by_its_name():
    q, k, v = _qkv()
    with pytest.raises(fai.FaiError, match=r"^attention_mask has dtype torch.int64; expected "
                       "torch.bool"):
        fai_hf.attention_forward(_Module(), q, k, v, torch.ones(2, 1, 5, 9, dtype=torch.int64))


def test_value_length_checked_with_a_cached_plan():
    """The plan cache's key has key's length, not value's: value is checked on every call, so a
    longer value is refused after a plan was cached as on a fresh cache."""
    q, k, v = _qkv()
    longer = torch.randn(2, 2, 12, 16)
    fai_hf.PLANS.clear()
    with pytest.raises(fai.FaiError, match=r"^value.shape = \[2, 2, 12, 16\]: expected "
                       r"\[B, Hkv, Skv, Dv\] with key's"):
        fai_hf.attention_forward(_Module(), q, k, longer, None)
    fai_hf.attention_forward(_Module(), q, k, v, None)
    with pytest.raises(fai.FaiError, match=r"^value.shape = \[2, 2, 12, 16\]"):
        fai_hf.attention_forward(_Module(), q, k, longer, None)


def test_key_refused_with_its_own_name_and_shape():
    q, k, v = _qkv()
    with pytest.raises(fai.FaiError, match=r"^key.shape = \[1, 2, 9, 16\]: expected "
                       r"\[B, Hkv, Skv, D\] with query's B = 2"):
        fai_hf.attention_forward(_Module(), q, k[:1], v[:1], None)
    with pytest.raises(fai.FaiError, match=r"^key.shape = \[2, 2, 9, 8\]"):
        fai_hf.attention_forward(_Module(), q, k[..., :8], v, None)


@pytest.mark.parametrize("kwargs,word", [
    (dict(s_aux=torch.zeros(2)), r"^s_aux is a torch.float32 tensor of shape \[2\]; expected a "
     r"float tensor \[4\]"),
    (dict(sliding_window=0), r"^sliding_window = 0: expected an integer >= 1"),
    (dict(scaling=float("nan")), r"^scaling = nan: expected a finite number"),
])
def test_scalars_and_sinks_refused_by_their_names(kwargs, word):
    q, k, v = _qkv()
    with pytest.raises(fai.FaiError, match=word):
        fai_hf.attention_forward(_Module(), q, k, v, None, **kwargs)

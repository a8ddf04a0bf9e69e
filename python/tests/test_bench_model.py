"""python -m fai.bench_model without timing anything: its options are checked before a model is
built, the implementations it is given are ones it can run, and the cache its prefill and decode
steps pass is the one the model reads and extends."""
import pytest

import fai
from fai import bench_model


def _parse_error(capsys, argv):
    with pytest.raises(SystemExit) as exc:
        bench_model._parse(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("argv,message", [
    (["--decode-steps", "0"], "argument --decode-steps: 0 is not a positive integer"),
    (["--runs", "-1"], "argument --runs: -1 is not a positive integer"),
    (["--threads", "0"], "argument --threads: 0 is not a positive integer"),
    (["--layers", "0"], "argument --layers: 0 is not a positive integer"),
    (["--heads", "x"], "argument --heads: 'x' is not an integer"),
    (["--kv-heads", "0"], "argument --kv-heads: 0 is not a positive integer"),
    (["--head-dim", "-8"], "argument --head-dim: -8 is not a positive integer"),
    (["--heads", "6", "--kv-heads", "4"], "--heads 6 is not a multiple of --kv-heads 4"),
    (["--contexts", ""], "argument --contexts: '' has an empty entry"),
    (["--contexts", "512,,4096"], "argument --contexts: '512,,4096' has an empty entry"),
    (["--contexts", "512,0"], "argument --contexts: 0 is not a positive integer"),
    (["--contexts", "512,4k"], "argument --contexts: '4k' is not an integer"),
    (["--contexts", "512,512"], "argument --contexts: '512,512' names 512 more than once"),
    (["--implementations", "fai,fai"], "'fai,fai' names fai more than once"),
    (["--implementations", "fai,,sdpa"], "'fai,,sdpa' has an empty entry"),
])
def test_options_checked_by_the_parser(capsys, argv, message):
    assert message in _parse_error(capsys, argv)


def test_more_threads_than_fai_runs_refused(capsys):
    err = _parse_error(capsys, ["--threads", str(fai.cpu_count() + 1)])
    assert f"fai runs on at most fai.cpu_count() = {fai.cpu_count()} threads" in err


def test_defaults_parse():
    args = bench_model._parse([])
    assert args.contexts == [512, 4096, 16384] and args.implementations == ["fai", "sdpa"]
    args = bench_model._parse(["--contexts", " 64, 128", "--implementations", "fai, eager"])
    assert args.contexts == [64, 128] and args.implementations == ["fai", "eager"]


def test_implementations_registered_or_eager(capsys):
    parser = bench_model._parser()
    registered = {"fai": None, "sdpa": None, "paged|eager": None}
    bench_model._check_implementations(parser, ["fai", "sdpa", "eager"], registered)
    for name in ("fast", "paged|eager"):
        with pytest.raises(SystemExit):
            bench_model._check_implementations(parser, ["fai", name], registered)
        assert f"--implementations: {name} is not a registered" in capsys.readouterr().err


def _tiny_model(torch, transformers):
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, head_dim=8, max_position_embeddings=64)
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").eval()


def test_eager_attention_is_clocked(monkeypatch):
    """eager is not registered in AttentionInterface: the clock wraps the Llama module's own
    function, which the model calls for it (restored after the test)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama import modeling_llama
    monkeypatch.setattr(modeling_llama, "eager_attention_forward",
                        modeling_llama.eager_attention_forward)
    mapping = transformers.AttentionInterface._global_mapping
    monkeypatch.setitem(mapping, "sdpa", mapping["sdpa"])
    clock = bench_model.AttentionClock(["eager", "sdpa"])
    model = _tiny_model(torch, transformers)
    for impl in ("eager", "sdpa"):
        model.set_attn_implementation(impl)
        clock.seconds = 0.0
        with torch.no_grad():
            model(input_ids=torch.arange(8)[None])
        assert clock.seconds > 0, impl


def test_prefill_and_decode_steps_keep_the_cache_lengths():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model = _tiny_model(torch, transformers)
    keyword = bench_model.cache_keyword(model)
    with torch.no_grad():
        cache = bench_model.prefill(model, torch.arange(10)[None], keyword)
        assert cache.get_seq_length() == 10
        bench_model.decode(model, torch.tensor([[3]]), torch.tensor([[10]]), cache, keyword)
    assert cache.get_seq_length() == 10


class _CacheIgnored:
    """A model whose forward takes the cache under a name it then ignores, as an older
    transformers does with a keyword it does not know."""

    class _Out:
        def __init__(self, cache):
            self.cache = cache

    def __init__(self, cache):
        self._cache = cache

    def forward(self, input_ids=None, cache=None, **kwargs):
        return self._Out(self._cache)

    __call__ = forward


class _Cache:
    def __init__(self, length):
        self.length = length

    def get_seq_length(self):
        return self.length

    def crop(self, tokens):
        self.length += tokens


def test_a_cache_the_model_does_not_extend_is_an_error():
    torch = pytest.importorskip("torch")
    model = _CacheIgnored(_Cache(10))
    assert bench_model.cache_keyword(model) == "cache"
    with pytest.raises(SystemExit, match="after the decode step the cache holds 10 tokens, "
                       "expected 11"):
        bench_model.decode(model, torch.tensor([[3]]), torch.tensor([[10]]), _Cache(10),
                           "cache")
    with pytest.raises(SystemExit, match="after the prefill the cache holds 4 tokens, "
                       "expected 10"):
        bench_model.prefill(_CacheIgnored(_Cache(4)), torch.arange(10)[None], "cache")
    with pytest.raises(SystemExit, match="after the prefill the cache holds None tokens"):
        bench_model.prefill(_CacheIgnored(None), torch.arange(10)[None], "cache")

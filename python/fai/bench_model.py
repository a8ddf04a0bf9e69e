"""python -m fai.bench_model: prefill and decode of a transformers model with attn_implementation
"fai" against "sdpa".

    python -m fai.bench_model [--contexts 512,4096,16384] [--layers 2] [--threads 2] [--runs 5]

The model is a randomly initialised Llama with Llama-3-8B's shapes (hidden 4096, 32 query heads,
8 key/value heads, head dim 128, intermediate 14336, vocabulary 128256) cut to --layers layers:
what decides attention's speed is the real width, heads and context, not the depth. Per context:
  prefill  one forward pass over a prompt of that many tokens (logits of the last token only),
           tokens/s = context / time;
  decode   one forward pass of one token on a cache of that many tokens (the cache cropped back
           after each step, so every step sees the same context), tokens/s = 1 / time.
The implementations (each once: registered attention functions, or eager) take turns run by run,
so that a shared machine's load weighs on all alike; figures are medians of --runs. The attention
share is the time inside the attention function (fai's, transformers' sdpa_attention_forward, or
eager's, the Llama module's eager_attention_forward) over the step's time; the mask built once
per step is outside it. Each step's cache length is checked (the context after prefill, one more
after a decode step). torch computes on --threads threads, at most fai.cpu_count(), and fai
follows torch's thread count.
OMP_WAIT_POLICY is PASSIVE unless set (as in python -m fai.bench): see the README on threads.
"""
import argparse
import importlib
import inspect
import json
import os
import statistics
import sys
import time

import fai  # numpy and libfai only: torch is imported in main, after OMP_WAIT_POLICY is set
from fai._cli_lists import comma_list


def _positive(text):
    """An argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return value


def _listed(text, what):
    """The entries of a comma-separated list, each once, none empty."""
    try:
        return comma_list(text, what)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _contexts(text):
    return [_positive(c) for c in _listed(text, "context lengths")]


def _implementations(text):
    return _listed(text, "attn_implementation values")


def _parser():
    p = argparse.ArgumentParser(prog="python -m fai.bench_model", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--contexts", type=_contexts, default="512,4096,16384",
                   help="context lengths, comma-separated, each once")
    p.add_argument("--implementations", type=_implementations, default="fai,sdpa",
                   help="attn_implementation values, each once: registered ones (fai, sdpa, "
                        "...) or eager")
    for name, default in (("--layers", 2), ("--hidden", 4096), ("--heads", 32),
                          ("--kv-heads", 8), ("--head-dim", 128), ("--intermediate", 14336),
                          ("--vocab", 128256)):
        p.add_argument(name, type=_positive, default=default)
    p.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    p.add_argument("--threads", type=_positive, default=2,
                   help="torch's threads, which fai follows (at most fai.cpu_count())")
    p.add_argument("--runs", type=_positive, default=5, help="timed runs per figure (median)")
    p.add_argument("--decode-steps", type=_positive, default=8,
                   help="decode steps timed per run")
    p.add_argument("--no-prefill", action="store_true", help="time decode only (the cache is "
                   "still filled once per context and implementation)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    return p


def _parse(argv, parser=None):
    p = parser or _parser()
    args = p.parse_args(argv)
    if args.heads % args.kv_heads:
        p.error(f"--heads {args.heads} is not a multiple of --kv-heads {args.kv_heads}")
    if args.threads > fai.cpu_count():
        # fai runs on at most its pool's threads, and torch would get more than fai
        p.error(f"--threads {args.threads}: fai runs on at most fai.cpu_count() = "
                f"{fai.cpu_count()} threads, and both implementations get the same count")
    return args


def _check_implementations(parser, names, registered):
    """Refuses names that are neither registered attention functions nor eager, and the paged
    ones (continuous batching's, which need its paged cache, not this benchmark's)."""
    known = {name for name in registered if not name.startswith("paged|")} | {"eager"}
    for name in names:
        if name not in known:
            parser.error(f"--implementations: {name} is not a registered attention "
                         f"implementation (known: {', '.join(sorted(known))})")


class AttentionClock:
    """Wraps the implementations' attention functions to add up the time spent in them: the
    registered ones in AttentionInterface, eager's in the Llama module that calls it."""

    def __init__(self, names):
        from transformers import AttentionInterface
        from transformers.models.llama import modeling_llama

        self.seconds = 0.0
        for name in names:
            if name == "eager":  # not registered: the model falls back to its module's function
                modeling_llama.eager_attention_forward = self._timed(
                    modeling_llama.eager_attention_forward)
            else:
                AttentionInterface.register(
                    name, self._timed(AttentionInterface._global_mapping[name]))

    def _timed(self, function):
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start
        return timed


def _model(args, torch, transformers):
    cfg = transformers.LlamaConfig(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads, head_dim=args.head_dim,
        max_position_embeddings=max(args.contexts) + 64, rope_theta=500000.0)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
    return model.to(getattr(torch, args.dtype)).eval()


def _timed_step(clock, step):
    clock.seconds = 0.0
    start = time.perf_counter()
    step()
    total = time.perf_counter() - start
    return total, clock.seconds


def cache_keyword(model):
    """The name under which this transformers' forward takes the cache and its output returns
    it: `cache` in recent versions, `past_key_values` before."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else \
        "past_key_values"


def _check_length(cache, want, after):
    """A step that did not read or extend the cache as given would time another context."""
    got = cache.get_seq_length() if hasattr(cache, "get_seq_length") else None
    if got != want:
        raise SystemExit(f"fai.bench_model: after the {after} the cache holds {got} tokens, "
                         f"expected {want}: this transformers did not take the cache as passed")


def prefill(model, prompt, keyword):
    """One forward pass over the prompt; returns the cache it filled (checked)."""
    out = model(input_ids=prompt, use_cache=True, logits_to_keep=1)
    cache = getattr(out, keyword, None)
    _check_length(cache, prompt.shape[1], "prefill")
    return cache


def decode(model, token, position, cache, keyword):
    """One forward pass of one token on the cache, which is cropped back after it so that every
    step sees the same context (both lengths checked)."""
    context = cache.get_seq_length()
    model(input_ids=token, position_ids=position, use_cache=True, logits_to_keep=1,
          **{keyword: cache})
    _check_length(cache, context + 1, "decode step")
    cache.crop(-1)  # back to the prompt
    _check_length(cache, context, "crop after a decode step")


def _measure(args, torch, model, clock, context):
    """{implementation: {"prefill": [(seconds, attention seconds)], "decode": [...]}}."""
    gen = torch.Generator().manual_seed(context)
    prompt = torch.randint(0, args.vocab, (1, context), generator=gen)
    token = torch.randint(0, args.vocab, (1, 1), generator=gen)
    position = torch.tensor([[context]])
    keyword = cache_keyword(model)
    caches = {}
    times = {impl: {"prefill": [], "decode": []} for impl in args.implementations}

    def fill(impl):
        caches[impl] = prefill(model, prompt, keyword)

    def step(impl):
        decode(model, token, position, caches[impl], keyword)

    with torch.no_grad():
        for impl in args.implementations:  # warm-up, and the caches decode reads
            model.set_attn_implementation(impl)
            fill(impl)
            step(impl)
        for _ in range(args.runs):
            for impl in args.implementations:
                model.set_attn_implementation(impl)
                if not args.no_prefill:
                    times[impl]["prefill"].append(_timed_step(clock, lambda: fill(impl)))
                for _ in range(args.decode_steps):
                    times[impl]["decode"].append(_timed_step(clock, lambda: step(impl)))
    return times


def _summary(samples, tokens):
    if not samples:
        return None
    total = statistics.median(s for s, _ in samples)
    share = statistics.median(a / s for s, a in samples)
    return {"tokens_per_s": tokens / total, "ms": 1e3 * total, "attention_share": share}


def _set_implementations(parser, model, names):
    """Sets each implementation once before anything is timed: one the model cannot take is
    refused with transformers' reason."""
    for name in names:
        try:
            model.set_attn_implementation(name)
        except (ValueError, ImportError, KeyError) as exc:
            parser.error(f"--implementations: the model cannot take {name}: {exc}")


def main(argv=None):
    parser = _parser()
    args = _parse(argv, parser)
    # torch's OpenMP threads sleep when idle, as fai's do (an OMP_WAIT_POLICY already set is kept):
    # spinning after each operation they would hold the cores the next call needs, fai's threads
    # or torch's own (set before torch is imported, as OpenMP reads it once)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch
    import transformers

    importlib.import_module("fai.integrations.transformers")  # registers "fai"
    _check_implementations(parser, args.implementations,
                           transformers.AttentionInterface._global_mapping)

    torch.set_num_threads(args.threads)
    model = _model(args, torch, transformers)
    _set_implementations(parser, model, args.implementations)
    clock = AttentionClock(args.implementations)
    rows = []
    for context in args.contexts:
        times = _measure(args, torch, model, clock, context)
        for impl in args.implementations:
            rows.append({"context": context, "implementation": impl,
                         "prefill": _summary(times[impl]["prefill"], context),
                         "decode": _summary(times[impl]["decode"], 1)})
    setup = {"layers": args.layers, "hidden": args.hidden, "heads": args.heads,
             "kv_heads": args.kv_heads, "head_dim": args.head_dim,
             "intermediate": args.intermediate, "vocab": args.vocab, "dtype": args.dtype,
             "threads": args.threads, "runs": args.runs, "decode_steps": args.decode_steps,
             "OMP_WAIT_POLICY": os.environ["OMP_WAIT_POLICY"],
             "torch": torch.__version__, "transformers": transformers.__version__}
    if args.json:
        json.dump({"setup": setup, "rows": rows}, sys.stdout, indent=1)
        print()
        return 0
    print(" ".join(f"{k}={v}" for k, v in setup.items()))
    print(f"{'context':>8} {'impl':>6} {'prefill tok/s':>14} {'attn %':>7} "
          f"{'decode tok/s':>13} {'ms/token':>9} {'attn %':>7}")
    for r in rows:
        p, d = r["prefill"], r["decode"]
        pre = f"{p['tokens_per_s']:14.1f} {100 * p['attention_share']:7.1f}" if p else \
            f"{'-':>14} {'-':>7}"
        print(f"{r['context']:8d} {r['implementation']:>6} {pre} {d['tokens_per_s']:13.2f} "
              f"{d['ms']:9.2f} {100 * d['attention_share']:7.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

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
The implementations take turns run by run, so that a shared machine's load weighs on both alike;
figures are medians of --runs. The attention share is the time inside the attention function
(fai's, or transformers' sdpa_attention_forward) over the step's time; the mask built once per
step is outside it. torch computes on --threads threads, and fai follows torch's thread count.
OMP_WAIT_POLICY is PASSIVE unless set (as in python -m fai.bench): see the README on threads.
"""
import argparse
import importlib
import json
import os
import statistics
import sys
import time


def _parse(argv):
    p = argparse.ArgumentParser(prog="python -m fai.bench_model", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--contexts", default="512,4096,16384", help="context lengths, comma-separated")
    p.add_argument("--implementations", default="fai,sdpa", help="attn_implementation values")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--intermediate", type=int, default=14336)
    p.add_argument("--vocab", type=int, default=128256)
    p.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=5, help="timed runs per figure (median)")
    p.add_argument("--decode-steps", type=int, default=8, help="decode steps timed per run")
    p.add_argument("--no-prefill", action="store_true", help="time decode only (the cache is "
                   "still filled once per context and implementation)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    return p.parse_args(argv)


class AttentionClock:
    """Wraps registered attention functions to add up the time spent in them."""

    def __init__(self, names):
        from transformers import AttentionInterface

        self.seconds = 0.0
        for name in names:
            AttentionInterface.register(name, self._timed(AttentionInterface._global_mapping[name]))

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


def _measure(args, torch, model, clock, context):
    """{implementation: {"prefill": [(seconds, attention seconds)], "decode": [...]}}."""
    gen = torch.Generator().manual_seed(context)
    prompt = torch.randint(0, args.vocab, (1, context), generator=gen)
    token = torch.randint(0, args.vocab, (1, 1), generator=gen)
    position = torch.tensor([[context]])
    caches = {}
    times = {impl: {"prefill": [], "decode": []} for impl in args.implementations}

    def prefill(impl):
        out = model(input_ids=prompt, use_cache=True, logits_to_keep=1)
        caches[impl] = out.past_key_values

    def decode(impl):
        cache = caches[impl]
        model(input_ids=token, cache=cache, position_ids=position, use_cache=True,
              logits_to_keep=1)
        cache.crop(-1)  # back to the prompt: every step sees the same context

    with torch.no_grad():
        for impl in args.implementations:  # warm-up, and the caches decode reads
            model.set_attn_implementation(impl)
            prefill(impl)
            decode(impl)
        for _ in range(args.runs):
            for impl in args.implementations:
                model.set_attn_implementation(impl)
                if not args.no_prefill:
                    times[impl]["prefill"].append(_timed_step(clock, lambda: prefill(impl)))
                for _ in range(args.decode_steps):
                    times[impl]["decode"].append(_timed_step(clock, lambda: decode(impl)))
    return times


def _summary(samples, tokens):
    if not samples:
        return None
    total = statistics.median(s for s, _ in samples)
    share = statistics.median(a / s for s, a in samples)
    return {"tokens_per_s": tokens / total, "ms": 1e3 * total, "attention_share": share}


def main(argv=None):
    args = _parse(argv)
    args.contexts = [int(c) for c in args.contexts.split(",") if c]
    args.implementations = [i for i in args.implementations.split(",") if i]
    # torch's OpenMP threads sleep when idle, as fai's do (an OMP_WAIT_POLICY already set is kept):
    # spinning after each operation they would hold the cores the next call needs, fai's threads
    # or torch's own (set before torch is imported, as OpenMP reads it once)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch
    import transformers

    importlib.import_module("fai.integrations.transformers")  # registers "fai"

    torch.set_num_threads(args.threads)
    model = _model(args, torch, transformers)
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

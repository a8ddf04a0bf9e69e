"""python -m fai.bench: fai against PyTorch SDPA, ONNX Runtime and OpenVINO on the benchmark shapes.

    python -m fai.bench [P1 P2 D1 D2 C1] [--threads 2] [--runs 10] [--bf16] [--plot out.png]

Every library runs the same attention on the same values in one process, with the same thread
count (OpenMP threads told to sleep when idle, OMP_WAIT_POLICY=PASSIVE unless set, since the
libraries take turns): median (and min) of --runs timed calls after --warmup untimed ones, the libraries taking
turns call by call so that a shared machine's load weighs on all of them alike. Each peer's output is
compared with fai's (max |diff|), so a row is only reported for a peer that computed the same
thing. Peers that are not installed are left out of the table.

Data types: by default fai reads Q f32, K/V f16 and writes O f32 (the headline configuration).
The peers' attention needs one dtype for Q, K and V, so they get the same values in f32 (f16
values are exact in f32); OpenVINO is told to compute in f32 (INFERENCE_PRECISION_HINT), since it
would pick bf16 on CPUs that have it. With --bf16 everything is bf16: torch in bf16, OpenVINO
with its bf16 precision hint (f32 tensors in and out), ONNX Runtime has no bf16 CPU kernel.

Layouts: fai reads the paged shapes (D1 D2 C1) through a shuffled block table; no peer has a
paged KV cache on CPU, so they get the equivalent dense K/V. Each peer gets its preferred layout
built outside the timed region:
  torch    SDPA on [B, H, S, D]; GQA: K/V repeated to Hq heads for prefill (enable_gqa where
           this torch has it), and for short queries the Hq/Hkv group folded into the query axis
           ([B, Hkv, G*Sq, D]: exact, no K/V copy). Causal: is_causal (top-left) where Sq == Skv,
           else the bottom-right mask as a boolean attn_mask.
  ORT      com.microsoft GroupQueryAttention (GQA shapes: the last Sq keys as new tokens, the
           rest as the past cache in BNSH, bound as a shared past/present buffer, which is how
           ONNX Runtime decodes in place), MultiHeadAttention for P2 (no GQA, not causal).
  OpenVINO opset13 ScaledDotProductAttention on [B, H, S, D], inputs shared, not copied (GQA:
           K/V repeated for square causal prefill, otherwise a kv-head axis broadcast over the
           group, [B, Hkv, G, Sq, D] against [B, Hkv, 1, Skv, D]; bottom-right masks explicit).
"""
import argparse
import functools
import json
import os
import statistics
import sys
import time

import numpy as np

import fai

SHAPES = {
    # name: B, Hq, Hkv, Sq, Skv, D, causal, page_size, what
    "P1": (1, 32, 8, 2048, 2048, 128, True, 0, "prefill GQA causal"),
    "P2": (2, 16, 16, 1024, 1024, 64, False, 0, "prefill MHA"),
    "D1": (8, 32, 8, 1, 4096, 128, False, 128, "batched decode, paged"),
    "D2": (1, 32, 8, 1, 32768, 128, False, 128, "long decode, paged"),
    "C1": (4, 32, 8, 16, 8192, 128, True, 128, "chunked prefill, paged"),
}


class Case:
    """One benchmark shape's data: fai's inputs (paged where the shape is) and the dense
    equivalent [B, S, H, D] as float32 values for the peers."""

    def __init__(self, name, bf16, seed=0):
        B, Hq, Hkv, Sq, Skv, D, causal, ps, what = SHAPES[name]
        self.name, self.what = name, what
        self.B, self.Hq, self.Hkv, self.Sq, self.Skv, self.D = B, Hq, Hkv, Sq, Skv, D
        self.causal, self.page_size = causal, ps
        self.group = Hq // Hkv
        rng = np.random.default_rng(seed)
        if bf16:
            import ml_dtypes

            q_dt = kv_dt = np.dtype(ml_dtypes.bfloat16)
        else:
            q_dt, kv_dt = np.dtype(np.float32), np.dtype(np.float16)
        self.q = rng.standard_normal((B, Sq, Hq, D), dtype=np.float32).astype(q_dt)
        k = rng.standard_normal((B, Skv, Hkv, D), dtype=np.float32).astype(kv_dt)
        v = rng.standard_normal((B, Skv, Hkv, D), dtype=np.float32).astype(kv_dt)
        self.out_dtype = "bfloat16" if bf16 else "float32"
        self.kw = {"causal": causal}
        if ps:
            pages = Skv // ps
            order = rng.permutation(B * pages).astype(np.int32)
            self.block_table = order.reshape(B, pages)
            self.k = np.empty((B * pages, ps, Hkv, D), kv_dt)
            self.v = np.empty((B * pages, ps, Hkv, D), kv_dt)
            for b in range(B):
                for p in range(pages):
                    self.k[self.block_table[b, p]] = k[b, p * ps:(p + 1) * ps]
                    self.v[self.block_table[b, p]] = v[b, p * ps:(p + 1) * ps]
            self.kw.update(block_table=self.block_table,
                           seqlens_kv=np.full(B, Skv, np.int32))
        else:
            self.k, self.v = k, v
        # the peers' float32 values (bf16/f16 values are exact in f32)
        self.q32 = self.q.astype(np.float32)
        self.k32 = k.astype(np.float32)
        self.v32 = v.astype(np.float32)

    @property
    def paged(self):
        return self.page_size > 0

    def bottom_right_keep(self):
        """[Sq, Skv] bool: query i sees keys j <= i + Skv - Sq."""
        i = np.arange(self.Sq)[:, None]
        j = np.arange(self.Skv)[None, :]
        return j <= i + (self.Skv - self.Sq)

    def kv_bytes(self):
        """K and V bytes fai must read (every key is visible in the decode shapes)."""
        return 2.0 * self.B * self.Skv * self.Hkv * self.D * self.k.itemsize

    def flops(self):
        """2*D + 2*Dv per visible (query, key) pair, all heads."""
        if self.causal:
            pairs = sum(min(self.Skv, i + self.Skv - self.Sq + 1) for i in range(self.Sq))
        else:
            pairs = self.Sq * self.Skv
        return self.B * self.Hq * pairs * 4.0 * self.D


# -- fai ------------------------------------------------------------------------------------------

# Each setup_* builds a library's inputs outside the timed region and returns (call, finish,
# note): call() runs the attention once, finish(result) gives O as float32 [B, Sq, Hq, D].

def setup_fai(case, threads, bf16, round_p_bf16=False):
    def make_plan():
        return fai.Plan.like(case.q, case.k, case.v, threads=threads,
                             out_dtype=case.out_dtype, round_p_bf16=round_p_bf16, **case.kw)

    make_plan().close()  # the first plan of a process also starts fai's thread pool
    plan_times = []
    for _ in range(5):
        t0 = time.perf_counter()
        plan = make_plan()
        plan_times.append((time.perf_counter() - t0) * 1e3)
        plan.close()
    plan_ms = statistics.median(plan_times)
    plan = make_plan()
    bt = case.kw.get("block_table")
    info = plan.info
    note = f"plan {plan_ms:.2f} ms, {info['workers']} workers, isa {info['isa']}"
    # the output allocated once, as a serving engine holds it (a fresh array per call would
    # time the kernel's first touch of its pages, which torch's caching allocator never pays)
    out = np.empty(case.q.shape[:3] + (case.D,), case.q.dtype if bf16 else np.float32)
    return (lambda: plan.run(case.q, case.k, case.v, block_table=bt, out=out),
            lambda o: np.asarray(o, np.float32).copy(), note)


# -- torch ----------------------------------------------------------------------------------------

def setup_torch(case, threads, bf16):
    import torch

    F = torch.nn.functional
    torch.set_num_threads(threads)
    dt = torch.bfloat16 if bf16 else torch.float32
    B, Hq, Hkv, Sq, Skv, D, G = case.B, case.Hq, case.Hkv, case.Sq, case.Skv, case.D, case.group
    q = torch.from_numpy(case.q32).to(dt).transpose(1, 2).contiguous()  # [B, Hq, Sq, D]
    k = torch.from_numpy(case.k32).to(dt).transpose(1, 2).contiguous()  # [B, Hkv, Skv, D]
    v = torch.from_numpy(case.v32).to(dt).transpose(1, 2).contiguous()
    kw = {}
    fold = G > 1 and Sq < 64
    how = []
    if case.causal and Sq == Skv:
        kw["is_causal"] = True
        how.append("is_causal")
    elif case.causal:
        keep = torch.from_numpy(case.bottom_right_keep())
        kw["attn_mask"] = keep.repeat(G, 1) if fold else keep
        how.append("bottom-right bool mask")
    if fold:
        q = q.reshape(B, Hkv, G * Sq, D)  # rows (g, i): head h = kv*G + g
        how.append("group folded into queries")
    elif G > 1:
        try:
            F.scaled_dot_product_attention(q[:, :, :1], k[:, :, :1], v[:, :, :1],
                                           enable_gqa=True)
            kw["enable_gqa"] = True
            how.append("enable_gqa")
        except TypeError:
            k = k.repeat_interleave(G, dim=1)
            v = v.repeat_interleave(G, dim=1)
            how.append("K/V repeated")

    def call():
        with torch.inference_mode():
            return F.scaled_dot_product_attention(q, k, v, **kw)

    return (call, lambda out: out.reshape(B, Hq, Sq, D).transpose(1, 2).float().numpy(),
            ", ".join(how) or "plain")


# -- ONNX Runtime ---------------------------------------------------------------------------------

def setup_ort(case, threads, bf16):
    if bf16:
        raise RuntimeError("no bf16 CPU kernel for these contrib ops")
    import onnx  # noqa: F401 - onnx.helper below needs the package
    import onnxruntime as ort
    from onnx import TensorProto, helper

    B, Hq, Hkv, Sq, Skv, D = case.B, case.Hq, case.Hkv, case.Sq, case.Skv, case.D
    f32 = TensorProto.FLOAT
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    q = np.ascontiguousarray(case.q32.reshape(B, Sq, Hq * D))

    def model(nodes, inputs, outputs):
        graph = helper.make_graph(nodes, "attention", inputs, outputs)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
        m.ir_version = 10
        return ort.InferenceSession(m.SerializeToString(), opts,
                                    providers=["CPUExecutionProvider"])

    if Hq == Hkv and not case.causal:
        node = helper.make_node("MultiHeadAttention", ["query", "key", "value"], ["output"],
                                domain="com.microsoft", num_heads=Hq)
        inputs = [helper.make_tensor_value_info(n, f32, [B, s, h * D])
                  for n, s, h in (("query", Sq, Hq), ("key", Skv, Hkv), ("value", Skv, Hkv))]
        sess = model([node], inputs, [helper.make_tensor_value_info("output", f32,
                                                                    [B, Sq, Hq * D])])
        feeds = {"query": q, "key": np.ascontiguousarray(case.k32.reshape(B, Skv, Hkv * D)),
                 "value": np.ascontiguousarray(case.v32.reshape(B, Skv, Hkv * D))}
        return (lambda: sess.run(["output"], feeds)[0], lambda out: out.reshape(B, Sq, Hq, D),
                "MultiHeadAttention")

    if not case.causal and Sq != 1:
        raise RuntimeError("GroupQueryAttention is always causal")
    # GroupQueryAttention: the last Sq keys are the new tokens, the others the past (BNSH)
    past = Skv - Sq
    node = helper.make_node(
        "GroupQueryAttention",
        ["query", "key", "value", "past_key", "past_value", "seqlens_k",
         "total_sequence_length"],
        ["output", "present_key", "present_value"], domain="com.microsoft", num_heads=Hq,
        kv_num_heads=Hkv)
    # ONNX Runtime takes batch 1 only when several new tokens meet a past: then one call per
    # sequence, timed together
    per_seq = B > 1 and Sq > 1 and past > 0
    nb = 1 if per_seq else B
    inputs = [helper.make_tensor_value_info("query", f32, [nb, Sq, Hq * D]),
              helper.make_tensor_value_info("key", f32, [nb, Sq, Hkv * D]),
              helper.make_tensor_value_info("value", f32, [nb, Sq, Hkv * D]),
              helper.make_tensor_value_info("past_key", f32, [nb, Hkv, Skv, D]),
              helper.make_tensor_value_info("past_value", f32, [nb, Hkv, Skv, D]),
              helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, [nb]),
              helper.make_tensor_value_info("total_sequence_length", TensorProto.INT32, [])]
    outputs = [helper.make_tensor_value_info("output", f32, [nb, Sq, Hq * D]),
               helper.make_tensor_value_info("present_key", f32, [nb, Hkv, Skv, D]),
               helper.make_tensor_value_info("present_value", f32, [nb, Hkv, Skv, D])]
    sess = model([node], inputs, outputs)
    k_bnsh = np.ascontiguousarray(case.k32.transpose(0, 2, 1, 3))
    v_bnsh = np.ascontiguousarray(case.v32.transpose(0, 2, 1, 3))
    bindings = []
    keep = []
    for b0 in range(0, B, nb):
        sl = slice(b0, b0 + nb)
        # past_key and present_key are one buffer of Skv positions (ONNX Runtime then appends
        # the new tokens in place): the first `past` hold the past, the new keys go after them
        pk = ort.OrtValue.ortvalue_from_numpy(k_bnsh[sl].copy())
        pv = ort.OrtValue.ortvalue_from_numpy(v_bnsh[sl].copy())
        feeds = {"query": np.ascontiguousarray(q[sl]),
                 "key": np.ascontiguousarray(case.k32[sl, past:].reshape(nb, Sq, Hkv * D)),
                 "value": np.ascontiguousarray(case.v32[sl, past:].reshape(nb, Sq, Hkv * D)),
                 "seqlens_k": np.full(nb, Skv - 1, np.int32),
                 "total_sequence_length": np.array(Skv, np.int32)}
        binding = sess.io_binding()
        for name, arr in feeds.items():
            binding.bind_cpu_input(name, arr)
        binding.bind_ortvalue_input("past_key", pk)
        binding.bind_ortvalue_input("past_value", pv)
        binding.bind_output("output", "cpu")
        binding.bind_ortvalue_output("present_key", pk)
        binding.bind_ortvalue_output("present_value", pv)
        bindings.append(binding)
        keep.append((pk, pv, feeds))

    def call():
        outs = []
        for binding in bindings:
            sess.run_with_iobinding(binding)
            outs.append(binding.get_outputs()[0].numpy())
        return np.concatenate(outs) if len(outs) > 1 else outs[0]

    return (call, lambda out: out.reshape(B, Sq, Hq, D),
            "GroupQueryAttention, shared past/present buffer"
            + (f", one call per sequence ({B})" if per_seq else ""))


# -- OpenVINO -------------------------------------------------------------------------------------

def setup_openvino(case, threads, bf16):
    import openvino as ov

    try:
        from openvino import opset13 as ops
    except ImportError:  # older releases
        from openvino.runtime import opset13 as ops
    B, Hq, Hkv, Sq, Skv, D, G = case.B, case.Hq, case.Hkv, case.Sq, case.Skv, case.D, case.group
    q = np.ascontiguousarray(case.q32.transpose(0, 2, 1, 3))  # [B, Hq, Sq, D]
    k = np.ascontiguousarray(case.k32.transpose(0, 2, 1, 3))  # [B, Hkv, Skv, D]
    v = np.ascontiguousarray(case.v32.transpose(0, 2, 1, 3))
    # GQA: K/V repeated for square causal prefill (the causal flag's fast path), otherwise a
    # kv-head axis that broadcasts over the group ([B, Hkv, G, Sq, D] against [B, Hkv, 1, S, D])
    how = []
    if G > 1 and case.causal and Sq == Skv:
        k = np.ascontiguousarray(np.repeat(k, G, axis=1))
        v = np.ascontiguousarray(np.repeat(v, G, axis=1))
        how.append("K/V repeated")
    elif G > 1:
        q = q.reshape(B, Hkv, G, Sq, D)
        k = k[:, :, None]
        v = v[:, :, None]
        how.append("group axis broadcast (5-D)")
    params = [ops.parameter(list(a.shape), ov.Type.f32, name=n)
              for n, a in (("q", q), ("k", k), ("v", v))]
    args = list(params)
    causal_flag = False
    if case.causal and Sq == Skv:
        causal_flag = True
        how.append("causal=True")
    elif case.causal:
        args.append(ops.constant(case.bottom_right_keep()))
        how.append("bottom-right bool mask")
    node = ops.scaled_dot_product_attention(*args, causal=causal_flag)
    model = ov.Model([node], params, "attention")
    config = {"INFERENCE_NUM_THREADS": threads,
              "INFERENCE_PRECISION_HINT": "bf16" if bf16 else "f32"}
    compiled = ov.Core().compile_model(model, "CPU", config)
    request = compiled.create_infer_request()
    feeds = {"q": q, "k": k, "v": v}

    def call():
        request.infer(feeds, share_inputs=True)  # read the arrays in place, as fai does
        return request.get_output_tensor(0).data

    return (call, lambda out: np.array(out).reshape(B, Hq, Sq, D).transpose(0, 2, 1, 3),
            ", ".join(how) or "plain")


PEERS = {"torch": ("torch SDPA", setup_torch), "ort": ("ONNX Runtime", setup_ort),
         "openvino": ("OpenVINO", setup_openvino)}


def measure(setups, case, threads, bf16, runs, warmup):
    """Sets every library up, warms each one, then times them in turns (run r calls every
    library once, starting from a different one each time), so that the load of a shared machine
    weighs on all of them alike. Returns {label: (median_ms, min_ms, O float32, note)} and
    {label: error} for the libraries that could not run."""
    ready, errors = {}, {}
    for label, setup in setups:
        try:
            call, finish, note = setup(case, threads, bf16)
            for _ in range(warmup):
                call()
            ready[label] = (call, finish, note)
        except Exception as exc:  # noqa: BLE001 - a peer that cannot run a shape says why
            errors[label] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
    labels = list(ready)
    times = {label: [] for label in labels}
    last = {}
    for r in range(runs):
        for n in range(len(labels)):
            label = labels[(r + n) % len(labels)]
            t0 = time.perf_counter()
            last[label] = ready[label][0]()
            times[label].append((time.perf_counter() - t0) * 1e3)
    results = {label: (statistics.median(times[label]), min(times[label]),
                       np.asarray(ready[label][1](last[label]), np.float32), ready[label][2])
               for label in labels}
    return results, errors


def _missing(peer):
    """The modules a peer needs that are not installed (none: the peer can run)."""
    mods = {"torch": ["torch"], "ort": ["onnxruntime", "onnx"], "openvino": ["openvino"]}[peer]
    import importlib.util

    return [m for m in mods if importlib.util.find_spec(m) is None]


def _plot(rows, names, path, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shapes = [r["shape"] for r in rows]
    width = 0.8 / len(names)
    fig, ax = plt.subplots(figsize=(2 + 1.6 * len(shapes), 4.5))
    for n, lib in enumerate(names):
        xs, ys = [], []
        for s, r in enumerate(rows):
            t = r["results"].get(lib, {}).get("median_ms")
            if t is not None:
                xs.append(s + (n - (len(names) - 1) / 2) * width)
                ys.append(t)
        bars = ax.bar(xs, ys, width, label=lib)
        for bar, y in zip(bars, ys):
            ax.annotate(f"{y:.3g}", (bar.get_x() + bar.get_width() / 2, y), ha="center",
                        va="bottom", fontsize=7)
    ax.set_xticks(range(len(shapes)))
    ax.set_xticklabels([f"{r['shape']}\n{r['what']}" for r in rows], fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("median time per call, ms (log scale; lower is better)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    # OpenMP threads (torch's, ONNX Runtime's) spin after a parallel region by default, taking
    # the cores from the library that runs next; calls take turns here, so every library's
    # threads sleep when idle, as fai's do (an OMP_WAIT_POLICY already set is kept)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    ap = argparse.ArgumentParser(
        prog="python -m fai.bench", description=__doc__.split("\n\n")[0],
        epilog="Ratios are peer time / fai time: above 1 means fai is faster.")
    ap.add_argument("shapes", nargs="*", default=list(SHAPES), metavar="SHAPE",
                    help=f"benchmark shapes (default: all of {' '.join(SHAPES)})")
    ap.add_argument("--threads", type=int, default=fai.cpu_count(),
                    help="threads for every library (default: online CPUs)")
    ap.add_argument("--runs", type=int, default=10, help="timed calls per library and shape")
    ap.add_argument("--warmup", type=int, default=2, help="untimed calls first")
    ap.add_argument("--bf16", action="store_true", help="all-bf16 instead of Q f32, K/V f16")
    ap.add_argument("--peers", default="torch,ort,openvino",
                    help="comma-separated peers among torch, ort, openvino, or 'none'")
    ap.add_argument("--plot", default="fai_bench.png", help="PNG to write (default %(default)s)")
    ap.add_argument("--no-plot", action="store_true", help="write no PNG")
    ap.add_argument("--json", metavar="PATH", help="also write one JSON object per shape")
    ap.add_argument("--round-p-bf16", action="store_true",
                    help="fai rounds P to bf16 on a matrix engine, as torch and vLLM do "
                         "(faster; see fai.h)")
    args = ap.parse_args(argv)

    for s in args.shapes:
        if s not in SHAPES:
            ap.error(f"unknown shape {s} (known: {' '.join(SHAPES)})")
    if args.threads < 1 or args.runs < 1 or args.warmup < 0:
        ap.error("--threads and --runs must be >= 1, --warmup >= 0")
    peers = [] if args.peers == "none" else [p.strip() for p in args.peers.split(",") if p]
    for p in peers:
        if p not in PEERS:
            ap.error(f"unknown peer {p} (known: {' '.join(PEERS)})")
    skipped = [p for p in peers if _missing(p)]
    peers = [p for p in peers if p not in skipped]
    if args.bf16:
        try:
            import ml_dtypes  # noqa: F401
        except ImportError:
            ap.error("--bf16 needs ml_dtypes (pip install ml_dtypes)")

    dtypes = ("all bf16" if args.bf16 else
              "fai: Q f32, K/V f16, O f32; peers: f32 (one dtype for Q, K, V)")
    print(f"fai {fai.__version__} ({fai.library_path()}), {args.threads} threads, median of "
          f"{args.runs} runs after {args.warmup} warm-up; {dtypes}; "
          f"OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}"
          + ("; fai rounds P to bf16" if args.round_p_bf16 else ""))
    for p in skipped:
        print(f"  {PEERS[p][0]}: left out, {' and '.join(_missing(p))} not installed")
    names = ["fai"] + [PEERS[p][0] for p in peers]
    rows = []
    notes = []
    for shape in args.shapes:
        case = Case(shape, args.bf16)
        row = {"shape": shape, "what": case.what, "threads": args.threads,
               "dtypes": "bf16" if args.bf16 else "q f32, kv f16, o f32", "results": {}}
        fai_setup = (functools.partial(setup_fai, round_p_bf16=True) if args.round_p_bf16
                     else setup_fai)
        setups = [("fai", fai_setup)] + [PEERS[p] for p in peers]
        results, errors = measure(setups, case, args.threads, args.bf16, args.runs, args.warmup)
        if "fai" not in results:
            raise SystemExit(f"fai could not run {shape}: {errors.get('fai')}")
        median, best, ref, note = results["fai"]
        row["results"]["fai"] = {"median_ms": median, "min_ms": best,
                                 "gflops": case.flops() / median / 1e6,
                                 "kv_gbps": case.kv_bytes() / median / 1e6, "note": note}
        row["rate"] = (f"{case.kv_bytes() / median / 1e6:.1f} GB/s" if case.Sq == 1 else
                       f"{case.flops() / median / 1e6:.0f} GFLOP/s")
        notes.append(f"{shape} fai: {note}" + ("; K/V paged (block table)" if case.paged
                                                 else ""))
        tol = 2e-2 if args.bf16 else 1e-3
        for p in peers:
            label = PEERS[p][0]
            if label in errors:
                row["results"][label] = {"error": errors[label]}
                notes.append(f"{shape} {label}: n/a ({errors[label]})")
                continue
            pm, pb, out, how = results[label]
            diff = float(np.max(np.abs(out - ref)))
            ok = bool(diff <= tol)
            row["results"][label] = {"median_ms": pm, "min_ms": pb, "ratio": pm / median,
                                     "max_abs_diff": diff, "same_result": ok, "note": how}
            notes.append(f"{shape} {label}: {how}" + ("; dense K/V (no paged cache)"
                                                      if case.paged else "")
                         + ("" if ok else f"; OUTPUT DIFFERS from fai's (max |diff| {diff:.3g})"))
        rows.append(row)
        del case

    # the table
    head = ["shape", "what", "fai ms"] + [f"{n} ms (x fai)" for n in names[1:]]
    lines = [head]
    for r in rows:
        res = r["results"]
        cells = [r["shape"], r["what"],
                 f"{res['fai']['median_ms']:.2f} ({r['rate']})"]
        for n in names[1:]:
            x = res.get(n, {})
            if "median_ms" in x:
                flag = "" if x["same_result"] else " !"
                cells.append(f"{x['median_ms']:.2f} ({x['ratio']:.2f}x){flag}")
            else:
                cells.append("n/a")
        lines.append(cells)
    widths = [max(len(line[c]) for line in lines) for c in range(len(head))]
    print()
    print("| " + " | ".join(h.ljust(w) for h, w in zip(head, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for line in lines[1:]:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(line, widths)) + " |")
    print()
    print("(x fai) = peer median / fai median: above 1, fai is faster. '!' marks a peer whose "
          "output differs from fai's.")
    for n in notes:
        print("  " + n)

    if args.json:
        with open(args.json, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    if not args.no_plot:
        try:
            title = (f"fai vs peers, {args.threads} threads, median of {args.runs}; "
                     f"{'all bf16' if args.bf16 else 'fai Q f32 K/V f16, peers f32'}")
            _plot(rows, names, args.plot, title)
            print(f"plot: {args.plot}")
        except ImportError:
            print("plot: matplotlib is not installed (the package's bench extra has it: pip "
                  "install './python[bench]'); no PNG written")
    return 0


if __name__ == "__main__":
    sys.exit(main())

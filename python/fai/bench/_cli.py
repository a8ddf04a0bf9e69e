"""The command: options, then each shape timed on fai and the peers, then the report."""
import argparse
import functools
import importlib.util
import os

import numpy as np

import fai

from . import __doc__ as _DOC
from .._cli_lists import comma_list
from ._cases import SHAPES, Case
from ._evict import Evictor
from ._fai import setup_fai
from ._measure import measure
from ._peers import PEERS, left_out
from ._report import print_table, write_json, write_plot

_PLOT = "fai_bench.png"


def _parse(argv):
    ap = argparse.ArgumentParser(
        prog="python -m fai.bench", description=_DOC.split("\n\n")[0],
        epilog="Ratios are peer time / fai time: above 1 means fai is faster.")
    ap.add_argument("shapes", nargs="*", default=list(SHAPES), metavar="SHAPE",
                    help=f"benchmark shapes, each once (default: all of {' '.join(SHAPES)})")
    ap.add_argument("--threads", type=int, default=fai.cpu_count(),
                    help="threads for every library, at most fai.cpu_count() (default: online "
                         "CPUs)")
    ap.add_argument("--runs", type=int, default=10, help="timed calls per library and shape")
    ap.add_argument("--warmup", type=int, default=2, help="untimed calls first")
    ap.add_argument("--bf16", action="store_true", help="all-bf16 instead of Q f32, K/V f16")
    ap.add_argument("--peers", default="torch,ort,openvino",
                    help="comma-separated peers among torch, ort, openvino, each once, or 'none'")
    ap.add_argument("--plot", help=f"PNG to write (default {_PLOT})")
    ap.add_argument("--no-plot", action="store_true", help="write no PNG")
    ap.add_argument("--json", metavar="PATH", help="also write one JSON object per shape")
    ap.add_argument("--numpy-kv", action="store_true",
                    help="fai's paged K/V (D1 D2 C1) in plain numpy arrays instead of "
                         "fai.empty_cache (huge pages asked for)")
    ap.add_argument("--cold", action="store_true",
                    help="empty the caches before every call (a buffer of at least 1 GiB read, "
                         "untimed): decode then reads its K/V from memory, not from what the "
                         "last call left in a large L3")
    ap.add_argument("--round-p-bf16", action="store_true",
                    help="fai rounds P to bf16 where PV multiplies in bf16 (the matrix engine "
                         "with 16-bit K/V, or all-bf16 on bf16 dot products), as torch and vLLM "
                         "do (faster; see fai.h); each shape's note says whether it did")
    args = ap.parse_args(argv)

    _check_shapes(ap, args.shapes)
    if args.threads < 1 or args.runs < 1 or args.warmup < 0:
        ap.error("--threads and --runs must be >= 1, --warmup >= 0")
    if args.threads > fai.cpu_count():
        # fai runs on at most its pool's threads: the peers would get more than fai
        ap.error(f"--threads {args.threads}: fai runs on at most fai.cpu_count() = "
                 f"{fai.cpu_count()} threads, and every library gets the same count")
    args.peers = _peers(ap, args.peers)
    if args.bf16 and importlib.util.find_spec("ml_dtypes") is None:
        ap.error("--bf16 needs ml_dtypes (pip install ml_dtypes)")
    if args.no_plot and args.plot is not None:
        ap.error(f"--no-plot and --plot {args.plot}: give one of them")
    if args.plot is None:
        args.plot = _PLOT
    for option, path in (("--json", args.json), ("--plot", None if args.no_plot else args.plot)):
        if path is not None:
            _check_writable(ap, option, path)
    return args


def _check_shapes(ap, shapes):
    for s in shapes:
        if s not in SHAPES:
            ap.error(f"unknown shape {s} (known: {' '.join(SHAPES)})")
    repeated = sorted({s for s in shapes if shapes.count(s) > 1})
    if repeated:
        ap.error(f"shape {' '.join(repeated)} given more than once")


def _peers(ap, text):
    """The --peers list: known names, each once, no empty entry ('none': no peer)."""
    if text == "none":
        return []
    try:
        peers = comma_list(text, f"peer names among {', '.join(PEERS)}")
    except ValueError as e:
        ap.error(f"--peers {e}")
    for p in peers:
        if p not in PEERS:
            ap.error(f"unknown peer {p} (known: {' '.join(PEERS)})")
    return peers


def _check_writable(ap, option, path):
    """Refuses, before anything is timed, a path whose file could not be written."""
    full = os.path.abspath(path)
    folder = os.path.dirname(full)
    if os.path.isdir(full):
        ap.error(f"{option} {path!r} is a directory")
    if not os.path.isdir(folder):
        ap.error(f"{option} {path!r}: the directory {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK) or (os.path.exists(full)
                                                   and not os.access(full, os.W_OK)):
        ap.error(f"{option} {path!r} is not writable")


def _run_shape(shape, args, peers, evict=None):
    """Times one shape on fai and the peers (with `evict` called before every call); returns its
    row (the table's and the JSON's) and its notes."""
    case = Case(shape, args.bf16, numpy_kv=args.numpy_kv)
    row = {"shape": shape, "what": case.what, "threads": args.threads, "cold": evict is not None,
           "dtypes": "bf16" if args.bf16 else "q f32, kv f16, o f32", "results": {}}
    if case.paged:
        row["kv_memory"] = case.kv_memory
    notes = []
    fai_setup = (functools.partial(setup_fai, round_p_bf16=True) if args.round_p_bf16
                 else setup_fai)
    setups = [("fai", fai_setup)] + [PEERS[p] for p in peers]
    results, errors = measure(setups, case, args.threads, args.bf16, args.runs, args.warmup,
                              evict)
    if "fai" not in results:
        raise SystemExit(f"fai could not run {shape}: {errors.get('fai')}")
    median, best, ref, note = results["fai"]
    row["results"]["fai"] = {"median_ms": median, "min_ms": best,
                             "gflops": case.flops() / median / 1e6,
                             "kv_gbps": case.kv_bytes() / median / 1e6, "note": note}
    row["rate"] = (f"{case.kv_bytes() / median / 1e6:.1f} GB/s" if case.Sq == 1 else
                   f"{case.flops() / median / 1e6:.0f} GFLOP/s")
    notes.append(f"{shape} fai: {note}" + (f"; K/V paged (block table) in {case.kv_memory}"
                                           if case.paged else ""))
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
    return row, notes


def main(argv=None):
    # OpenMP threads (torch's, ONNX Runtime's) spin after a parallel region by default, taking
    # the cores from the library that runs next; calls take turns here, so every library's
    # threads sleep when idle, as fai's do (an OMP_WAIT_POLICY already set is kept)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    args = _parse(argv)
    absent = {p: left_out(p) for p in args.peers}
    peers = [p for p in args.peers if absent[p] is None]

    dtypes = ("all bf16" if args.bf16 else
              "fai: Q f32, K/V f16, O f32; peers: f32 (one dtype for Q, K, V)")
    print(f"fai {fai.__version__} ({fai.library_path()}), {args.threads} threads, median of "
          f"{args.runs} runs after {args.warmup} warm-up; {dtypes}; "
          f"OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}"
          + ("; fai rounds P to bf16 where PV multiplies in bf16 (see the notes)"
             if args.round_p_bf16 else ""))
    evict = Evictor() if args.cold else None
    if evict:
        print(f"  cold: before every call, {evict.bytes >> 20} MiB read to empty the caches "
              "(not timed)")
    for why in absent.values():
        if why:
            print("  " + why)
    names = ["fai"] + [PEERS[p][0] for p in peers]
    rows, notes = [], []
    for shape in args.shapes:
        row, shape_notes = _run_shape(shape, args, peers, evict)
        rows.append(row)
        notes += shape_notes

    print_table(rows, names, notes)
    written = True
    if args.json:
        line = write_json(rows, args.json)
        written = line is None
        if line:
            print(line)
    if not args.no_plot:
        title = (f"fai vs peers, {args.threads} threads, median of {args.runs}; "
                 f"{'all bf16' if args.bf16 else 'fai Q f32 K/V f16, peers f32'}")
        line = write_plot(rows, names, args.plot, title)
        written = written and not line.startswith("plot: could not")
        print(line)
    return 0 if written else 1

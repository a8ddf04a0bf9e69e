#!/usr/bin/env bash
# fai-mpi run against fai run on the same .npy files: K/V sharded (dense and paged, with masks,
# lengths and windows) and ring prefill (causal or not, uneven lengths, 16-bit dtypes), quantized
# K and V with their scales per token (sharded with the keys), per kv head and per tensor; O and LSE
# must agree within the design's tolerances. Bad input exits 2 with one line on stderr and no
# output file. Then one short fai-mpi bench run, its JSON figures checked for sanity.
#
# usage: test_mpi_run.sh /path/to/fai-mpi /path/to/fai [mpiexec] [numproc flag] [ranks]
set -euo pipefail
fai_mpi=${1:?usage: test_mpi_run.sh /path/to/fai-mpi /path/to/fai [mpiexec] [-n] [ranks]}
fai=${2:?usage: test_mpi_run.sh /path/to/fai-mpi /path/to/fai [mpiexec] [-n] [ranks]}
mpiexec=${3:-mpiexec}
np_flag=${4:--n}
ranks=${5:-4}
python3 -c 'import numpy' 2>/dev/null || { echo "test_mpi_run: numpy is required"; exit 1; }
# Open MPI: ranks beyond the cores, as root in containers, quiet about a rank's exit status
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1}
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
export OMPI_MCA_rmaps_base_oversubscribe=${OMPI_MCA_rmaps_base_oversubscribe:-1}
export OMPI_MCA_orte_execute_quiet=${OMPI_MCA_orte_execute_quiet:-1}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

python3 - "$fai_mpi" "$fai" "$mpiexec" "$np_flag" "$ranks" "$tmp" <<'PY'
import os, subprocess, sys
import numpy as np

fai_mpi, fai, mpiexec, np_flag, ranks, tmp = sys.argv[1:]
rng = np.random.default_rng(7)
failures = []


def bf16_bits(x):
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def values(arr, dtype):
    if dtype == "bf16":
        return (arr.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return arr.astype(np.float64)


def save(name, arr):
    path = os.path.join(tmp, name)
    np.save(path, arr)
    return path


def tensor(shape, dtype):
    x = rng.standard_normal(shape).astype(np.float32)
    return bf16_bits(x) if dtype == "bf16" else x.astype(np.float16 if dtype == "f16" else np.float32)


def mpirun(args):
    cmd = [mpiexec, np_flag, ranks, fai_mpi, "run"] + args
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def compare(name, args, low_precision=False, out_dtype="f32"):
    """fai run and fai-mpi run on the same files: O and LSE within the tolerances."""
    ref_o, ref_l = os.path.join(tmp, name + "_ref_o.npy"), os.path.join(tmp, name + "_ref_l.npy")
    got_o, got_l = os.path.join(tmp, name + "_o.npy"), os.path.join(tmp, name + "_l.npy")
    single = [a for a in args if a != "--ring"]
    r = subprocess.run([fai, "run"] + single + ["--out", ref_o, "--lse", ref_l],
                       capture_output=True, text=True)
    if r.returncode != 0:
        failures.append("%s: fai run failed: %s" % (name, r.stderr.strip()))
        return
    r = mpirun(args + ["--out", got_o, "--lse", got_l])
    if r.returncode != 0:
        failures.append("%s: fai-mpi run exit %d: %s" % (name, r.returncode, r.stderr.strip()))
        return
    want, got = values(np.load(ref_o), out_dtype), values(np.load(got_o), out_dtype)
    # the same values read whole and sharded: the merge's roundings, inside 2^-14; both outputs
    # rounded to out_dtype, so a whole step of it apart where they straddle a rounding boundary
    tol = 2.0 ** -14 if low_precision else 1e-5
    step = {"f32": 0.0, "f16": 2.0 ** -10, "bf16": 2.0 ** -7}[out_dtype]
    excess = np.abs(got - want) - (tol * np.maximum(1.0, np.abs(want)) + step * np.abs(want))
    lw, lg = np.load(ref_l).astype(np.float64), np.load(got_l).astype(np.float64)
    finite = np.isfinite(lw)
    lse_ok = np.array_equal(np.isfinite(lg), finite) and np.array_equal(lw[~finite], lg[~finite])
    lse_excess = np.abs(lg[finite] - lw[finite]) - tol * np.maximum(1.0, np.abs(lw[finite]))
    if got.shape != want.shape or excess.max(initial=-1) > 0 or not lse_ok or \
            lse_excess.max(initial=-1) > 0:
        failures.append("%s: O off by %.3g over the tolerance, LSE %s" %
                        (name, excess.max(initial=0), "ok" if lse_ok else "-inf differ"))


def qkv(b, sq, skv, hq, hkv, d, dtype="f32", kv_dtype=None, prefix="x"):
    kv_dtype = kv_dtype or dtype
    return ["--q", save(prefix + "_q.npy", tensor((b, sq, hq, d), dtype)),
            "--k", save(prefix + "_k.npy", tensor((b, skv, hkv, d), kv_dtype)),
            "--v", save(prefix + "_v.npy", tensor((b, skv, hkv, d), kv_dtype))]


# K/V sharded by ranges of Skv, and ring prefill, on the same causal GQA prompt
args = qkv(2, 45, 45, 4, 2, 16, prefix="causal")
compare("kv_causal", args + ["--causal"])
compare("ring_causal", args + ["--causal", "--ring"])
compare("ring_causal_top_left", args + ["--causal-top-left", "--ring", "--workers", "3"])

# ring: uneven length, not causal, bf16 inputs and f16 output; and a window
args = qkv(1, 203, 203, 4, 1, 8, dtype="bf16", prefix="ring")
compare("ring_bf16", args + ["--bf16", "--ring", "--out-dtype", "f16"], True, "f16")
compare("ring_window", args + ["--bf16", "--ring", "--causal", "--window", "20,-1"], True)
args = qkv(1, 3, 3, 2, 1, 8, prefix="tiny")  # fewer rows than chunks
compare("ring_tiny", args + ["--ring", "--causal"])

# paged K/V with a shuffled table, lengths and an additive per-head mask over the shard's keys
b, sq, hq, hkv, d, ps, pages = 3, 5, 4, 2, 16, 8, 9
lens = np.array([70, 33, 1], dtype=np.int32)
table = rng.permutation(3 * pages).astype(np.int32).reshape(3, pages)
mask = np.where(rng.random((b, hq, sq, 72)) < 0.2, -np.inf, rng.standard_normal((b, hq, sq, 72)))
args = ["--q", save("p_q.npy", tensor((b, sq, hq, d), "f32")),
        "--k", save("p_k.npy", tensor((3 * pages, ps, hkv, d), "f16")),
        "--v", save("p_v.npy", tensor((3 * pages, ps, hkv, d), "f16")),
        "--block-table", save("p_bt.npy", table), "--seqlens-kv", save("p_skv.npy", lens)]
compare("paged_mask_add", args + ["--causal", "--mask-add",
                                  save("p_mask.npy", mask.astype(np.float32))], True)
compare("paged_decode_bf16_out", ["--q", save("p_q1.npy", tensor((b, 1, hq, d), "f32"))] +
        args[2:] + ["--out-dtype", "bf16", "--window", "30,-1", "--causal"], True, "bf16")

# dense with padded lengths, a keep mask [Sq, Skv] and a window
args = qkv(2, 12, 50, 6, 3, 24, prefix="dense")
args += ["--seqlens-q", save("d_sq.npy", np.array([12, 7], dtype=np.int32)),
         "--seqlens-kv", save("d_skv.npy", np.array([50, 19], dtype=np.int32)),
         "--mask", save("d_keep.npy", rng.random((12, 50)) < 0.8)]
compare("dense_lengths_keep_window", args + ["--causal", "--window", "10,-1"])
# more queries than keys (the first see nothing), and top-left causal with Sq < Skv
compare("more_queries_than_keys", qkv(1, 30, 9, 2, 2, 8, prefix="mq") + ["--causal"])
compare("top_left", qkv(1, 6, 40, 2, 1, 8, prefix="tl") + ["--causal-top-left"])
# a scale of 0 is taken as given: every visible key weighs the same
compare("scale_zero", qkv(1, 6, 40, 2, 1, 8, prefix="s0") + ["--causal", "--scale", "0"])

# quantized K and V: int8 codes and fp8 codes as uint8 bytes (exponents in a middle range: no
# NaN or Inf), scales per token (cut with the keys: by ranges, by pages, in zig-zag chunks for
# the ring), per kv head and per tensor
def codes(shape, dtype):
    if dtype == "i8":
        return rng.integers(-127, 128, shape).astype(np.int8)
    return (rng.integers(0x20, 0x60, shape) | (rng.integers(0, 2, shape) << 7)).astype(np.uint8)


def scales(shape, qmax):
    return (rng.uniform(0.5, 1.5, shape) / qmax).astype(np.float32)


b, s, hq, hkv, d = 2, 37, 4, 2, 16
args = ["--q", save("qz_q.npy", tensor((b, s, hq, d), "f32")),
        "--k", save("qz_k.npy", codes((b, s, hkv, d), "i8")),
        "--v", save("qz_v.npy", codes((b, s, hkv, d), "e4m3")), "--v-dtype", "e4m3",
        "--k-scale", save("qz_ks.npy", scales((b, s, hkv), 127.0)),
        "--v-scale", save("qz_vs.npy", scales((hkv,), 30.0))]
compare("kv_quantized", args + ["--causal"], True)
compare("ring_quantized", args + ["--causal", "--ring"], True)
compare("ring_quantized_v_per_token", args[:-2] + [
    "--v-scale", save("qz_vs_token.npy", scales((b, s, hkv), 30.0))] + ["--ring"], True)
# K's channel scales beside its per-token ones, K/V sharded by ranges and on the ring
channels = ["--k-channel-scale", save("qz_kc.npy", rng.uniform(0.25, 4.0, (hkv, d)).astype(np.float32))]
compare("kv_quantized_channels", args + channels + ["--causal"], True)
compare("ring_quantized_channels", args + channels + ["--causal", "--ring"], True)
lens = np.array([70, 33, 1], dtype=np.int32)
table = rng.permutation(3 * pages).astype(np.int32).reshape(3, pages)
args = ["--q", save("pz_q.npy", tensor((3, 2, hq, d), "f16")),
        "--k", save("pz_k.npy", codes((3 * pages, ps, hkv, d), "e5m2")), "--k-dtype", "e5m2",
        "--v", save("pz_v.npy", codes((3 * pages, ps, hkv, d), "i8")),
        "--k-scale", save("pz_ks.npy", scales((3 * pages, ps, hkv), 300.0)),
        "--v-scale", save("pz_vs.npy", scales((), 127.0)),
        "--block-table", save("pz_bt.npy", table), "--seqlens-kv", save("pz_skv.npy", lens)]
compare("paged_quantized", args + ["--causal"], True)

# bad input: exit 2, one line on stderr naming the culprit, no output file
bad_q = save("bad_q.npy", tensor((1, 8, 4, 8), "f32"))
bad_k3 = save("bad_k3.npy", tensor((1, 8, 3, 8), "f32"))
good_k = save("bad_k.npy", tensor((1, 8, 2, 8), "f32"))
short_k = save("bad_k6.npy", tensor((1, 6, 2, 8), "f32"))
neg = save("bad_neg.npy", np.array([-1], dtype=np.int32))
keep = save("bad_keep.npy", np.ones((8, 8), dtype=bool))
no_dv = save("bad_v0.npy", tensor((1, 8, 2, 0), "f32"))
empty_pages = save("bad_pool.npy", tensor((3, 0, 2, 8), "f32"))
table = save("bad_bt.npy", np.zeros((1, 2), dtype=np.int32))
lens0 = save("bad_lens.npy", np.zeros(1, dtype=np.int32))
cases = [
    (["--q", bad_q, "--k", good_k, "--v", no_dv], "head_dim_v = 0"),
    (["--q", bad_q, "--k", empty_pages, "--v", empty_pages, "--block-table", table,
      "--seqlens-kv", lens0], "page_size 0"),
    (["--q", "/dev/zero", "--k", good_k, "--v", good_k], "magic"),
    (["--q", bad_q, "--k", bad_k3, "--v", bad_k3], "does not divide"),
    (["--q", bad_q, "--k", good_k, "--v", good_k, "--ring", "--mask", keep], "--ring with --mask"),
    (["--q", bad_q, "--k", short_k, "--v", short_k, "--ring"], "Sq = 8 and k has Skv = 6"),
    (["--q", bad_q, "--k", good_k, "--v", good_k, "--seqlens-kv", neg],
     "entry [0] = -1 is negative"),
    (["--q", bad_q, "--k", good_k, "--v", good_k, "--workers", "-1"], "--workers -1"),
    (["--q", bad_q, "--k", good_k, "--v", good_k, "--bogus"], "unknown option '--bogus'"),
    (["--q", bad_q, "--k", save("bad_k8.npy", codes((1, 8, 2, 8), "i8")), "--v", good_k,
      "--ring"], "--k-scale is required"),
]
for n, (bad, needle) in enumerate(cases):
    out = os.path.join(tmp, "bad_out_%d.npy" % n)
    r = mpirun(bad + ["--out", out])
    lines = r.stderr.splitlines()
    if r.returncode != 2 or len(lines) != 1 or needle not in r.stderr or \
            not lines[0].startswith("fai-mpi run: ") or os.path.exists(out):
        failures.append("bad input %s: exit %d, stderr %r, output %s" %
                        (bad[-2:], r.returncode, r.stderr, os.path.exists(out)))

# fai-mpi bench: one short run of a decode shape and of ring prefill, as JSON; every figure
# present and sane, the decode's overlap null (its gather follows the local run)
import json
cmd = [mpiexec, np_flag, ranks, fai_mpi, "bench", "D2", "P1", "--runs", "1", "--scale", "1",
       "--json"]
r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
rows = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
if r.returncode != 0 or [x["shape"] for x in rows] != ["D2", "P1"]:
    failures.append("fai-mpi bench: exit %d, stdout %r, stderr %r" %
                    (r.returncode, r.stdout, r.stderr))
else:
    for x in rows:
        ring = x["kind"] == "ring"
        sane = (x["ranks"] == int(ranks) and x["bytes_sent_per_step"] > 0 and
                x["median_ms"] > 0 and x["compute_ms"] > 0 and x["model_ms"] > 0 and
                0 <= x["exchange_ms"] <= x["wait_ms"] + 1e-9 and
                x["steps"] == (int(ranks) if ring else 1) and
                ((0 <= x["overlap"] <= 1) if ring else x["overlap"] is None))
        if not sane:
            failures.append("fai-mpi bench %s: %r" % (x["shape"], x))
# bad options: exit 2 before any shape runs, one line naming the option, its range and value
for args, needle in [(["--runs", "0"], "--runs needs an integer 1..1000, got '0'"),
                     (["--runs", "1001"], "--runs needs an integer 1..1000, got '1001'"),
                     (["--threads", "5000"], "--threads needs an integer 1..1024"),
                     (["--workers", "-1"], "--workers needs an integer 0..1024"),
                     (["--scale", "2x"], "--scale needs an integer 1..1048576, got '2x'"),
                     (["D1"] * 9, "more than 8 shapes")]:
    r = subprocess.run([mpiexec, np_flag, ranks, fai_mpi, "bench"] + args,
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 2 or needle not in r.stderr:
        failures.append("fai-mpi bench %s: exit %d, stderr %r" % (args, r.returncode, r.stderr))

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("test_mpi_run: ok (%s ranks)" % ranks)
PY

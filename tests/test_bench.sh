#!/usr/bin/env bash
# fai bench on a tiny shape: every line is JSON with the keys of the design's contract, the
# median lies between min and max, and a bad option exits 2 with one line on stderr.
set -euo pipefail
fai=${1:?usage: test_bench.sh /path/to/fai}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$fai" bench --b 1 --hq 2 --hkv 1 --sq 8 --skv 40 --d 16 --runs 2 --threads 1,2 --json \
    --no-peaks >"$tmp/out"

python3 - "$tmp/out" <<'PY'
import json, sys
required = ["shape", "threads", "q_dtype", "kv_dtype", "out_dtype", "median_ms", "min_ms",
            "max_ms", "gflops", "kv_gbps", "workspace_bytes"]
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 2, f"expected one line per thread count, got {len(lines)}"
threads = []
for line in lines:
    row = json.loads(line)
    missing = [key for key in required if key not in row]
    assert not missing, f"missing keys {missing} in {line}"
    assert row["min_ms"] <= row["median_ms"] <= row["max_ms"], line
    assert row["gflops"] > 0 and row["kv_gbps"] > 0, line
    assert row["check"] == "ok", line
    assert "peaks" not in row and "peak_fp32_gflops" not in row, "--no-peaks still probed"
    threads.append(row["threads"])
assert threads == [1, 2], threads
PY

# --kv-dtypes: the shape once per K/V dtype, in the list's order, each checked against fp64
# (the quantized ones with their scales), then each dtype's speedup over the first from
# interleaved rounds, per thread count; a bad list exits 2
"$fai" bench --b 1 --hq 2 --hkv 1 --sq 1 --skv 300 --d 32 --page-size 16 --runs 1 --threads 1,2 \
    --json --no-peaks --kv-dtypes f16,int8,e4m3,e5m2 >"$tmp/kv"
python3 - "$tmp/kv" <<'PY'
import json, sys
lines = [json.loads(line) for line in open(sys.argv[1]).read().splitlines()]
compared = [row for row in lines if "compare_threads" in row]
rows = [row for row in lines if "compare_threads" not in row and row["threads"] == 1]
assert [(row["compare_threads"], row["kv_dtype"], row["over_kv_dtype"]) for row in compared] == [
    (t, dtype, "f16") for t in (1, 2) for dtype in ("int8", "e4m3", "e5m2")], compared
for row in compared:
    assert row["rounds"] == 3, row
    assert 0 < row["speedup_q1"] <= row["speedup_median"] <= row["speedup_q3"], row
assert lines.index(compared[0]) == len(lines) - len(compared), "the comparison comes last"
assert [row["kv_dtype"] for row in rows] == ["f16", "int8", "e4m3", "e5m2"], rows
assert all(row["check"] == "ok" for row in rows), rows
# the quantized caches read a scale per token and kv head beside their 1-byte codes
assert rows[1]["kv_bytes"] < rows[0]["kv_bytes"], rows
PY
if "$fai" bench --no-peaks --kv-dtypes f16,bogus 2>"$tmp/err"; then
    echo "a bad --kv-dtypes list was accepted"; exit 1
fi
grep -q -- "--kv-dtypes" "$tmp/err"

# --k-channel-scales: a quantized K's scales per kv head and channel too, decode and prefill,
# each checked against fp64 with them
"$fai" bench --b 1 --hq 4 --hkv 2 --sq 1 --skv 70 --d 40 --page-size 16 --runs 1 --threads 1 \
    --json --no-peaks --kv-dtypes int8,e4m3 --k-channel-scales >"$tmp/channels"
"$fai" bench --b 1 --hq 4 --hkv 2 --sq 30 --skv 70 --d 40 --causal --runs 1 --threads 2 \
    --json --no-peaks --kv-dtype e5m2 --q-dtype bf16 --k-channel-scales >>"$tmp/channels"
python3 - "$tmp/channels" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]).read().splitlines()]
rows = [row for row in rows if "compare_threads" not in row]
assert [row["kv_dtype"] for row in rows] == ["int8", "e4m3", "e5m2"], rows
assert all(row["check"] == "ok" for row in rows), rows
PY

# --profile: stage shares that add up to one, a busy share per thread, the timers' cost
"$fai" bench --b 1 --hq 2 --hkv 1 --sq 8 --skv 40 --d 16 --runs 2 --threads 2 --json \
    --no-peaks --profile >"$tmp/profile"
python3 - "$tmp/profile" <<'PY'
import json, sys
row = json.loads(open(sys.argv[1]).read())
prof = row["profile"]
shares = prof["stage_share"]
assert set(shares) == {"pack_q", "pack_kv", "qk", "softmax", "rescale", "pv", "store", "merge",
                       "other"}, shares
assert abs(sum(shares.values()) - 1.0) < 1e-3 and shares["qk"] > 0 and shares["pv"] > 0, shares
# the caller always works; a helper that wakes after the work is gone stays at 0
busy = prof["thread_busy"]
assert 1 <= len(busy) <= 2 and busy[0] > 0 and all(0 <= b <= 1.01 for b in busy), prof
assert prof["runs"] == 2 and prof["median_ms"] > 0 and prof["overhead"] > 0, prof
# the overlap of QK + PV and the softmax, from runs that leave them out: each kind took time,
# and what they hid is their times alone less the time together, over the rest's
lap = row["overlap"]
kinds = ("together_ms", "qk_pv_alone_ms", "softmax_alone_ms", "neither_ms")
assert all(lap[k] > 0 for k in kinds), lap
hidden = lap["qk_pv_alone_ms"] + lap["softmax_alone_ms"] - lap["together_ms"] - lap["neither_ms"]
assert abs(lap["hidden_ms"] - hidden) < 1e-4, lap
PY
"$fai" bench --b 1 --hq 2 --hkv 1 --sq 8 --skv 40 --d 16 --runs 2 --threads 1 --no-peaks \
    --profile | grep -q "overlap, over the .* ms the other stages take (nothing stored): qk+pv alone"

# --scaling: after the rows, one line per extra thread count with the interleaved speedup
"$fai" bench --b 1 --hq 2 --hkv 1 --sq 8 --skv 40 --d 16 --runs 2 --threads 1,2 --json \
    --no-peaks --scaling >"$tmp/scaling"
python3 - "$tmp/scaling" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
scaling = [r for r in rows if "scaling_threads" in r]
assert len(rows) == 3 and len(scaling) == 1, rows
s = scaling[0]
assert s["scaling_threads"] == 2 and s["over_threads"] == 1 and s["rounds"] == 6, s
assert 0 < s["speedup_q1"] <= s["speedup_median"] <= s["speedup_q3"], s
PY
# as many thread counts as --threads takes: one line for each after the first
"$fai" bench --b 1 --hq 2 --hkv 1 --sq 1 --skv 16 --d 16 --runs 1 --warmup 0 --json --no-peaks \
    --threads "$(python3 -c 'print(",".join(["1"] * 20))')" --scaling >"$tmp/scaling20"
[ "$(grep -c scaling_threads "$tmp/scaling20")" -eq 19 ] || {
    echo "--scaling with 20 thread counts did not give 19 lines"; exit 1; }

# --wake: one line per thread count above 1, every latency a positive number of microseconds
"$fai" bench --b 1 --hq 2 --hkv 1 --sq 8 --skv 40 --d 16 --runs 1 --threads 1,2 --json \
    --no-peaks --wake >"$tmp/wake"
python3 - "$tmp/wake" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
wake = [r for r in rows if r.get("wake")]
assert len(rows) == 3 and len(wake) == 1, rows
w = wake[0]
assert w["threads"] == 2 and w["rounds"] == 3, w
assert all(w[k] > 0 for k in ("after_run_us", "after_idle_us", "one_thread_after_run_us",
                              "one_thread_after_idle_us")), w
PY

# --cold: the rows say so (and the text says how much is read), the comparison rounds run too;
# without it the rows say false
"$fai" bench --b 1 --hq 2 --hkv 1 --sq 1 --skv 40 --d 16 --runs 1 --threads 1 --json \
    --no-peaks --cold --kv-dtypes f16,int8 >"$tmp/cold"
python3 - "$tmp/cold" "$tmp/scaling" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
timed = [r for r in rows if "median_ms" in r]
assert len(timed) == 2 and all(r["cold"] is True and r["check"] == "ok" for r in timed), rows
assert any("speedup_median" in r for r in rows), rows
assert all(r["cold"] is False for r in map(json.loads, open(sys.argv[2])) if "median_ms" in r)
PY
"$fai" bench --b 1 --hq 2 --hkv 1 --sq 1 --skv 40 --d 16 --runs 1 --threads 1 --no-peaks \
    --cold | grep -q "^cold: before every timed run, [0-9]* MiB read to empty the caches"

# the shape flags change every named shape, not only the first
"$fai" bench P2 D1 --sq 2 --skv 40 --q-dtype bf16 --kv-dtype bf16 --out-dtype bf16 --runs 1 \
    --threads 1 --json --no-peaks >"$tmp/named"
python3 - "$tmp/named" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
assert [(r["b"], r["hq"]) for r in rows] == [(2, 16), (8, 32)], rows
for r in rows:
    assert (r["q_dtype"], r["kv_dtype"], r["out_dtype"]) == ("bf16", "bf16", "bf16"), r
    assert (r["sq"], r["skv"]) == (2, 40) and r["check"] == "ok", r
PY

# bad options: exit 2, one line on stderr, nothing on stdout
for bad in "--bogus" "--threads 0" "--runs x" "--pieces 0" "--hq 3 --hkv 2" "--kv-dtypes f16," \
    "--kv-dtypes f16,f16,f16,f16,f16,f16,f16,f16,f16" "--b 1 --b 2"; do
    status=0
    # shellcheck disable=SC2086
    "$fai" bench $bad >"$tmp/stdout" 2>"$tmp/stderr" || status=$?
    [ "$status" -eq 2 ] || { echo "fai bench $bad: exit $status, expected 2"; exit 1; }
    [ "$(wc -l <"$tmp/stderr")" -eq 1 ] || { echo "fai bench $bad: stderr not one line"; exit 1; }
    [ ! -s "$tmp/stdout" ] || { echo "fai bench $bad: wrote to stdout"; exit 1; }
done
echo "test_bench: ok"

#!/usr/bin/env bash
# fai bench --baseline on tiny shapes (GQA dense, paged causal, a window, all-bf16): built with a
# CBLAS (FAI_EXPECT_BASELINE=1, set by CMake), every line has the baseline's keys and its output
# agrees with fai's; built without one, --baseline says so in one line and fai is timed alone.
set -euo pipefail
fai=${1:?usage: test_baseline.sh /path/to/fai}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

common=(--runs 2 --warmup 1 --threads 1,2 --json --no-peaks --baseline)
"$fai" bench --b 1 --hq 4 --hkv 2 --sq 8 --skv 40 --d 16 "${common[@]}" >"$tmp/out" 2>"$tmp/err"
"$fai" bench --b 2 --hq 4 --hkv 1 --sq 5 --skv 70 --d 32 --page-size 16 --causal \
    "${common[@]}" >>"$tmp/out" 2>>"$tmp/err"
"$fai" bench --b 1 --hq 2 --hkv 2 --sq 33 --skv 33 --d 8 --dv 24 --window 6,3 --bf16-too \
    "${common[@]}" >>"$tmp/out" 2>>"$tmp/err"

python3 - "$tmp/out" "$tmp/err" "${FAI_EXPECT_BASELINE:-0}" <<'PY'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
err = open(sys.argv[2]).read()
expect = sys.argv[3] == "1"
assert len(lines) == 8, f"expected one line per (shape, thread count), got {len(lines)}"
keys = ["baseline_median_ms", "baseline_min_ms", "baseline_max_ms", "baseline_gflops",
        "speedup_vs_baseline", "baseline_score_bytes", "baseline_gemm_flops",
        "baseline_max_diff", "baseline_tolerance", "baseline_check", "baseline_blas"]
for line in lines:
    row = json.loads(line)
    assert row["check"] == "ok", line
    if not expect:
        assert not any(k in row for k in keys), f"baseline keys without a BLAS: {line}"
        continue
    missing = [k for k in keys if k not in row]
    assert not missing, f"missing keys {missing} in {line}"
    assert row["baseline_check"] == "ok", line
    assert row["baseline_max_diff"] <= 2e-3 or row["out_dtype"] != "f32", line
    assert row["baseline_min_ms"] <= row["baseline_median_ms"] <= row["baseline_max_ms"], line
    assert row["baseline_gflops"] > 0 and row["speedup_vs_baseline"] > 0, line
    ratio = row["baseline_median_ms"] / row["median_ms"]
    assert abs(row["speedup_vs_baseline"] / ratio - 1) < 1e-3, line
    # the score matrix of one (batch, kv head): G*Sq rows by the keys some row sees
    assert 0 < row["baseline_score_bytes"] <= 4 * row["hq"] // row["hkv"] * row["sq"] * row["skv"]
if expect:
    assert "no CBLAS" not in err, err
else:
    assert err.count("no CBLAS was found at build time") == 3, err
PY
echo "test_baseline: ok"

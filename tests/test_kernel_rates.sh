#!/usr/bin/env bash
# fai_kernel_rates runs every section its table has to the end, with finite rates: on
# the table this CPU chooses, and on amx-emu (the matrix engine's stages and the scalar row
# kernels). A benchmark, so no rate is judged, only that each is measured.
set -euo pipefail
fai=${1:?usage: test_kernel_rates.sh /path/to/fai}
rates="$(dirname "$fai")/fai_kernel_rates" # built beside the tool
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

check() { # output file, then the section headers it must hold
    local out=$1
    shift
    for section in "$@"; do
        grep -q "^$section" "$out" || { echo "missing section '$section'" >&2; cat "$out" >&2; exit 1; }
    done
    if grep -Eiq 'nan|inf ' "$out"; then echo "a rate is not finite" >&2; cat "$out" >&2; exit 1; fi
    # every GFLOP/s figure a number; 6 dtypes x 2 row kernels of decode
    python3 - "$out" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
# a rate prints as 0.0 where a sanitizer slows the scalar tables down: each must be a number
rates = [float(x) for x in re.findall(r"([0-9.]+) GFLOP/s  ", text)]
assert rates and all(r >= 0 for r in rates) and max(rates) > 0, rates
assert len(re.findall(r"^  (qk|pv)_rows, ", text, re.M)) == 12, text
PY
}

"$rates" --quick >"$tmp/default"
check "$tmp/default" "table " "prefill tile, f32" "decode rows"
FAI_ISA=amx-emu "$rates" --quick >"$tmp/emu"
check "$tmp/emu" "table amx-emu" "prefill tile, f32" "prefill tile, matrix engine" "decode rows"
if "$rates" --bad 2>/dev/null; then echo "an argument was accepted" >&2; exit 1; fi

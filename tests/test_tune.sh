#!/usr/bin/env bash
# fai tune on a small shape: it measures the candidate tiles, stores the fastest in the tuning
# cache under XDG_CACHE_HOME, and later plans of that shape use it (`fai plan --json` reports
# tile_source "tuned"), unless told to ignore the cache; --no-store writes nothing; bad options
# exit 2 with one line on stderr.
set -euo pipefail
fai=${1:?usage: test_tune.sh /path/to/fai}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset FAI_TUNE_CACHE
export XDG_CACHE_HOME="$tmp/cache"
shape=(--b 1 --hq 4 --hkv 2 --sq 96 --skv 96 --d 32 --dv 32 --causal)

"$fai" tune "${shape[@]}" --runs 2 --max-seconds 5 --threads 2 --no-store --json >"$tmp/dry"
[ ! -e "$tmp/cache/fai/tiles.tsv" ] || { echo "--no-store wrote the cache"; exit 1; }
"$fai" tune "${shape[@]}" --runs 2 --max-seconds 5 --threads 2 --json >"$tmp/tune"
[ -s "$tmp/cache/fai/tiles.tsv" ] || { echo "fai tune wrote no cache file"; exit 1; }
"$fai" plan "${shape[@]}" --workers 2 --json >"$tmp/plan"
"$fai" plan "${shape[@]}" --workers 2 --json --no-tuned >"$tmp/plan_ignored"
FAI_TUNE_CACHE=off "$fai" plan "${shape[@]}" --workers 2 --json >"$tmp/plan_off"

python3 - "$tmp" <<'PY'
import json, sys, os
tmp = sys.argv[1]
load = lambda name: json.load(open(os.path.join(tmp, name)))
dry, tune = load("dry"), load("tune")
assert dry["stored"] is False and tune["stored"] is True, (dry, tune)
assert tune["measured"] >= 1 and tune["candidates"] >= tune["measured"], tune
assert tune["cache"] == os.path.join(tmp, "cache", "fai", "tiles.tsv"), tune["cache"]
assert tune["tile_source"] == "tuned", tune
times = [t["first_ms"] for t in tune["timings"]]
assert all(t > 0 for t in times), times
finals = [t for t in tune["timings"] if "final_ms" in t]
assert any(t["heuristic"] for t in finals), "the planner's choice is always a finalist"
# the winner has the least final time; times are printed to 0.1 us, so a tie there is a tie
tuned = [t for t in finals if [t["tile_q"], t["tile_kv"]] == tune["tuned_tile"]]
assert len(tuned) == 1, (finals, tune["tuned_tile"])
assert tuned[0]["final_ms"] == min(t["final_ms"] for t in finals), (finals, tune["tuned_tile"])
# the times are printed to 0.1 us: compare the ratio loosely
assert abs(tune["speedup"] / (tune["heuristic_ms"] / tune["tuned_ms"]) - 1) < 0.02, tune
plan, ignored, off = load("plan"), load("plan_ignored"), load("plan_off")
assert plan["tile_source"] == "tuned", plan
assert [plan["tile_q"], plan["tile_kv"]] == tune["tuned_tile"], (plan, tune["tuned_tile"])
assert ignored["tile_source"] == "heuristic" and off["tile_source"] == "heuristic"
assert [ignored["tile_q"], ignored["tile_kv"]] == tune["heuristic_tile"], (ignored, tune)
lines = [l for l in open(tune["cache"]) if not l.startswith("#")]
assert len(lines) == 1 and lines[0].rstrip("\n").split("\t")[2] == tune["tile_class"], lines
PY

for bad in "--bogus" "--runs 0" "--max-seconds x" "--hq 3 --hkv 2"; do
    status=0
    # shellcheck disable=SC2086
    "$fai" tune $bad >"$tmp/stdout" 2>"$tmp/stderr" || status=$?
    [ "$status" -eq 2 ] || { echo "fai tune $bad: exit $status, expected 2"; exit 1; }
    [ "$(wc -l <"$tmp/stderr")" -eq 1 ] || { echo "fai tune $bad: stderr not one line"; exit 1; }
    [ ! -s "$tmp/stdout" ] || { echo "fai tune $bad: wrote to stdout"; exit 1; }
done
# an unwritable cache: exit 2 naming the file
status=0
touch "$tmp/blocker"
FAI_TUNE_CACHE="$tmp/blocker/tiles.tsv" "$fai" tune "${shape[@]}" --runs 1 --max-seconds 1 \
    --threads 1 >"$tmp/stdout" 2>"$tmp/stderr" || status=$?
[ "$status" -eq 2 ] && grep -q "blocker" "$tmp/stderr" || { echo "unwritable cache: $status"; exit 1; }
# a cache a store would refuse (a directory at its path): said before measuring, nothing printed
mkdir "$tmp/dir"
status=0
FAI_TUNE_CACHE="$tmp/dir" "$fai" tune "${shape[@]}" --runs 1 --max-seconds 1 --threads 1 \
    >"$tmp/stdout" 2>"$tmp/stderr" || status=$?
[ "$status" -eq 2 ] && grep -q "not a regular file" "$tmp/stderr" && [ ! -s "$tmp/stdout" ] ||
    { echo "a directory as the cache: exit $status, or measured first"; exit 1; }
echo "test_tune: ok"

#!/bin/sh
# Runs the fuzz harnesses built in BUILD (make fuzz): for each of plan, run, npy, cache and merge,
# first every saved input of fuzz/regressions/<harness>/ once, then fuzzing for SECONDS from a
# copy of the seed corpus fuzz/corpus/<harness>/ (the committed corpus is never modified). A
# crash, a sanitizer report, a failed check, a leak, an input slower than 30 s or running out of
# memory is a finding: its input is left in BUILD/fuzz-work/artifacts/ and the script exits 1
# after all harnesses have run. Prints one line per harness with its number of executions.
#
# Usage: fuzz/run.sh BUILD SECONDS
set -u
build=${1:?usage: fuzz/run.sh BUILD SECONDS}
seconds=${2:?usage: fuzz/run.sh BUILD SECONDS}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$build/fuzz-work
rm -rf "$work"
mkdir -p "$work/artifacts"
status=0
for harness in plan run npy cache merge; do
    binary=$build/fuzz_$harness
    log=$work/$harness.log
    regressions=$(ls "$root/fuzz/regressions/$harness/" 2>/dev/null | sed "s|^|$root/fuzz/regressions/$harness/|")
    if [ -n "$regressions" ]; then
        # shellcheck disable=SC2086 # one argument per saved input
        if ! "$binary" $regressions >"$work/$harness.regressions.log" 2>&1; then
            echo "fuzz_$harness: a saved regression input fails (fuzz/regressions/$harness/):"
            grep -E "ERROR|runtime error|check failed|fuzz_$harness:|SUMMARY|Running:" \
                "$work/$harness.regressions.log" | head -20
            status=1
        fi
    fi
    mkdir -p "$work/corpus/$harness"
    cp "$root/fuzz/corpus/$harness/"* "$work/corpus/$harness/"
    "$binary" -max_total_time="$seconds" -timeout=30 -print_final_stats=1 \
        -artifact_prefix="$work/artifacts/$harness-" "$work/corpus/$harness" >"$log" 2>&1
    result=$?
    executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    if [ $result -ne 0 ]; then
        echo "fuzz_$harness: FINDING after ${executions:-?} executions (exit status $result):"
        grep -E "ERROR|runtime error|check failed|fuzz_$harness:|SUMMARY|Test unit written" "$log" |
            grep -v "failed to allocate" | head -20
        echo "fuzz_$harness: full log in $log"
        status=1
    else
        echo "fuzz_$harness: ${executions:-?} executions in $seconds s (${speed:-?}/s), no findings"
    fi
done
exit $status

#!/usr/bin/env bash
# fai plan --hw: the seed's resource table on the NPU profiles (the reference point of the
# design, byte for byte), an oversized tile that does not fit and says why, fai's own budgets on
# the host, and bad --hw / --tile / --task-num values that exit 2 naming the value.
set -euo pipefail
fai=${1:?usage: test_plan_hw.sh /path/to/fai}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$fai" plan P1 --hw ascend950 --tile 128x128x128 --kv-dtype f16 --json >"$tmp/ref.json"
"$fai" plan P1 --hw ascend950 --tile 256x256x128 --json >"$tmp/big.json"
"$fai" plan P1 --hw ascend910b --tile 128x128x128 --json >"$tmp/910b.json"
"$fai" plan P1 --hw ascend950 --tile 128x128 --task-num 4 --json >"$tmp/task4.json"
"$fai" plan --b 1 --hq 8 --hkv 8 --sq 300 --skv 300 --d 72 --hw ascend950 --tile 64x64 \
    --json >"$tmp/d72.json"
"$fai" plan P1 --hw host --json >"$tmp/host.json"
"$fai" plan P1 --hw host --tile 128x4096 --workers 3 --json >"$tmp/host_big.json"
"$fai" plan P1 --json >"$tmp/plain.json"

python3 - "$tmp" <<'PY'
import json, os, sys
tmp = sys.argv[1]
def load(name):
    with open(os.path.join(tmp, name)) as f:
        return json.load(f)
KIB = 1024
plan_keys = ["tile_q", "tile_kv", "units", "workers", "worker_weights", "imbalance", "split_kv"]
npu_keys = ["hw", "ub_bytes", "ub_capacity", "l1_bytes", "l1_capacity", "l0a_bytes",
            "l0a_capacity", "l0b_bytes", "l0b_capacity", "l0c_bytes", "l0c_capacity", "fits",
            "mm1_result_size", "mm2_result_size", "share_ub_size", "mm2_left_size", "task_num",
            "candidates", "greedy_imbalance"]
host_keys = ["hw", "l1d_bytes", "l1d_capacity", "l2_bytes", "l2_capacity", "fits",
             "candidates", "greedy_imbalance"]

def check_keys(row, keys, name):
    missing = [key for key in plan_keys + keys if key not in row]
    assert not missing, f"{name}: missing keys {missing}"
    assert len(row["worker_weights"]) == row["workers"], name
    assert sum(row["worker_weights"]) == row["total_weight"], name
    assert row["greedy_imbalance"] >= 1.0 and row["imbalance"] >= 1.0, name

# the reference point: 128 x 128 x 128, f16, KERNEL_TASK_NUM 3 on the Ascend 950
ref = load("ref.json")
check_keys(ref, npu_keys, "ascend950 128x128x128")
assert ref["hw"] == "ascend950" and ref["task_num"] == 3 and ref["tile_d"] == 128, ref["hw"]
assert ref["workers"] == 28, "the split runs over the 28 AIC (the seed's blockDim)"
assert abs(ref["ub_bytes"] - 211 * KIB) <= KIB, f"UB per AIV {ref['ub_bytes']}, not ~211 KiB"
assert ref["ub_bytes"] == 215808, ref["ub_bytes"]                 # 210.75 KiB
assert ref["l1_bytes"] == 288 * KIB, ref["l1_bytes"]
assert ref["fits"] is True and "reason" not in ref, ref.get("reason")
for buffer in ("l0a", "l0b", "l0c"):
    assert ref[f"{buffer}_bytes"] == ref[f"{buffer}_capacity"], f"{buffer} is not full"
assert (ref["ub_capacity"], ref["l1_capacity"]) == (248 * KIB, 512 * KIB)
assert (ref["l0a_capacity"], ref["l0b_capacity"], ref["l0c_capacity"]) == \
    (64 * KIB, 64 * KIB, 256 * KIB)
# the seed's four static items, and fai's breakdown of UB and L1 (docs/tuning.md)
assert (ref["mm1_result_size"], ref["mm2_result_size"]) == (32 * KIB, 32 * KIB)
assert (ref["share_ub_size"], ref["mm2_left_size"]) == (256, 32 * KIB)
assert ref["ub_items"] == {"s_buffers": 64 * KIB, "otmp_buffers": 64 * KIB,
                           "softmax_state": 2304, "p_buffers": 32 * KIB, "mask": 16 * KIB,
                           "share": 512, "o_accumulator": 32 * KIB}, ref["ub_items"]
assert sum(ref["ub_items"].values()) == ref["ub_bytes"]
assert ref["l1_items"] == {"p_buffers": 96 * KIB, "qkv_tiles": 192 * KIB}, ref["l1_items"]
assert {"tile_q": 128, "tile_kv": 128, "tile_d": 128} in \
    [{k: c[k] for k in ("tile_q", "tile_kv", "tile_d")} for c in ref["candidates"]]
for c in ref["candidates"]:
    assert c["tile_q"] in (16, 32, 64, 128, 256) and c["tile_kv"] in (64, 128, 256, 512), c
    assert c["tile_d"] == 128 and c["ub_bytes"] <= 248 * KIB and c["l1_bytes"] <= 512 * KIB, c
# the seed's greedy split leaves a tail on causal P1 that fai's split removes
assert ref["greedy_imbalance"] > ref["imbalance"], (ref["greedy_imbalance"], ref["imbalance"])

# an oversized tile: an answer, with every buffer it overflows named
big = load("big.json")
check_keys(big, npu_keys, "ascend950 256x256x128")
assert big["fits"] is False, big["fits"]
assert big["reason"].startswith("UB per AIV needs 660992 bytes (645.5 KiB), capacity 253952 "
                                 "(248 KiB)"), big["reason"]
for name in ("L1 per AIC", "L0A", "L0B", "L0C"):
    assert name + " needs" in big["reason"], (name, big["reason"])
assert {"tile_q": 256, "tile_kv": 256} not in \
    [{k: c[k] for k in ("tile_q", "tile_kv")} for c in big["candidates"]]

# the Ascend 910B: 192 KiB of UB and 128 KiB of L0C are too small for the reference tile
b910 = load("910b.json")
check_keys(b910, npu_keys, "ascend910b 128x128x128")
assert b910["workers"] == 24 and b910["ub_capacity"] == 192 * KIB, b910["workers"]
assert b910["l0c_capacity"] == 128 * KIB and b910["ub_bytes"] == ref["ub_bytes"]
assert b910["fits"] is False
assert "UB per AIV needs 215808 bytes" in b910["reason"], b910["reason"]
assert "L0C needs 262144 bytes" in b910["reason"], b910["reason"]
assert "L1 per AIC" not in b910["reason"] and "L0A" not in b910["reason"], b910["reason"]
assert b910["candidates"], "some smaller tile fits the 910B"

# KERNEL_TASK_NUM scales the softmax state and the P buffers in L1
task4 = load("task4.json")
assert task4["task_num"] == 4 and task4["tile_d"] == 128
assert task4["ub_items"]["softmax_state"] == 3 * 4 * 64 * 4, task4["ub_items"]
assert task4["l1_items"]["p_buffers"] == 4 * 32 * KIB, task4["l1_items"]

# QxKV takes embedBase = Align(head dim, 16); MM2 aligns it to 64 more
d72 = load("d72.json")
assert d72["tile_d"] == 80 and d72["tile_q"] == 64 and d72["tile_kv"] == 64, d72["tile_d"]
assert d72["mm2_result_size"] == 32 * 128 * 4, d72["mm2_result_size"]
assert d72["mm1_result_size"] == 32 * 64 * 4 and d72["share_ub_size"] == 32 * 4
assert d72["workers"] == 28 and d72["units"] == 8 * 5, d72["units"]

# host: fai's own tile against this CPU's caches, as the planner reads them
host = load("host.json")
check_keys(host, host_keys, "host")
assert host["hw"] == "host" and host["cpus"] >= 1
assert host["l1d_capacity"] > 0 and host["l2_capacity"] > 0, host
assert host["l1d_bytes"] > 0 and host["l2_bytes"] > 0, host
assert host["fits"] is True, host.get("reason")
assert host["l2_bytes"] <= host["l2_capacity"], host
# the vector tables keep their hot set in L1d, except a 64-key tile, which any L1d takes; the
# AMX tile unit reads its operands from L2 as fast (measured), so an amx plan's L1d figure (a
# row block's working set) may pass L1d
if host["isa"] != "amx":
    assert host["l1d_bytes"] <= host["l1d_capacity"] or host["tile_kv"] <= 64, host
assert host["candidates"], "no candidate tile fits this CPU"
listed = [(c["tile_q"], c["tile_kv"]) for c in host["candidates"]]
assert (host["tile_q"], host["tile_kv"]) in listed, (host["tile_q"], host["tile_kv"], listed)
for c in host["candidates"]:
    assert c["tile_q"] in (1, 2, 4, 8, 16, 32, 64, 128), c
    assert c["tile_kv"] in (16, 32, 64, 128, 256, 512) and c["tile_d"] == 128, c

host_big = load("host_big.json")
check_keys(host_big, host_keys, "host 128x4096")
assert host_big["workers"] == 3 and (host_big["tile_q"], host_big["tile_kv"]) == (128, 4096)
assert host_big["fits"] is False and "L2 needs" in host_big["reason"], host_big.get("reason")

# without --hw, `fai plan --json` is what it was
plain = load("plain.json")
assert all(key in plain for key in plan_keys)
assert not any(key in plain for key in ("hw", "fits", "candidates", "ub_bytes", "l1d_bytes"))
PY

# the text table: fits and the reason, exit 0 for a tile that does not fit
"$fai" plan P1 --hw ascend950 --tile 128x128x128 >"$tmp/ref.txt"
grep -q '^fits        yes$' "$tmp/ref.txt" || { echo "128x128x128: no 'fits yes'"; exit 1; }
grep -q '^UB per AIV  *215808  *253952' "$tmp/ref.txt" || { echo "no UB line"; exit 1; }
grep -q '^ *\* *128 *128 *128 ' "$tmp/ref.txt" || { echo "given tile not marked"; exit 1; }
"$fai" plan P1 --hw ascend950 --tile 256x256x128 >"$tmp/big.txt"
grep -q '^fits        no: UB per AIV needs 660992 bytes' "$tmp/big.txt" ||
    { echo "256x256x128: no reason naming UB"; exit 1; }
"$fai" plan P1 --hw host >"$tmp/host.txt"
grep -q '^L1d ' "$tmp/host.txt" && grep -q '^L2 ' "$tmp/host.txt" &&
    grep -q '^  *worker  *unit_begin' "$tmp/host.txt" || { echo "host table incomplete"; exit 1; }

"$fai" plan --help >"$tmp/help.txt"
for option in --hw --tile --task-num ascend950 ascend910b host; do
    grep -q -- "$option" "$tmp/help.txt" || { echo "fai plan --help lacks $option"; exit 1; }
done

# bad values: exit 2, one line on stderr naming the option and the value, nothing on stdout
expect_refusal() {
    local value=$1
    shift
    local status=0
    "$fai" plan P1 "$@" >"$tmp/stdout" 2>"$tmp/stderr" || status=$?
    [ "$status" -eq 2 ] || { echo "fai plan $*: exit $status, expected 2"; exit 1; }
    [ "$(wc -l <"$tmp/stderr")" -eq 1 ] || { echo "fai plan $*: stderr not one line"; exit 1; }
    grep -q -- "'$value'" "$tmp/stderr" || { echo "fai plan $*: '$value' not named"; exit 1; }
    [ ! -s "$tmp/stdout" ] || { echo "fai plan $*: wrote to stdout"; exit 1; }
}
expect_refusal ascend951 --hw ascend951
expect_refusal ascend951 --hw ascend951 --json
expect_refusal 128x --hw ascend950 --tile 128x
expect_refusal 0x128 --hw ascend950 --tile 0x128
expect_refusal 128x128x128x128 --hw ascend950 --tile 128x128x128x128
expect_refusal 128x128y --hw host --tile 128x128y
expect_refusal -64x64 --tile -64x64
expect_refusal 0 --hw ascend950 --task-num 0
expect_refusal x --hw ascend950 --task-num x
expect_refusal " 1,2" --window " 1,2"
expect_refusal 1,+2 --window 1,+2
expect_refusal 99999999999999999999,0 --window 99999999999999999999,0
expect_refusal 1e-50 --softcap 1e-50
# shape flags: each at most once, one shape, one causal alignment (no silent last-one-wins)
expect_refusal_saying() { # what stderr says, arguments...
    local want=$1
    shift
    local status=0
    "$fai" plan "$@" >"$tmp/stdout" 2>"$tmp/stderr" || status=$?
    [ "$status" -eq 2 ] && [ "$(wc -l <"$tmp/stderr")" -eq 1 ] && [ ! -s "$tmp/stdout" ] &&
        grep -q -- "$want" "$tmp/stderr" ||
        { echo "fai plan $*: exit $status, stderr '$(cat "$tmp/stderr")'"; exit 1; }
}
expect_refusal_saying "--b is given twice" --b 2 --b 3
expect_refusal_saying "--window is given twice" P1 --window 1,1 --window 2,2
expect_refusal_saying "--causal and --causal-top-left exclude each other" --causal \
    --causal-top-left
expect_refusal_saying "one shape at a time (got P1 and P2)" P1 P2
expect_refusal_saying "--hw is given twice" --hw host --hw host
expect_refusal_saying "--head-major needs paged K/V" P1 --head-major
expect_refusal_saying "--k-channel-scales needs a quantized K" --k-channel-scales
expect_refusal_saying "--b needs an integer >= 0, got '+2'" --b +2
expect_refusal_saying "got '0x10'" --softcap 0x10
expect_refusal_saying "stays nonzero and finite in float32, got '1e39'" --softcap 1e39
expect_refusal_saying "batch = 20000000 is outside" D1 --b 20000000
# the other commands: their own options once, numbers in decimal, no options that do not apply
for args in "demo --runs 2 --runs 3:--runs is given twice" \
    "check --seed 0x10:--seed needs a non-negative integer, got '0x10'" \
    "check --case 3 --seed 2:--cases and --seed do not apply" \
    "tune --b 2147483647 --sq 2147483647 --no-store:batch = 2147483647 is outside"; do
    status=0
    # shellcheck disable=SC2086 # the command's words
    "$fai" ${args%%:*} >"$tmp/stdout" 2>"$tmp/stderr" || status=$?
    [ "$status" -eq 2 ] && grep -q -- "${args#*:}" "$tmp/stderr" ||
        { echo "fai ${args%%:*}: exit $status, stderr '$(cat "$tmp/stderr")'"; exit 1; }
done
# one line too for values that parse but mean nothing here
status=0
"$fai" plan P1 --hw host --tile 64x64x96 >"$tmp/stdout" 2>"$tmp/stderr" || status=$?
[ "$status" -eq 2 ] && grep -q "64x64x96" "$tmp/stderr" && [ ! -s "$tmp/stdout" ] ||
    { echo "fai plan --hw host --tile 64x64x96: expected exit 2 naming the tile"; exit 1; }
status=0
"$fai" plan P1 --hw ascend950 --tile 5000x128 >"$tmp/stdout" 2>"$tmp/stderr" || status=$?
[ "$status" -eq 2 ] && grep -q "refuses tile 5000x128" "$tmp/stderr" ||
    { echo "a tile the planner refuses: expected exit 2 naming it"; exit 1; }
# shapes: a name anywhere takes the flags; flags alone start from the custom base (no mask);
# --d sets Dv too unless --dv is given
expect_shape() { # expected first line, arguments...
    local want=$1; shift
    local got; got=$("$fai" plan "$@" | head -1)
    [ "$got" = "$want" ] || { echo "fai plan $*: '$got', expected '$want'"; exit 1; }
}
expect_shape "shape custom: B=1 Hq=32 Hkv=8 Sq=2048 Skv=2048 D=64 Dv=64 causal" --d 64 P1
expect_shape "shape custom: B=1 Hq=32 Hkv=8 Sq=2048 Skv=2048 D=128 Dv=64 causal" P1 --dv 64
expect_shape "shape custom: B=2 Hq=4 Hkv=1 Sq=1 Skv=1 D=64 Dv=64" --b 2 --hq 4 --d 64
expect_shape "shape custom: B=1 Hq=1 Hkv=1 Sq=1 Skv=1 D=128 Dv=128 causal" --causal
expect_shape "shape P1: B=1 Hq=32 Hkv=8 Sq=2048 Skv=2048 D=128 Dv=128 causal"
echo "test_plan_hw: ok"

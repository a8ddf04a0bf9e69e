#!/bin/bash
# The imbalance of fai's split (auto) and of the seed's greedy rule, side by side, for the
# benchmark shapes and the long-context and causal shapes at 2 to 192 workers:
#   FAI_TUNE_CACHE=off bash bench/imbalance_table.sh [path/to/fai]
fai=${1:-./build/fai}
row() { # label, worker list, shape args...
  local label=$1 workers=$2; shift 2
  printf "%-28s" "$label"
  for w in $workers; do
    a=$($fai plan "$@" --workers $w --json | python3 -c 'import json,sys; print("%.3f" % json.load(sys.stdin)["imbalance"])')
    g=$($fai plan "$@" --workers $w --strategy greedy --json | python3 -c 'import json,sys; print("%.2f" % json.load(sys.stdin)["imbalance"])')
    printf " %-11s" "$a/$g"
  done
  echo
}
W="2 8 24 64 128 192"
printf "%-28s" "workers"; for w in $W; do printf " %-11s" $w; done; echo
for s in P1 P2 D1 D2 C1; do row $s "$W" $s; done
row "1x32x8 Sq1 Skv131072 paged" "$W" --b 1 --hq 32 --hkv 8 --sq 1 --skv 131072 --d 128 --page-size 128
row "causal 3x8 Sq=Skv=3000" "$W" --b 3 --hq 8 --hkv 8 --sq 3000 --skv 3000 --d 128 --causal
row "1x32x8 Sq1 Skv4096" "2 8 24" --b 1 --hq 32 --hkv 8 --sq 1 --skv 4096 --d 128

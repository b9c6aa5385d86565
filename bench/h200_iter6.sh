#!/usr/bin/env bash
# bench/h200_iter6.sh: what the L2 prefetch of the small-bh state pass is worth (PROBE 1024 turns it
# off) and the v6 state pass's stall reasons. Carry: target/release/deltarule.
set -uo pipefail
source bench/h200_env.sh
B=./target/release/deltarule
for pr in 0 1024; do
  echo "-- probe $pr"
  DELTARULE_CUDA_PROBE=$pr $B bench --backend cuda:small-bh --shape gdn-16/32-1x8192 gdn-4/8-1x8192 kda-32/32-1x8192 --iters 20 2>/dev/null | tail -3
done
M='regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,sm__cycles_elapsed.avg'
timeout 100 ncu --clock-control none -k "regex:gdn_prefill_state" -c 1 --metrics "$M" $B bench --backend cuda:small-bh --shape gdn-16/32-1x8192 --warmup 0 --iters 1 --rotate-mib 1 > "$OUT/stalls.txt" 2>&1
awk '/gdn_prefill_state/{print} /stalled/{ if ($NF+0 > 0.1) print } /inst_executed.sum|cycles_elapsed/{print}' "$OUT/stalls.txt" | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//'

#!/usr/bin/env bash
# bench/h200_s4b.sh (session 4, call 2): where the v7 small-bh time goes: ncu durations and
# stall reasons of the intra and register-state kernels (gdn 16/32 and 4/8 1x8192). Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
SECS="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis"
M='regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,sm__cycles_elapsed.avg,gpu__time_duration.sum,smsp__inst_executed_op_ldsm.sum,sm__inst_executed_pipe_tensor_op_hmma.sum'
for sh in gdn-16/32-1x8192 gdn-4/8-1x8192; do
  n=${sh//\//_}
  timeout 120 ncu --clock-control none -k "regex:prefill_(intra|state)" -c 2 $SECS --metrics "$M" $B bench --backend cuda:small-bh --shape $sh --warmup 0 --iters 1 --rotate-mib 1 > "$OUT/ncu_$n.txt" 2>&1
  echo "== $sh ncu rc=$?"
  grep -E "^  [a-z_]+_(intra|state)|Duration|Registers Per|Achieved Occupancy|Issue Slots Busy|L2 Cache Throughput|L1/TEX Cache Throughput|DRAM Throughput|Compute \(SM\) Throughput|Block Limit Shared|inst_executed|cycles_elapsed|hmma" "$OUT/ncu_$n.txt" | head -50
  awk '/prefill_(intra|state)/{print} /stalled/{ if ($NF+0 > 0.2) print }' "$OUT/ncu_$n.txt" | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | head -40
done

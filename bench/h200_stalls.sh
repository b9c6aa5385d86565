#!/usr/bin/env bash
# bench/h200_stalls.sh: the warp stall reasons and instruction mix of the CUDA small-bh kernels
# (ncu metrics) and the small-bh gdn time with parts left out (DELTARULE_CUDA_PROBE bit masks,
# kernels/prefill.cuh). Carry: target/release/deltarule, .dev/cubin.
set -uo pipefail
source bench/h200_env.sh
B=./target/release/deltarule
M='regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,sass__inst_executed_per_opcode,smsp__inst_executed.sum,sm__cycles_elapsed.avg'
timeout 150 ncu --clock-control none -k "regex:gdn_prefill_(intra|state)" -c 2 --metrics "$M" $B bench --backend cuda:small-bh --shape gdn-16/32-1x8192 --warmup 0 --iters 1 --rotate-mib 1 > "$OUT/stalls_gdn.txt" 2>&1
echo "ncu rc=$?"
awk '/gdn_prefill_(intra|state)/{print} /stalled/{ if ($NF+0 > 0.1) print }' "$OUT/stalls_gdn.txt" | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | head -60
echo "== small-bh gdn 16/32 1x8192 with parts left out (state: 1 fetch, 2 W.S/q.S, 4 S update; intra: 8 solve, 16 exps, 32 A/P)"
for pr in 0 1 2 4 6 7 8 16 32 56; do
  printf "probe %-3s " $pr
  DELTARULE_CUDA_PROBE=$pr $B bench --backend cuda:small-bh --shape gdn-16/32-1x8192 --iters 20 2>/dev/null | awk 'NR==2{print $4" ms"}'
done

#!/usr/bin/env bash
# bench/h200_probe.sh: where the time goes (one H200 call, ~4 minutes): Nsight Compute sections
# (speed of light, occupancy, warp stall reasons, memory) of the CUDA prefill and decode kernels on
# the key shapes, and the WGSL intra pass with parts left out (DELTARULE_WGPU_PROBE bit masks,
# see AdapterChoice::probe) next to the whole-call and per-pass times.
# Carry: target/release/deltarule, .dev/cubin, .gl.
set -uo pipefail
source bench/h200_env.sh
B=./target/release/deltarule
SECS="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis"
prof() { # name backend shape kernel-regex count
  timeout 120 ncu --clock-control none -k "regex:$4" -c "$5" $SECS $B bench --backend "$2" --shape "$3" --warmup 0 --iters 1 --rotate-mib 1 > "$OUT/ncu_$1.txt" 2>&1
  echo "ncu $1 rc=$?"
  grep -E "^  [a-z_]+_(intra|state|fused|recurrent)|Duration|Registers Per|Achieved Occupancy|Issue Slots Busy|Memory Throughput|DRAM Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|Compute \(SM\) Throughput|Block Limit" "$OUT/ncu_$1.txt" | head -60
}
if [[ ${NCU:-1} == 1 ]]; then
  prof gdn_sbh cuda:small-bh gdn-16/32-1x8192 "prefill_(intra|state)" 2
  prof kda_sbh cuda:small-bh kda-32/32-1x8192 "prefill_(intra|state)" 2
  prof gdn_fused cuda:chunked gdn-16/32-16x1024 "prefill_fused" 1
  prof decode cuda gdn-decode-16/32-256x1 "decode_recurrent" 1
fi
echo "== wgpu probes (gdn 16/32 1x8192; bits: 1 W/U stores, 2 P stores, 4 solve, 8 step 4, 16 step 2)"
$B backends 2>&1 | head -20
for pr in 0 1 2 3 4 8 12 16 28 31; do
  echo "-- probe $pr"
  DELTARULE_WGPU_PROBE=$pr $B bench --backend wgpu --shape gdn-16/32-1x8192 --iters 10 2>/dev/null | grep -v "^$"
done
echo "-- state BV 16"
DELTARULE_WGPU_STATE_BV=16 $B bench --backend wgpu --shape gdn-16/32-1x8192 --iters 10 2>/dev/null

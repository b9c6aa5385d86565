#!/usr/bin/env bash
# bench/h200_s7e.sh (session 7, not run: the session's device time ran out): the wgmma state
# pass's o rows staged in shared memory and written by the fetch warp (stage_o / store_o_staged,
# bench/patches/s7e-stage-o.patch; apply it to kernels/prefill.cuh, precompile, pack, then run). Correctness first (device tests,
# conformance, golden diffs, memcheck), then the anchor shapes through auto and the per-kernel
# split; the table last. Carry: .dev/pack .gl
set -uo pipefail
source bench/h200_env.sh
source bench/h200_lib.sh
cuda_checks 120
echo "-- auto" | tee -a "$OUT/table.txt"
bench_rows --backend cuda --shape gdn-16/32-1x8192 gdn-16/32-1x32768 gdn-16/32-16x1024 gdn-16/32-256x64 gdn-4/8-1x8192 kda-32/32-1x8192 kda-64/64-1x8192 --iters 30 | tail -7 | awk '{print $1, $3, $4, $5}' | tee -a "$OUT/table.txt"
ncu_split gdn-16/32-1x8192 | tee -a "$OUT/table.txt"
# session 8: the WGSL coop path as it stands (its ws16 prelude move was never run on the H200)
echo "-- wgpu:coop" | tee -a "$OUT/table.txt"
timeout 150 .dev/bin/deltarule bench --backend wgpu:coop --shape gdn-16/32-1x8192 kda-32/32-1x8192 --iters 20 2>&1 | grep -E "^(gdn|kda)|stages" | tee -a "$OUT/table.txt"
(cd "$OUT" && tar czf logs.tgz *.log && rm -f *.log)
echo "== table"; cat "$OUT/table.txt"

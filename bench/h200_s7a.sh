#!/usr/bin/env bash
# bench/h200_s7a.sh (session 7, call 1): the wgmma state pass (kernels/prefill.cuh,
# smallbh_state_wg; auto takes it wherever the module has it). Correctness first (device tests,
# conformance and golden diffs through auto = wgmma, memcheck), then the mma.sync pass forced
# (DELTARULE_CUDA_STATE_BV=32) through the device tests, then auto against the forced mma.sync
# tiles on the anchor shapes; the table last. Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
source bench/h200_lib.sh
cuda_checks 150
grep -E "^###| expected " "$OUT/diff_cuda.log" | awk '{print $1, $2, $4, $6, $NF}' | head -24
echo "-- mma.sync pass forced (BV=32): device tests"
DELTARULE_CUDA_STATE_BV=32 timeout 120 .dev/bin/cuda_device --test-threads=1 --nocapture > "$OUT/dev32.log" 2>&1; echo "device tests (BV=32) rc=$?"
grep -E " ran, |panicked|FAIL" "$OUT/dev32.log" | head -8
echo "-- timings: auto (wgmma) against forced mma.sync tiles"
for bv in auto 32 64 16; do
  if [[ $bv == auto ]]; then unset DELTARULE_CUDA_STATE_BV; else export DELTARULE_CUDA_STATE_BV=$bv; fi
  echo "BV=$bv"
  bench_rows --backend cuda --shape gdn-16/32-1x8192 gdn-16/32-1x32768 gdn-16/32-16x1024 gdn-16/32-256x64 gdn-4/8-1x8192 kda-32/32-1x8192 kda-64/64-1x8192 --iters 30 | tail -7 | awk '{print $1, $3, $4, $5}' | tee -a "$OUT/table.txt"
done
unset DELTARULE_CUDA_STATE_BV
ncu_split gdn-16/32-1x8192 gdn-16/32-1x32768
(cd "$OUT" && tar czf logs.tgz *.log && rm -f *.log)
echo "== table"; cat "$OUT/table.txt"

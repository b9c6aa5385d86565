#!/usr/bin/env bash
# bench/h200_s9d.sh: session 9, fourth H200 call: the T-form pass with o staged in shared memory at
# the end of a chunk and stored by TMA while the next chunk runs. Correctness (device tests, conformance and golden diffs with the T-form
# forced, BV=wgt), then auto (T-form) against PROBE 4096 (per-thread o stores at the chunk end, as in s9a),
# 2048 (T_u hi only) and 6144 (both), and ncu kernel times. Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
source bench/h200_lib.sh
export DELTARULE_CUDA_STATE_BV=wgt
timeout 150 .dev/bin/cuda_device --test-threads=1 --nocapture > "$OUT/dev_wgt.log" 2>&1; echo "device tests (BV=wgt) rc=$?"
grep -E " ran, |panicked|FAIL" "$OUT/dev_wgt.log" | head -14
timeout 90 .dev/bin/conformance --test-threads=1 --nocapture cuda:: > "$OUT/conf_wgt.log" 2>&1; echo "conformance cuda:: (BV=wgt) rc=$?"
grep -E " ran, |panicked|FAIL" "$OUT/conf_wgt.log" | head -8
for b in cuda cuda:small-bh; do
  timeout 40 $B diff --case tests/golden/shared/*.safetensors --backend $b > "$OUT/diff_${b/:/_}.log" 2>&1
  echo "diff BV=wgt $b rc=$? $(tail -1 "$OUT/diff_${b/:/_}.log")"
done
grep -E " expected " "$OUT/diff_cuda_small-bh.log" | awk '{print $1, $2, $4, $6, $NF}' | head -4
unset DELTARULE_CUDA_STATE_BV
echo "== timings (auto)"
for pr in 0 4096 2048 6144; do
  echo "PROBE=$pr"
  DELTARULE_CUDA_PROBE=$pr bench_rows --backend cuda --shape gdn-16/32-1x8192 gdn-16/32-1x32768 gdn-16/32-16x1024 gdn-16/32-256x64 --iters 30 | tail -4 | awk '{print $1, $4, $5}'
done
echo "== ncu (auto)"
ncu_split gdn-16/32-1x8192 gdn-16/32-1x32768
(cd "$OUT" && tar czf logs_s9d.tgz *.log 2>/dev/null; rm -f *.log)

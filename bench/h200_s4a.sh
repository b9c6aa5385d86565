#!/usr/bin/env bash
# bench/h200_s4a.sh (session 4, call 1): the register-state small-bh state pass (v7). Correctness
# first (device tests with the auto tile and with 32- and 64-column tiles forced, conformance
# through auto, golden diffs, memcheck), then the small-bh shapes at each tile width and the
# anchors through auto. Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
timeout 200 .dev/bin/cuda_device --test-threads=1 --nocapture > "$OUT/dev.log" 2>&1; echo "device tests rc=$?"
grep -E " ran, |panicked|worst|FAIL" "$OUT/dev.log" | head -20; grep "test result" "$OUT/dev.log"
for bv in 32 64; do
  DELTARULE_CUDA_STATE_BV=$bv timeout 100 .dev/bin/cuda_device --test-threads=1 --nocapture small_bh > "$OUT/dev_bv$bv.log" 2>&1; echo "small_bh BV=$bv rc=$?"
  grep -E " ran, |panicked|FAIL" "$OUT/dev_bv$bv.log" | head -8
done
timeout 120 .dev/bin/conformance --test-threads=1 --nocapture cuda:: > "$OUT/conf.log" 2>&1; echo "conformance cuda:: rc=$?"
grep -E " ran, |test result" "$OUT/conf.log"
for b in cuda cuda:small-bh cuda:chunked; do timeout 60 $B diff --case tests/golden/shared/*.safetensors --backend $b > "$OUT/diff_${b/:/_}.log" 2>&1; echo "diff $b rc=$? $(tail -1 "$OUT/diff_${b/:/_}.log")"; done
grep -E "o |state" "$OUT/diff_cuda_small-bh.log" | head -30
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 .dev/bin/cuda_device --test-threads=1 sanitizer_subset > "$OUT/memcheck.log" 2>&1; echo "memcheck rc=$? $(grep 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
echo "== small-bh by tile width"
for bv in 16 32 64; do
  echo "-- BV=$bv"
  DELTARULE_CUDA_STATE_BV=$bv timeout 90 $B bench --backend cuda:small-bh --shape gdn-16/32-1x8192 gdn-4/8-1x8192 kda-32/32-1x8192 gdn-16/32-16x1024 --iters 30 2>&1 | grep -v '^\s*$' | tail -6
done
echo "== anchors, auto and both kernels"
timeout 150 $B bench --shape anchors --backend cuda cuda:small-bh cuda:chunked --iters 30 2>&1 | grep -v '^\s*$' | tail -30

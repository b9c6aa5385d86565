#!/usr/bin/env bash
# bench/h200_s4i.sh (session 4, call 11): 64-column state tiles when 32-column ones need a second
# wave (auto now picks them for kda 64/64): correctness with BV=64 forced, then auto against
# forced 32 on the many-head single-sequence shapes. Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
DELTARULE_CUDA_STATE_BV=64 timeout 100 .dev/bin/cuda_device --test-threads=1 --nocapture small_bh > "$OUT/dev64.log" 2>&1; echo "small_bh BV=64 rc=$?"
grep -E " ran, |panicked|FAIL" "$OUT/dev64.log" | head -4
DELTARULE_CUDA_STATE_BV=64 timeout 60 $B diff --case tests/golden/shared/*.safetensors --backend cuda:small-bh > "$OUT/diff64.log" 2>&1; echo "diff BV=64 rc=$? $(tail -1 "$OUT/diff64.log")"
for bv in auto 32; do
  echo "-- BV=$bv"
  if [[ $bv == auto ]]; then unset DELTARULE_CUDA_STATE_BV; else export DELTARULE_CUDA_STATE_BV=$bv; fi
  timeout 100 $B bench --backend cuda --shape kda-64/64-1x8192 gdn-16/64-1x8192 gdn-32/64-1x8192 --iters 30 2>&1 | grep -v '^\s*$' | grep -v generating | tail -3
done

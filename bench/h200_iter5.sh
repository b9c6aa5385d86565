#!/usr/bin/env bash
# bench/h200_iter5.sh: the bulk-copy state pass: CUDA device tests (both state widths), the
# golden diff, and the key shapes with bulk copies vs the cp.async fetch (PROBE 512).
# Carry: target/release/deltarule, .dev/bin, .dev/cubin.
set -uo pipefail
source bench/h200_env.sh
B=./target/release/deltarule
for bv in auto 32; do
  if [[ $bv == auto ]]; then unset DELTARULE_CUDA_STATE_BV; else export DELTARULE_CUDA_STATE_BV=$bv; fi
  timeout 60 .dev/bin/cuda_device --test-threads=1 --nocapture small_bh > $OUT/dev_$bv.log 2>&1; echo "small-bh device tests (state bv $bv) rc=$?"
  grep -E " ran, |panicked" $OUT/dev_$bv.log | head -5
done
unset DELTARULE_CUDA_STATE_BV
timeout 60 $B diff --case tests/golden/shared/*.safetensors --backend cuda:small-bh > $OUT/diff.log 2>&1; echo "diff small-bh rc=$? $(grep comparisons $OUT/diff.log)"
timeout 60 $B bench --backend cuda:small-bh --shape gdn-16/32-1x8192 gdn-4/8-1x8192 kda-32/32-1x8192 gdn-16/32-16x1024 --iters 20 2>/dev/null
echo "-- cp.async fetch (PROBE 512)"
DELTARULE_CUDA_PROBE=512 timeout 120 $B bench --backend cuda:small-bh --shape gdn-16/32-1x8192 gdn-4/8-1x8192 --iters 20 2>/dev/null | tail -2
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 .dev/bin/cuda_device --test-threads=1 sanitizer_subset > $OUT/memcheck.log 2>&1; echo "memcheck rc=$?"; grep -E "ERROR SUMMARY" $OUT/memcheck.log | tail -1

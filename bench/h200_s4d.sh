#!/usr/bin/env bash
# bench/h200_s4d.sh (session 4, call 5): is the v7 state pass waiting on its fetch? The small-bh
# shapes with the fetch variants of kernels/prefill.cuh (DELTARULE_CUDA_PROBE: 1 no fetch after
# the prologue, results wrong; 2048 eight bulk copies; 4096 per-thread cp.async; the last two were
# removed after this call, measured slower), correctness of
# the two real variants. Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
for pr in 2048 4096; do
  DELTARULE_CUDA_PROBE=$pr timeout 150 .dev/bin/cuda_device --test-threads=1 --nocapture small_bh > "$OUT/dev_p$pr.log" 2>&1; echo "small_bh PROBE=$pr rc=$?"
  grep -E " ran, |panicked|FAIL" "$OUT/dev_p$pr.log" | head -4
done
for pr in 0 1 2048 4096; do
  echo "-- PROBE=$pr"
  DELTARULE_CUDA_PROBE=$pr timeout 120 $B bench --backend cuda:small-bh --shape gdn-16/32-1x8192 gdn-4/8-1x8192 kda-32/32-1x8192 --iters 30 2>&1 | grep -v '^\s*$' | grep -v generating | tail -3
done

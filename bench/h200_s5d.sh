#!/usr/bin/env bash
# bench/h200_s5d.sh (session 5, call 4): kda diagonal-block exponentials through a second reference
# point (7 instead of 16 a channel), the fused kernel loads its initial state after the first intra stage (L2 prefetch), non-persistent intra again.
# Correctness first (device tests, conformance, diffs, memcheck subset), then times (auto, the
# timeline probe).
# Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
source bench/h200_lib.sh
cuda_checks 150
for pr in 0; do
  echo "-- auto, PROBE=$pr"
  DELTARULE_CUDA_PROBE=$pr bench_rows --backend cuda --shape gdn-16/32-1x8192 gdn-4/8-1x8192 kda-32/32-1x8192 kda-64/64-1x8192 gdn-16/32-1x32768 --iters 30 | tail -6
  DELTARULE_CUDA_PROBE=$pr bench_rows --backend cuda:chunked cuda:small-bh --shape gdn-16/32-16x1024 gdn-16/32-256x64 --iters 30 | tail -4
done
echo "-- timeline probe (cycles per phase, mean over sampled chunks)"
tl_probe cuda:small-bh gdn-16/32-1x8192
tl_probe cuda:small-bh kda-32/32-1x8192
tl_probe cuda:chunked gdn-16/32-256x64
echo "-- per-kernel durations (ncu)"
ncu_split gdn-16/32-1x8192 kda-32/32-1x8192

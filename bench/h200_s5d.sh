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
s5_timings 0
echo "-- per-kernel durations (ncu)"
ncu_split gdn-16/32-1x8192 kda-32/32-1x8192

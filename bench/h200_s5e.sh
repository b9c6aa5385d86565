#!/usr/bin/env bash
# bench/h200_s5e.sh (session 5, call 5): kda X, q̃, k̃ with 16-byte loads and stores, T' built in
# column pairs.
# Correctness first (device tests, conformance, diffs, memcheck subset), then times (auto, the
# timeline probe).
# Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
source bench/h200_lib.sh
cuda_checks 150
s5_timings 0
echo "-- per-kernel durations (ncu)"
ncu_split gdn-16/32-1x8192 kda-32/32-1x8192 kda-64/64-1x8192

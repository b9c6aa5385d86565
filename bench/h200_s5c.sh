#!/usr/bin/env bash
# bench/h200_s5c.sh (session 5, call 3): persistent small-bh intra (the bulk copies of one chunk
# drain while the next chunk loads) and the T merge on tensor cores (doubling, bf16 hi + lo).
# Correctness first (device tests, conformance, diffs, memcheck subset), then times (auto, the
# old merge through DELTARULE_CUDA_PROBE=512 in the same call) and the timeline probe.
# Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
source bench/h200_lib.sh
cuda_checks 150
s5_timings 0 512

#!/usr/bin/env bash
# bench/h200_s5a.sh (session 5, call 1): re-verify the tree (session 4's refactors never ran on the
# GPU), time small-bh against chunked on the many-pair shapes, then a timeline probe
# (DELTARULE_CUDA_PROBE=256: clock64 phase lengths of sampled intra chunks, printf) to place the
# intra kernel's time. Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
source bench/h200_lib.sh
cuda_checks 0
echo "-- auto"
bench_rows --backend cuda --shape gdn-16/32-1x8192 gdn-4/8-1x8192 kda-32/32-1x8192 kda-64/64-1x8192 --iters 30 | tail -5
echo "-- many pairs: chunked vs small-bh"
bench_rows --backend cuda:chunked cuda:small-bh --shape gdn-16/32-16x1024 gdn-16/32-256x64 --iters 30 | tail -5
echo "-- timeline probe (cycles per phase, mean over sampled chunks)"
tl_probe cuda:small-bh gdn-16/32-1x8192
tl_probe cuda:small-bh kda-32/32-1x8192
tl_probe cuda:chunked gdn-16/32-256x64
tl_probe cuda:chunked gdn-16/32-16x1024

#!/usr/bin/env bash
# bench/h200_s6c.sh (session 6, call 3): s6b plus U's fragment-order stores without branches
# (gdn and kda). Correctness first, then the anchor shapes, the timeline probes and the source
# counters of both intra kernels. Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
source bench/h200_lib.sh
cuda_checks 150
echo "-- auto"
bench_rows --backend cuda --shape kda-32/32-1x8192 kda-64/64-1x8192 gdn-16/32-1x8192 gdn-16/32-1x32768 gdn-4/8-1x8192 --iters 30 | tail -6
tl_probe cuda:small-bh kda-32/32-1x8192
tl_probe cuda:small-bh gdn-16/32-1x8192
src_profile kda-32/32-1x8192 12
src_profile gdn-16/32-1x8192 12

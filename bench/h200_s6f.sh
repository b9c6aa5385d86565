#!/usr/bin/env bash
# bench/h200_s6f.sh (session 6, call 6): the small-bh state pass's V tile on the many-pair shapes
# (DELTARULE_CUDA_STATE_BV forces 16, 32 or 64 columns) against the fused chunked kernel, on the
# s6e tree. No kernel change: timing only. Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
source bench/h200_lib.sh
for bv in 32 64 16; do
  echo "-- small-bh, state BV=$bv"
  DELTARULE_CUDA_STATE_BV=$bv bench_rows --backend cuda:small-bh --shape gdn-16/32-16x1024 gdn-16/32-1x8192 kda-32/32-1x8192 gdn-16/32-64x256 --iters 30 | tail -4 | awk '{print $1, $4, $5}'
done
echo "-- chunked"
bench_rows --backend cuda:chunked --shape gdn-16/32-16x1024 gdn-16/32-64x256 --iters 30 | tail -2 | awk '{print $1, $4, $5}'
ncu_split gdn-16/32-16x1024

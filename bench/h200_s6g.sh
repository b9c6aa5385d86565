#!/usr/bin/env bash
# bench/h200_s6g.sh (session 6, call 7): where small-bh (state BV 32 / 64) beats the fused chunked
# kernel on many-pair shapes: gdn and kda, 1 to 16 chunks per sequence. Timing only (s6e tree).
# Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
source bench/h200_lib.sh
S="gdn-16/32-256x64 gdn-16/32-128x128 gdn-16/32-32x512 kda-32/32-16x1024 kda-32/32-64x256 kda-32/32-256x64"
for bv in 32 64; do
  echo "-- small-bh, state BV=$bv"
  DELTARULE_CUDA_STATE_BV=$bv bench_rows --backend cuda:small-bh --shape $S --iters 20 | tail -6 | awk '{print $1, $4, $5}'
done
echo "-- chunked"
bench_rows --backend cuda:chunked --shape $S --iters 20 | tail -6 | awk '{print $1, $4, $5}'

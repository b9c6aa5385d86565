#!/usr/bin/env bash
# bench/h200_s15e.sh: session 15, last call: the boundary of auto's new gdn rule (fused T-form when
# every sequence fits one chunk and pairs > SMs) on one-chunk shapes other than 256x64: fewer
# pairs (8x64: 256 pairs, 32x64: 1024), partial chunks (1024x32), GVA (gdn 4/8 256x64), and
# 512x64 (past the workspace bound), cuda:chunked (fused T-form) against cuda:small-bh.
# Carry: .dev/pack (bash bench/pack_s15.sh)
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
S="gdn-16/32-8x64 gdn-16/32-32x64 gdn-16/32-1024x32 gdn-4/8-256x64 gdn-16/32-512x64"
timeout 60 $B bench --backend cuda:chunked --shape gdn-16/32-8x64 --iters 5 > /dev/null 2>&1
for b in cuda:chunked cuda:small-bh cuda; do
  timeout 100 $B bench --backend $b --shape $S --iters 30 2>&1 | grep -E "^gdn"
done

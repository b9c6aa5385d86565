#!/usr/bin/env bash
# bench/h200_s6h.sh (session 6, call 8): gdn small-bh intra: P leaves through the free k̃ slot by
# one bulk copy (was per-thread global stores), V's loads issued before X/q̃/k̃ are built.
# Correctness first, then the anchor shapes and the gdn timeline; the table last. Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
source bench/h200_lib.sh
cuda_checks 150
tl_probe cuda:small-bh gdn-16/32-1x8192
echo "-- auto"
bench_rows --backend cuda --shape gdn-16/32-1x8192 gdn-16/32-1x32768 gdn-4/8-1x8192 gdn-16/32-16x1024 kda-32/32-1x8192 --iters 30 | tail -5 | awk '{print $1, $3, $4, $5}'
(cd "$OUT" && tar czf logs.tgz *.log && rm -f *.log)

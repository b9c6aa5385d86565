#!/usr/bin/env bash
# bench/h200_s6e.sh (session 6, call 5): kda's slice build specialised per sub-chunk (two rows a
# thread, loads before stores) and kda's gate loads specialised for raw log decays. Correctness
# first, then the anchor shapes, the kda timeline and source counters; the table last.
# Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
source bench/h200_lib.sh
cuda_checks 150
tl_probe cuda:small-bh kda-32/32-1x8192
src_profile kda-32/32-1x8192 10 > "$OUT/prof_kda.txt" 2>&1; head -30 "$OUT/prof_kda.txt" | cut -c1-160
echo "-- auto"
bench_rows --backend cuda --shape kda-32/32-1x8192 kda-64/64-1x8192 gdn-16/32-1x8192 gdn-16/32-1x32768 gdn-4/8-1x8192 --iters 30 | tail -5 | awk '{print $1, $4, $5}'
(cd "$OUT" && tar czf logs.tgz *.log && rm -f *.log)

#!/usr/bin/env bash
# bench/h200_s6b.sh (session 6, call 2): kda's slice build unrolled (both items of a thread, the
# reference rows) and kda's Γ kept in log2 units. Correctness first (device tests, conformance,
# golden diffs, memcheck subset), then the anchor shapes and the kda timeline probe. Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
source bench/h200_lib.sh
cuda_checks 150
grep -E "kda.*(err|rel)" "$OUT/diff_cuda.log" | head -8
echo "-- auto"
bench_rows --backend cuda --shape kda-32/32-1x8192 kda-64/64-1x8192 gdn-16/32-1x8192 --iters 30 | tail -4
tl_probe cuda:small-bh kda-32/32-1x8192

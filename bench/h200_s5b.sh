#!/usr/bin/env bash
# bench/h200_s5b.sh (session 5, call 2): the small-bh intra block leaves by bulk copies from
# shared memory (U staged over X/V, gdn's q̃/k̃ kept in shared) and the intra loads in one pass
# (β/g first). Correctness (device tests, conformance, diffs, memcheck subset), times, and the
# timeline probe again. Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
source bench/h200_lib.sh
cuda_checks 150
echo "-- auto"
bench_rows --backend cuda --shape gdn-16/32-1x8192 gdn-4/8-1x8192 kda-32/32-1x8192 kda-64/64-1x8192 gdn-16/32-1x32768 --iters 30 | tail -6
echo "-- many pairs"
bench_rows --backend cuda:chunked cuda:small-bh --shape gdn-16/32-16x1024 gdn-16/32-256x64 --iters 30 | tail -5
echo "-- timeline probe (cycles per phase, mean over sampled chunks)"
tl_probe cuda:small-bh gdn-16/32-1x8192
tl_probe cuda:small-bh kda-32/32-1x8192
tl_probe cuda:chunked gdn-16/32-256x64

#!/usr/bin/env bash
# bench/h200_s5h.sh (session 5, call 10, after the closing call): kda's q/k rows by cp.async into
# shared memory, normalised in place after the gate loads (one exposed load latency instead of
# two); gdn small-bh's V rows by cp.async into the free k̃ slot at the start. Correctness (device tests, conformance, diffs, memcheck subset), kda times, kda timeline.
# Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
source bench/h200_lib.sh
cuda_checks 100
bench_rows --backend cuda --shape kda-32/32-1x8192 kda-64/64-1x8192 gdn-16/32-1x8192 gdn-4/8-1x8192 gdn-16/32-1x32768 --iters 30 | tail -6
tl_probe cuda:small-bh kda-32/32-1x8192
tl_probe cuda:small-bh gdn-16/32-1x8192

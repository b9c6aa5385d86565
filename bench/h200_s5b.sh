#!/usr/bin/env bash
# bench/h200_s5b.sh (session 5, call 2): the small-bh intra block leaves by bulk copies from
# shared memory (U staged over X/V, gdn's q̃/k̃ kept in shared) and the intra loads in one pass
# (β/g first). Correctness (device tests, conformance, diffs, memcheck subset), times, and the
# timeline probe again. Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
source bench/h200_lib.sh
cuda_checks 150
s5_timings 0

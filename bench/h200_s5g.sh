#!/usr/bin/env bash
# bench/h200_s5g.sh (session 5, call 7): the small-bh intra issues its bulk copies as the parts
# become final (gdn q̃/k̃ after step 4, W after its product, U last). Correctness (small-bh device
# tests, golden diffs, memcheck subset), times, gdn timeline. Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
source bench/h200_lib.sh
timeout 100 .dev/bin/cuda_device --test-threads=1 --nocapture small_bh > "$OUT/dev.log" 2>&1; echo "small-bh device tests rc=$?"
grep -E " ran, |panicked|FAIL" "$OUT/dev.log" | head -6
timeout 40 $B diff --case tests/golden/shared/*.safetensors --backend cuda:small-bh > "$OUT/diff.log" 2>&1; echo "diff cuda:small-bh rc=$? $(tail -1 "$OUT/diff.log")"
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 .dev/bin/cuda_device --test-threads=1 sanitizer_subset > "$OUT/memcheck.log" 2>&1; echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
bench_rows --backend cuda --shape gdn-16/32-1x8192 gdn-4/8-1x8192 kda-32/32-1x8192 kda-64/64-1x8192 gdn-16/32-1x32768 --iters 30 | tail -6
tl_probe cuda:small-bh gdn-16/32-1x8192

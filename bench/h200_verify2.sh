#!/usr/bin/env bash
# bench/h200_verify2.sh: a short correctness-and-timing call after a kernel change: the CUDA device
# tests of every kernel, the conformance suite through auto, the golden diffs, memcheck on the
# representative subset, and the key shapes through auto. Carry: .dev/bin, .dev/cubin.
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
timeout 100 .dev/bin/cuda_device --test-threads=1 --nocapture > "$OUT/dev.log" 2>&1; echo "device tests rc=$?"
grep -E " ran, " "$OUT/dev.log" | grep -v " 0 failed" ; grep "test result" "$OUT/dev.log"
timeout 100 .dev/bin/conformance --test-threads=1 --nocapture cuda:: > "$OUT/conf.log" 2>&1; echo "conformance cuda:: rc=$?"
grep -E " ran, " "$OUT/conf.log"
for b in cuda cuda:small-bh cuda:chunked; do timeout 60 $B diff --case tests/golden/shared/*.safetensors --backend $b > "$OUT/diff.log" 2>&1; echo "diff $b rc=$? $(grep comparisons "$OUT/diff.log")"; done
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 .dev/bin/cuda_device --test-threads=1 sanitizer_subset > "$OUT/memcheck.log" 2>&1; echo "memcheck rc=$? $(grep 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
timeout 60 $B bench --backend cuda --shape gdn-16/32-1x8192 gdn-4/8-1x8192 kda-32/32-1x8192 gdn-16/32-16x1024 --iters 20 2>/dev/null

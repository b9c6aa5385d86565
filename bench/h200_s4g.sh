#!/usr/bin/env bash
# bench/h200_s4g.sh (session 4, call 8): v7 state pass + vector loads in the intra stage: device
# tests, conformance through auto, golden diffs, memcheck, the anchor shapes on every CUDA kernel.
# Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
timeout 200 .dev/bin/cuda_device --test-threads=1 --nocapture > "$OUT/dev.log" 2>&1; echo "device tests rc=$?"
grep -E " ran, |panicked|FAIL" "$OUT/dev.log" | head -20; grep "test result" "$OUT/dev.log"
timeout 120 .dev/bin/conformance --test-threads=1 --nocapture cuda:: > "$OUT/conf.log" 2>&1; echo "conformance cuda:: rc=$?"
grep -E " ran, |test result" "$OUT/conf.log"
for b in cuda cuda:small-bh cuda:chunked; do timeout 60 $B diff --case tests/golden/shared/*.safetensors --backend $b > "$OUT/diff_${b/:/_}.log" 2>&1; echo "diff $b rc=$? $(tail -1 "$OUT/diff_${b/:/_}.log")"; done
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 .dev/bin/cuda_device --test-threads=1 sanitizer_subset > "$OUT/memcheck.log" 2>&1; echo "memcheck rc=$? $(grep 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
timeout 150 $B bench --shape anchors --backend cuda cuda:small-bh cuda:chunked --iters 30 2>&1 | grep -v '^\s*$' | grep -v 'generating\|no rule\|the table has' | tail -30

#!/usr/bin/env bash
# bench/h200_s4j.sh (session 4, call 12): re-verification of the final tree after the kernel
# refactor (same instructions, new register allocation): device tests, conformance through auto,
# golden diffs, four shapes. Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
timeout 100 .dev/bin/cuda_device --test-threads=1 --nocapture > "$OUT/dev.log" 2>&1; echo "device tests rc=$?"
grep -E " ran, |panicked|FAIL" "$OUT/dev.log" | head -12
timeout 60 .dev/bin/conformance --test-threads=1 --nocapture cuda:: > "$OUT/conf.log" 2>&1; echo "conformance cuda:: rc=$?"
grep -E " ran, " "$OUT/conf.log"
for b in cuda cuda:small-bh; do timeout 40 $B diff --case tests/golden/shared/*.safetensors --backend $b > "$OUT/diff_${b/:/_}.log" 2>&1; echo "diff $b rc=$? $(tail -1 "$OUT/diff_${b/:/_}.log")"; done
timeout 60 $B bench --backend cuda --shape gdn-16/32-1x8192 gdn-4/8-1x8192 kda-32/32-1x8192 kda-64/64-1x8192 --iters 30 2>&1 | grep -v '^\s*$' | grep -v generating | tail -5

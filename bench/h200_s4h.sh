#!/usr/bin/env bash
# bench/h200_s4h.sh (session 4, call 9): intra with the 2x2 T merge and paired U stores: device
# tests, golden diffs, four shapes. Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
timeout 200 .dev/bin/cuda_device --test-threads=1 --nocapture > "$OUT/dev.log" 2>&1; echo "device tests rc=$?"
grep -E " ran, |panicked|FAIL" "$OUT/dev.log" | head -20
for b in cuda:small-bh cuda:chunked; do timeout 60 $B diff --case tests/golden/shared/*.safetensors --backend $b > "$OUT/diff_${b/:/_}.log" 2>&1; echo "diff $b rc=$? $(tail -1 "$OUT/diff_${b/:/_}.log")"; done
timeout 100 $B bench --backend cuda --shape gdn-16/32-1x8192 gdn-4/8-1x8192 kda-32/32-1x8192 gdn-16/32-16x1024 --iters 30 2>&1 | grep -v '^\\s*$' | grep -v generating | tail -5

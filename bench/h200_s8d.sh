#!/usr/bin/env bash
# bench/h200_s8d.sh (session 8, after the closing calls): two small changes to gdn's coop kernel
# measured against s8final_b's 2.719 ms (intra 1.455, output 0.379): q/k/v loaded as two words
# per four 16-bit elements in the coop intra stage, and the coop output pass loading the next
# k-step's operands before the current products. Correctness first. Carry: .dev/pack .gl
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
timeout 60 $B diff --case tests/golden/shared/*.safetensors --backend wgpu > "$OUT/diff.log" 2>&1; echo "diff wgpu rc=$? $(tail -1 "$OUT/diff.log")"
DELTARULE_REQUIRE_WGPU=1 timeout 200 .dev/bin/conformance --test-threads=1 --nocapture wgpu > "$OUT/conf.log" 2>&1; echo "conformance wgpu rc=$?"
grep -E " ran, " "$OUT/conf.log" | head -8
timeout 60 $B bench --backend wgpu:coop --shape gdn-16/32-1x8192 --iters 10 > /dev/null 2>&1
timeout 100 $B bench --backend wgpu:coop --shape gdn-16/32-1x8192 gdn-16/32-16x1024 --iters 30 --json 2>/dev/null | python3 bench/wgpu_spread.py s8d
timeout 60 $B bench --backend wgpu:coop --shape gdn-16/32-1x8192 --iters 20 2>&1 | grep stages

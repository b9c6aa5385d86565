#!/usr/bin/env bash
# bench/h200_s3h.sh (session 3): the coop kernel v2 (W and kdec as f16 from the intra stage,
# read by the matrix operations straight from storage): golden diffs, conformance, timings
# against wgpu:chunked and fla's numbers of the closing call. Carry: .dev/pack .gl
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
for b in wgpu:coop wgpu:chunked; do timeout 60 $B diff --case tests/golden/shared/*.safetensors --backend $b > "$OUT/diff_${b/:/_}.log" 2>&1; echo "diff $b rc=$? $(tail -1 "$OUT/diff_${b/:/_}.log")"; done
grep -E 'coop ' "$OUT/diff_wgpu_coop.log" | awk '{print $1, $4, $6, $NF}' | head -12
DELTARULE_REQUIRE_WGPU=1 timeout 150 .dev/bin/conformance --test-threads=1 --nocapture wgpu > "$OUT/conf_wgpu.log" 2>&1; echo "conformance wgpu rc=$?"
grep -E " ran, " "$OUT/conf_wgpu.log"
timeout 200 $B bench --backend wgpu:coop wgpu:chunked --shape gdn-16/32-1x8192 kda-32/32-1x8192 gdn-16/32-16x1024 --iters 30 --json 2>/dev/null | python3 bench/wgpu_spread.py v2
timeout 100 $B bench --backend wgpu:coop --shape gdn-16/32-1x8192 --iters 20 2>&1 | grep stages

#!/usr/bin/env bash
# bench/h200_s8c.sh (session 8): gdn's coop kernel with step 4 and the output pass on cooperative
# matrices (operands f16 in ws16, shaders/prefill_output_coop.wgsl): golden diffs and conformance
# on wgpu first, then the stage times (a throwaway bench first: the first one of a call can run
# at a low clock). Carry: .dev/pack .gl
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
for b in wgpu:coop wgpu:chunked; do timeout 60 $B diff --case tests/golden/shared/*.safetensors --backend $b > "$OUT/diff_${b/:/_}.log" 2>&1; echo "diff $b rc=$? $(tail -1 "$OUT/diff_${b/:/_}.log")"; done
grep -E 'coop ' "$OUT/diff_wgpu_coop.log" | awk '{print $1, $4, $6, $NF}' | head -14
DELTARULE_REQUIRE_WGPU=1 timeout 200 .dev/bin/conformance --test-threads=1 --nocapture wgpu > "$OUT/conf_wgpu.log" 2>&1; echo "conformance wgpu rc=$?"
grep -E " ran, |panicked" "$OUT/conf_wgpu.log" | head -20
timeout 60 $B bench --backend wgpu:coop --shape gdn-16/32-1x8192 --iters 10 > /dev/null 2>&1
echo "-- stages" | tee -a "$OUT/table.txt"
timeout 150 $B bench --backend wgpu:coop wgpu:chunked --shape gdn-16/32-1x8192 kda-32/32-1x8192 gdn-16/32-16x1024 --iters 20 2>&1 | grep -E "^(gdn|kda)|stages" | tee -a "$OUT/table.txt"

#!/usr/bin/env bash
# bench/h200_s3c.sh (session 3): the wgpu `coop` state pass on the golden cases, with the
# diagnosis bits (DELTARULE_WGPU_PROBE 32: scalar W·S, 64: scalar ΔS, 96: both), then timings.
# Carry: .dev/pack .gl
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
for pr in 0 32 64 96; do
  DELTARULE_WGPU_PROBE=$pr timeout 60 $B diff --case tests/golden/shared/*.safetensors --backend wgpu:coop > "$OUT/diff_coop_$pr.log" 2>&1
  echo "probe $pr: rc=$? $(tail -1 "$OUT/diff_coop_$pr.log")"
  grep -E 'FAIL|PASS' "$OUT/diff_coop_$pr.log" | awk '{print $1, $4, $6, $NF}' | head -12
done
export DELTARULE_REQUIRE_WGPU=1
timeout 120 .dev/bin/conformance --test-threads=1 --nocapture wgpu > "$OUT/conf_wgpu.log" 2>&1; echo "conformance wgpu (coop on) rc=$?"
grep -E " ran, " "$OUT/conf_wgpu.log" | head -20
timeout 150 $B bench --backend wgpu:coop --shape gdn-16/32-1x8192 kda-32/32-1x8192 --iters 20 2>&1 | grep -v generating | tail -5

#!/usr/bin/env bash
# bench/h200_s3b.sh (session 3): the wgpu `coop` kernel on NVIDIA's Vulkan driver: conformance
# (auto within wgpu picks coop where its rows accept the case; DELTARULE_WGPU_COOP=0 runs the f32
# path), golden diffs, then timings of wgpu:chunked and wgpu:coop with the stage breakdown.
# Carry: .dev/pack .gl
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
export DELTARULE_REQUIRE_WGPU=1
timeout 120 .dev/bin/conformance --test-threads=1 --nocapture wgpu > "$OUT/conf_wgpu.log" 2>&1; echo "conformance wgpu (coop on) rc=$?"
grep -E " ran, |panicked|FAILED" "$OUT/conf_wgpu.log" | head -20
DELTARULE_WGPU_COOP=0 timeout 120 .dev/bin/conformance --test-threads=1 --nocapture wgpu::  > "$OUT/conf_wgpu0.log" 2>&1; echo "conformance wgpu (coop off) rc=$?"
grep -E " ran, |panicked|FAILED" "$OUT/conf_wgpu0.log" | head -8
for b in wgpu wgpu:chunked wgpu:coop; do timeout 60 $B diff --case tests/golden/shared/*.safetensors --backend $b > "$OUT/diff_${b/:/_}.log" 2>&1; echo "diff $b rc=$? $(tail -1 "$OUT/diff_${b/:/_}.log")"; done
grep -E 'rel|o |state' "$OUT/diff_wgpu_coop.log" | head -20
echo "== bench"
timeout 150 $B bench --backend wgpu:chunked wgpu:coop --shape gdn-16/32-1x8192 kda-32/32-1x8192 --iters 20 2>&1 | grep -v generating | tail -8
DELTARULE_WGPU_COOP=0 timeout 60 $B bench --backend wgpu:chunked --shape gdn-16/32-1x8192 --iters 20 2>&1 | grep -v generating | tail -3

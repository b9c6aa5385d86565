#!/usr/bin/env bash
# bench/h200_s3a.sh (session 3, call 1): verifies the CUDA tree without the L2 prefetch (device
# tests, conformance through auto, golden diffs, memcheck, key shapes), then probes wgpu's
# cooperative matrices on NVIDIA's Vulkan driver (bench/../backends/wgpu/tests/coop.rs) and
# times the wgpu prefill with its stage breakdown. Carry: .dev/bin .dev/cubin .gl
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
timeout 150 .dev/bin/cuda_device --test-threads=1 --nocapture > "$OUT/dev.log" 2>&1; echo "device tests rc=$?"
grep -E " ran, " "$OUT/dev.log" | head -20; grep "test result" "$OUT/dev.log"
timeout 100 .dev/bin/conformance --test-threads=1 --nocapture cuda:: > "$OUT/conf.log" 2>&1; echo "conformance cuda:: rc=$?"
grep -E " ran, |test result" "$OUT/conf.log"
for b in cuda cuda:small-bh cuda:chunked; do timeout 60 $B diff --case tests/golden/shared/*.safetensors --backend $b > "$OUT/diff_$b.log" 2>&1; echo "diff $b rc=$? $(tail -1 "$OUT/diff_$b.log")"; done
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 .dev/bin/cuda_device --test-threads=1 sanitizer_subset > "$OUT/memcheck.log" 2>&1; echo "memcheck rc=$? $(grep 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
timeout 90 $B bench --backend cuda --shape gdn-16/32-1x8192 gdn-4/8-1x8192 kda-32/32-1x8192 --iters 30 2>&1 | grep -v '^\s*$' | tail -12
echo "== wgpu backends"
timeout 30 $B backends 2>&1 | grep -i -A12 wgpu | head -30
echo "== coop probe"
DELTARULE_REQUIRE_COOP=1 timeout 60 .dev/bin/wgpu_coop --nocapture --test-threads=1 2>&1 | tail -15
echo "== wgpu bench"
timeout 120 $B bench --backend wgpu --shape gdn-16/32-1x8192 --iters 20 2>&1 | tail -8

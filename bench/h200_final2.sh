#!/usr/bin/env bash
# bench/h200_final2.sh: session 2's closing H200 call: bench/h200_cuda.sh all (CUDA device tests,
# conformance through auto, golden diffs, memcheck, the anchor shapes on every CUDA kernel next to
# flash-linear-attention 0.6.0 in the same call), then the wgpu backend through NVIDIA's Vulkan
# driver (golden diff, the two WGSL target shapes with each pass timed alone).
# Carry: .dev (bin/deltarule, bin/cuda_device, bin/conformance, cubin), .whl (fla wheel), .gl.
set -uo pipefail
source bench/h200_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
TEST_TIMEOUT=200 SAN_TIMEOUT=150 bash bench/h200_cuda.sh all; echo "h200_cuda.sh rc=$?"
echo "== wgpu (NVIDIA Vulkan)"
B=.dev/bin/deltarule
$B backends 2>&1 | grep wgpu
$B diff --case tests/golden/shared/*.safetensors --backend wgpu > "$OUT/diff_wgpu.log" 2>&1; echo "diff wgpu rc=$? $(grep comparisons "$OUT/diff_wgpu.log")"
$B bench --backend wgpu --shape gdn-16/32-1x8192 kda-32/32-1x8192 gdn-16/32-16x1024 --iters 20 2>/dev/null

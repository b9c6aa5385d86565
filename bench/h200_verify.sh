#!/usr/bin/env bash
# bench/h200_verify.sh: one short H200 call after a kernel change (about 3 minutes): CUDA
# correctness (the conformance suite per kernel and through auto, the golden diff), memcheck on the
# representative subset, and timings of the key shapes on cuda and wgpu (per-pass breakdown).
# Carry: target/release/deltarule, .dev/bin (cuda_device and conformance test binaries built with
# `cargo test --release --no-run`), .dev/cubin (DELTARULE_PRECOMPILE=... cargo test --release -p
# deltarule-cuda --test kernels precompile), .gl (Vulkan loader debs).
set -uo pipefail
source bench/h200_env.sh
status=0
echo "== CUDA device tests (each kernel named)"
timeout 150 .dev/bin/cuda_device --test-threads=1 --nocapture > "$OUT/cuda_device.log" 2>&1; rc=$?
grep -E " ran, |test result|panicked" "$OUT/cuda_device.log" | head -20; echo "cuda_device rc=$rc"; [[ $rc == 0 ]] || status=1
if [[ ${AUTO:-0} == 1 ]]; then
  echo "== conformance through auto"
  timeout 120 .dev/bin/conformance --test-threads=1 --nocapture cuda:: > "$OUT/conformance.log" 2>&1; rc=$?
  grep -E " ran, |test result|panicked" "$OUT/conformance.log" | head -10; echo "conformance rc=$rc"; [[ $rc == 0 ]] || status=1
fi
./target/release/deltarule diff --case tests/golden/shared/*.safetensors --backend cuda > "$OUT/diff.log" 2>&1; rc=$?
grep -E "comparisons" "$OUT/diff.log"; echo "diff cuda rc=$rc"; [[ $rc == 0 ]] || status=1
echo "== memcheck (subset)"
timeout ${SAN_TIMEOUT:-70} compute-sanitizer --tool memcheck --error-exitcode 9 .dev/bin/cuda_device --test-threads=1 sanitizer_subset > "$OUT/memcheck.log" 2>&1; rc=$?
grep -E "ERROR SUMMARY|test result" "$OUT/memcheck.log" | tail -2; echo "memcheck rc=$rc"
echo "== timings"
./target/release/deltarule bench --backend cuda --shape gdn-16/32-1x8192 gdn-16/32-16x1024 gdn-4/8-1x8192 kda-32/32-1x8192 --iters 20 2>/dev/null
./target/release/deltarule bench --backend wgpu --shape gdn-16/32-1x8192 kda-32/32-1x8192 gdn-16/32-16x1024 --iters 10 2>/dev/null
exit $status

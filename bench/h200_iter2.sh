#!/usr/bin/env bash
# bench/h200_iter2.sh: one short H200 call after a kernel change: the per-kernel CUDA device tests
# (golden, generated, properties) and the key prefill shapes on small-bh and chunked.
# Carry: target/release/deltarule, .dev/bin, .dev/cubin.
set -uo pipefail
source bench/h200_env.sh
B=./target/release/deltarule
timeout 200 .dev/bin/cuda_device --test-threads=1 --nocapture ${TESTS:-} > $OUT/dev.log 2>&1; echo "device tests rc=$?"
grep -E " ran, |test result|panicked|FAIL|max rel" $OUT/dev.log | head -30
$B diff --case tests/golden/shared/*.safetensors --backend cuda:small-bh cuda:chunked 2>&1 | grep -E "kda|comparisons" | awk '{print $1, $2, $4, $6, $NF}' | head -30
$B bench --backend cuda:small-bh cuda:chunked --shape ${SHAPES:-gdn-16/32-1x8192 gdn-4/8-1x8192 kda-32/32-1x8192 gdn-16/32-16x1024} --iters 20 2>/dev/null

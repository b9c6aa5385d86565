#!/usr/bin/env bash
# bench/h200_iter3.sh: one H200 call after merging kernel changes: CUDA device tests of every
# kernel, the golden diff on cuda and wgpu, timings of the key shapes on cuda (small-bh, chunked,
# decode) and wgpu (per pass). Carry: target/release/deltarule, .dev/bin, .dev/cubin, .gl.
set -uo pipefail
source bench/h200_env.sh
B=./target/release/deltarule
timeout 240 .dev/bin/cuda_device --test-threads=1 --nocapture > $OUT/dev.log 2>&1; echo "device tests rc=$?"
grep -E " ran, |test result|panicked|FAIL" $OUT/dev.log | head -30
for b in cuda cuda:small-bh cuda:chunked; do $B diff --case tests/golden/shared/*.safetensors --backend $b > $OUT/diff_$b.log 2>&1; echo "diff $b rc=$? $(grep comparisons $OUT/diff_$b.log)"; done
awk 'NR>1 && $3 ~ /cuda/ {print $1, $3, $5, $7}' $OUT/diff_cuda:small-bh.log | sort -k4 | tail -4
$B bench --backend cuda:small-bh cuda:chunked --shape gdn-16/32-1x8192 gdn-4/8-1x8192 kda-32/32-1x8192 gdn-16/32-16x1024 --iters 20 2>/dev/null
$B bench --backend cuda --shape gdn-decode-16/32-256x1 gdn-16/32-1x32768 gdn-16/32-256x64 kda-64/64-1x8192 --iters 20 2>/dev/null
$B diff --case tests/golden/shared/*.safetensors --backend wgpu > $OUT/diff_wgpu.log 2>&1; echo "diff wgpu rc=$? $(grep comparisons $OUT/diff_wgpu.log)"
$B bench --backend wgpu --shape gdn-16/32-1x8192 kda-32/32-1x8192 --iters 10 2>/dev/null

#!/usr/bin/env bash
# bench/h200_s5final.sh: session 5's closing H200 call: bench/h200_cuda.sh all (CUDA device tests,
# conformance through auto, golden diffs on cuda, cuda:chunked and cuda:small-bh, memcheck, the
# anchor shapes on every CUDA kernel next to flash-linear-attention 0.6.0 in the same call), then
# the golden errors of the diffs. (No WGSL change this session: the wgpu part of session 4's
# closing call is not repeated.) Carry: .dev/pack .whl
set -uo pipefail
source bench/h200_env.sh
echo "== cuda"
TEST_TIMEOUT=200 SAN_TIMEOUT=150 timeout 560 bash bench/h200_cuda.sh all; echo "h200_cuda.sh rc=$?"
echo "== golden errors (relative L2 against float64)"
grep -E "^###| expected " "$OUT/diff.log" | awk '{print $1, $2, $4, $6, $NF}' | head -60

#!/usr/bin/env bash
# bench/h200_s8final_a.sh: session 8's closing H200 call, part 1 (correctness of the tree as
# committed): the CUDA device tests, conformance through auto, golden diffs on cuda, cuda:chunked
# and cuda:small-bh, compute-sanitizer memcheck (bench/h200_cuda.sh test sanitize), the golden
# errors, and the WGSL golden diffs on wgpu (auto: coop where it applies) and wgpu:chunked.
# Part 2 (h200_s8final_b.sh) times. Carry: .dev/pack .gl
set -uo pipefail
source bench/h200_env.sh
echo "== cuda test"
TEST_TIMEOUT=150 timeout 300 bash bench/h200_cuda.sh test 2>&1 | tail -22
echo "== cuda sanitize"
SAN_TIMEOUT=150 timeout 170 bash bench/h200_cuda.sh sanitize 2>&1 | tail -3
echo "== golden errors (relative L2 against float64)"
grep -E "^###| expected " "$OUT/diff.log" | awk '{print $1, $2, $4, $6, $NF}' | head -40
echo "== wgpu golden diffs"
for b in wgpu wgpu:chunked; do timeout 60 .dev/bin/deltarule diff --case tests/golden/shared/*.safetensors --backend $b > "$OUT/wdiff_${b/:/_}.log" 2>&1; echo "diff $b rc=$? $(tail -1 "$OUT/wdiff_${b/:/_}.log")"; done
grep -E ' expected ' "$OUT/wdiff_wgpu.log" | awk '{print $1, $2, $4, $6, $NF}' | head -14
(cd "$OUT" && tar czf logs_a.tgz *.log 2>/dev/null; rm -f *.log)

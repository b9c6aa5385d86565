#!/usr/bin/env bash
# bench/h200_s9final_a.sh: session 9's closing H200 call, part 1 (correctness of the tree as
# committed): the CUDA device tests, conformance through auto and golden diffs on cuda,
# cuda:chunked and cuda:small-bh (bench/h200_cuda.sh test); the same tests with the T-form pass
# forced wherever it applies (DELTARULE_CUDA_STATE_BV=wgt: the small test problems otherwise take
# the 16-column mma.sync pass); compute-sanitizer memcheck with the T-form forced; the golden
# errors. Part 2 (h200_s9final_b.sh) times. Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
echo "== cuda test (auto)"
TEST_TIMEOUT=150 timeout 300 bash bench/h200_cuda.sh test 2>&1 | tail -22
echo "== T-form forced (BV=wgt)"
export DELTARULE_CUDA_STATE_BV=wgt
timeout 150 .dev/bin/cuda_device --test-threads=1 --nocapture > "$OUT/dev_wgt.log" 2>&1; echo "device tests rc=$?"
grep -E " ran, |panicked|FAIL" "$OUT/dev_wgt.log" | grep -v chunked | head -8
timeout 90 .dev/bin/conformance --test-threads=1 --nocapture cuda:: > "$OUT/conf_wgt.log" 2>&1; echo "conformance cuda:: rc=$?"
grep -E " ran, |panicked|FAIL" "$OUT/conf_wgt.log" | head -6
for b in cuda cuda:small-bh; do
  timeout 40 .dev/bin/deltarule diff --case tests/golden/shared/*.safetensors --backend $b > "$OUT/diff_wgt_${b/:/_}.log" 2>&1
  echo "diff $b rc=$? $(tail -1 "$OUT/diff_wgt_${b/:/_}.log")"
done
grep -E ' expected ' "$OUT/diff_wgt_cuda_small-bh.log" | awk '{print $1, $2, $4, $6, $NF}' | head -12
SAN_TIMEOUT=170 timeout 190 bash bench/h200_cuda.sh sanitize 2>&1 | tail -3
unset DELTARULE_CUDA_STATE_BV
echo "== golden errors through auto (relative L2 against float64)"
grep -E "^###| expected " "$OUT/diff.log" | awk '{print $1, $2, $4, $6, $NF}' | head -40
(cd "$OUT" && tar czf logs_a.tgz *.log 2>/dev/null; rm -f *.log)

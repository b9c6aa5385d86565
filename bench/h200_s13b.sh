#!/usr/bin/env bash
# bench/h200_s13b.sh: session 13, issue 4's correctness checks of the tree as committed (the CUDA
# kernels are session 11's: one barrier added after session 10's memcheck), in one call:
#   device tests (every kernel), conformance through auto, golden diffs on cuda, cuda:small-bh and
#   cuda:chunked (errors printed), every CUDA anchor through auto (ours only: the peers' numbers
#   of sessions 10-11 are on the same kernels), then compute-sanitizer memcheck on the sanitizer
#   subset with what is left of the call.
# Carry: .dev/pack (bin/deltarule, bin/conformance, bin/cuda_device and cubin/, one tree).
set -uo pipefail
source bench/h200_env.sh
source bench/h200_lib.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
echo "== correctness"
DEV_TIMEOUT=220 cuda_checks 0
grep -E "gva long|overlap errors" "$OUT/dev.log" | head -4
grep -E " expected " "$OUT/diff_cuda.log" | awk '{print $1, $2, $4, $6, $NF}'
echo "== anchors through auto (median GPU ms, host us)"
timeout 60 $B bench --backend cuda --shape gdn-16/32-1x8192 --iters 10 > /dev/null 2>&1
timeout 120 $B bench --backend cuda --shape anchors --iters 30 2>&1 | grep -E "^(gdn|kda)" | awk '{print "ours", $1, $4, $5}'
left=$((570 - SECONDS)); [[ $left -gt 240 ]] && left=240
echo "== memcheck (timeout ${left}s)"
timeout $left compute-sanitizer --tool memcheck --error-exitcode 9 .dev/bin/cuda_device --test-threads=1 sanitizer_subset > "$OUT/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1) $(grep -E 'test result' "$OUT/memcheck.log" | tail -1)"
(cd "$OUT" && tar czf logs_s13b.tgz *.log 2>/dev/null; rm -f *.log)

#!/usr/bin/env bash
# bench/h200_s20b.sh: session 20, second call. s20a's triangular products (default) plus:
#   the fused T-form's S tile in 32 x 32 quadrants (`FT_SQ`: the S update loads 2 A + 2 B
#   fragments a k step for 8 mma instead of 1 + 4; the same k order per element), and T_u, T_w
#   not built in their upper right quadrant (never read by the LOW products).
# PROBE bits: 1048576 the S tile in strips again; 1835008 = 262144 + 524288 + 1048576: session
# 19's kernels (every .text equal, local NVRTC cubins); 786432 (s20a's reference for small-bh);
# 8 (diagnosis: no T solve, results wrong) to place the solve's share of the time.
# Predicted: 256x64 0.814 -> ~0.805.
# Carry: .dev/pack (PROBES="1048576 1835008 786432 8 256" bash bench/pack_s15.sh)
set -uo pipefail
source bench/h200_env.sh
source bench/h200_lib.sh  # (probe_row, round_means, tlt_mean, tlf_mean)
B=.dev/bin/deltarule
G="tests/golden/shared/*.safetensors"
G128=tests/golden/shared/gdn_gva_varlen_state.safetensors
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
echo "== correctness at ${SECONDS}s"
timeout 40 $B diff --case $G --backend cuda > "$OUT/d_all.log" 2>&1
echo "default diff cuda rc=$? $(tail -1 "$OUT/d_all.log")"
timeout 40 $B diff --case $G --backend cuda:chunked > "$OUT/d_ch.log" 2>&1
echo "default diff cuda:chunked rc=$? $(tail -1 "$OUT/d_ch.log") $(grep -E ' expected ' "$OUT/d_ch.log" | awk '{printf "%s/%s ", $4, $6}')"
for pr in 0 1048576; do
  DELTARULE_CUDA_PROBE=$pr timeout 60 .dev/bin/cuda_device --test-threads=1 --nocapture chunked_long > "$OUT/dev_$pr.log" 2>&1
  echo "P$pr device chunked_long rc=$?"; grep -E "test result|panicked|sequences on" "$OUT/dev_$pr.log" | head -4
done
timeout 60 .dev/bin/conformance --test-threads=1 --nocapture cuda:: > "$OUT/conf.log" 2>&1
echo "conformance cuda:: rc=$?"; grep -E " ran, |test result" "$OUT/conf.log"
timeout 50 compute-sanitizer --tool memcheck --error-exitcode 9 .dev/bin/cuda_device --test-threads=1 chunked_long > "$OUT/mc1.log" 2>&1
echo "memcheck chunked_long rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/mc1.log" | tail -1)"
timeout 90 compute-sanitizer --tool racecheck --error-exitcode 9 $B diff --case $G128 --backend cuda:chunked > "$OUT/rc1.log" 2>&1
echo "racecheck diff gdn128 chunked rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/rc1.log" | tail -1)"
echo "== timings at ${SECONDS}s"
timeout 60 $B bench --backend cuda:chunked --shape gdn-16/32-256x64 --iters 5 > /dev/null 2>&1
for round in 1 2 3; do
  for pr in 0 1048576 1835008; do
    probe_row $round $pr cuda:chunked gdn-16/32-256x64
  done
  for pr in 0 786432; do
    probe_row $round $pr cuda gdn-16/32-16x1024
  done
done
for sh in 256x64 16x1024; do
  DELTARULE_CUDA_PROBE=8 timeout 60 $B bench --backend cuda --shape gdn-16/32-$sh --iters 30 2>&1 | grep -E "^gdn" | grep -v generating | sed "s/^/diag-noTsolve m8 /"
done
echo "== means"
round_means "$OUT/t.log"
echo "== timeline at ${SECONDS}s (PROBE 256, cycles a CTA, mean of the sampled CTAs)"
DELTARULE_CUDA_PROBE=256 timeout 40 $B bench --backend cuda:chunked --shape gdn-16/32-256x64 --iters 3 --warmup 1 > "$OUT/tl_256.log" 2>&1
tlt_mean "$OUT/tl_256.log" 256
tlf_mean "$OUT/tl_256.log" 256
echo "== done at ${SECONDS}s"
(cd "$OUT" && tar czf logs_s20b.tgz *.log 2>/dev/null; rm -f *.log)

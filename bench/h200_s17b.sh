#!/usr/bin/env bash
# bench/h200_s17b.sh: session 17, second call. (1) mma_tiles2: the products sharing their B
# operand load each B fragment once (intra A/P, the fused T-form's steps 1 and 2, the classic
# intra's W/U), against the split form in the same call (PROBE 131072 everywhere, 262144 only the
# fused T-form's step 1, which spills less); (2) the fused T-form's early first-tile loads without
# the next-tile prefetch (MODE_FT_PIPE 4096: 385 + 4096 = 4481); (3) the T-form state pass's
# initial-state L2 prefetch for a later CTA (MODE_STATE_H0PF 8192: 8577). Correctness of each,
# then alternating rounds at 256x64 (chunked) and 16x1024, 1x8192, kda 32/32 (auto).
# Predicted: mma_tiles2 -3 % on the shared-load-bound fused T-form (s17a: short_sb + mio 36 % of
# its stall samples), intra kernels -2 %; 4481 -2 % at 256x64; 8577 -3 % at 16x1024.
# Carry: .dev/pack (PROBES="131072 262144" bash bench/pack_s15.sh) .whl
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
G="tests/golden/shared/*.safetensors"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
echo "== correctness"
for v in 385:0 4481:0 4481:262144 385:262144 385:131072; do
  m=${v%%:*}; pr=${v##*:}
  DELTARULE_CUDA_PROBE=$pr DELTARULE_CUDA_MODE=$m timeout 60 $B diff --case $G --backend cuda:chunked > "$OUT/dc_$m$pr.log" 2>&1
  echo "$m p$pr diff cuda:chunked rc=$? $(tail -1 "$OUT/dc_$m$pr.log") $(grep -E ' expected ' "$OUT/dc_$m$pr.log" | grep gdn | awk '{printf "%s ", $4}')"
done
for m in 385 8577; do
  DELTARULE_CUDA_STATE_BV=wgt DELTARULE_CUDA_MODE=$m timeout 40 $B diff --case $G --backend cuda:small-bh > "$OUT/ds_$m.log" 2>&1
  echo "$m wgt diff cuda:small-bh rc=$? $(tail -1 "$OUT/ds_$m.log")"
done
timeout 40 $B diff --case $G --backend cuda > "$OUT/d_cuda.log" 2>&1
echo "385 diff cuda rc=$? $(tail -1 "$OUT/d_cuda.log")"
grep -E ' expected ' "$OUT/d_cuda.log" | awk '{print $1, $2, $4, $6, $NF}'
DELTARULE_CUDA_MODE=4481 timeout 90 .dev/bin/cuda_device --test-threads=1 --nocapture chunked_ > "$OUT/dev_q.log" 2>&1
echo "4481 device chunked_ rc=$?"; grep -E "test result|panicked" "$OUT/dev_q.log" | head -4
DELTARULE_CUDA_STATE_BV=wgt DELTARULE_CUDA_MODE=8577 timeout 120 .dev/bin/cuda_device --test-threads=1 --nocapture small_bh > "$OUT/dev_s.log" 2>&1
echo "8577 wgt device small_bh rc=$?"; grep -E "test result|panicked" "$OUT/dev_s.log" | head -4
timeout 60 .dev/bin/conformance --test-threads=1 cuda:: > "$OUT/conf.log" 2>&1
echo "385 conformance cuda:: rc=$? $(grep -E 'test result' "$OUT/conf.log" | tail -1)"
echo "== timings at ${SECONDS}s"
timeout 60 $B bench --backend cuda:chunked --shape gdn-16/32-256x64 --iters 5 > /dev/null 2>&1
for round in 1 2 3; do
  for v in 385:0 385:131072 385:262144 4481:0 4481:262144; do
    m=${v%%:*}; pr=${v##*:}
    DELTARULE_CUDA_PROBE=$pr DELTARULE_CUDA_MODE=$m timeout 60 $B bench --backend cuda:chunked --shape gdn-16/32-256x64 --iters 30 2>&1 | grep -E "^gdn" | grep -v generating | sed "s/^/r$round m$m p$pr /" | tee -a "$OUT/t.log"
  done
  for v in 385:0 385:131072 8577:0; do
    m=${v%%:*}; pr=${v##*:}
    DELTARULE_CUDA_PROBE=$pr DELTARULE_CUDA_MODE=$m timeout 60 $B bench --backend cuda --shape gdn-16/32-16x1024 gdn-16/32-1x8192 kda-32/32-1x8192 --iters 30 2>&1 | grep -E "^(gdn|kda)" | grep -v generating | sed "s/^/r$round m$m p$pr /" | tee -a "$OUT/t.log"
  done
done
echo "== means"
awk '{k=$2" "$3" "$4; s[k]+=$7; n[k]++} END {for (k in s) printf "%-40s %.4f (n=%d)\n", k, s[k]/n[k], n[k]}' "$OUT/t.log" | sort -k3,3 -k1,2
echo "== done at ${SECONDS}s"
(cd "$OUT" && tar czf logs_s17b.tgz *.log 2>/dev/null; rm -f *.log)

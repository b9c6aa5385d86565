#!/usr/bin/env bash
# bench/h200_s18b.sh: session 18, second call. The fused T-form's quadrant products (MODE_FT_QUAD,
# s18a: 256x64 0.8466 against 0.8620 ms) with the products reordered (PROBE 262144: phase 1
# warps 0-3 X = K·S0 | warps 4-7 U = T_u V; phase 2 warps 0-3 Q·S0 | warps 4-7 V_new = U - T_w X;
# phase 3 warps 0-3 o), so that no group idles through step 2's three products (s18a's timeline:
# step 2 4.5 K cycles a CTA with warps 4-7 idle). Correctness (golden diffs, the chunked device
# tests, memcheck of chunked_long), alternating rounds at 256x64 (chunked) against QUAD and the
# default, then PROBE 256 timelines. Predicted: 0.847 -> ~0.83.
# Carry: .dev/pack (PROBES="256 262144 262400" bash bench/pack_s15.sh)
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
G="tests/golden/shared/*.safetensors"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
echo "== correctness at ${SECONDS}s"
for v in 37249:262144 37249:0; do
  m=${v%%:*}; pr=${v##*:}
  DELTARULE_CUDA_PROBE=$pr DELTARULE_CUDA_MODE=$m timeout 40 $B diff --case $G --backend cuda:chunked > "$OUT/dc_$m$pr.log" 2>&1
  echo "$m p$pr diff cuda:chunked rc=$? $(tail -1 "$OUT/dc_$m$pr.log") $(grep -E ' expected ' "$OUT/dc_$m$pr.log" | grep gdn | awk '{printf "%s/%s ", $4, $6}')"
done
DELTARULE_CUDA_PROBE=262144 DELTARULE_CUDA_MODE=37249 timeout 60 .dev/bin/cuda_device --test-threads=1 --nocapture chunked_long > "$OUT/dev_q.log" 2>&1
echo "37249 p262144 device chunked_long rc=$?"; grep -E "test result|panicked|sequences on" "$OUT/dev_q.log" | head -4
DELTARULE_CUDA_PROBE=262144 DELTARULE_CUDA_MODE=37249 timeout 50 compute-sanitizer --tool memcheck --error-exitcode 9 .dev/bin/cuda_device --test-threads=1 chunked_long > "$OUT/mc1.log" 2>&1
echo "37249 p262144 memcheck chunked_long rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/mc1.log" | tail -1)"
echo "== timings at ${SECONDS}s"
timeout 60 $B bench --backend cuda:chunked --shape gdn-16/32-256x64 --iters 5 > /dev/null 2>&1
for round in 1 2 3; do
  for v in 4481:0 37249:0 37249:262144; do
    m=${v%%:*}; pr=${v##*:}
    DELTARULE_CUDA_PROBE=$pr DELTARULE_CUDA_MODE=$m timeout 40 $B bench --backend cuda:chunked --shape gdn-16/32-256x64 gdn-16/32-128x128 --iters 30 2>&1 | grep -E "^gdn" | grep -v generating | sed "s/^/r$round m$m:$pr /" | tee -a "$OUT/t.log"
  done
done
echo "== means"
awk '{k=$2" "$3; s[k]+=$6; n[k]++} END {for (k in s) printf "%-40s %.4f (n=%d)\n", k, s[k]/n[k], n[k]}' "$OUT/t.log" | sort -k2,2 -k1,1
echo "== timeline at ${SECONDS}s (PROBE 256, cycles a CTA, mean of the sampled CTAs)"
for v in 37249:256 37249:262400; do
  m=${v%%:*}; pr=${v##*:}
  DELTARULE_CUDA_PROBE=$pr DELTARULE_CUDA_MODE=$m timeout 40 $B bench --backend cuda:chunked --shape gdn-16/32-256x64 --iters 3 --warmup 1 > "$OUT/tl_$m$pr.log" 2>&1
  grep TLT "$OUT/tl_$m$pr.log" | awk -v m=$m:$pr '{for(i=1;i<=NF;i++){if($i=="intra")a+=$(i+1); if($i=="loads")b+=$(i+1); if($i=="step1")c+=$(i+1); if($i=="step2")d+=$(i+1); if($i=="step34")e+=$(i+1)}; n++} END {if(n) printf "m%s n=%d intra %.0f loads %.0f step1 %.0f step2 %.0f step34 %.0f\n", m, n, a/n, b/n, c/n, d/n, e/n}'
done
echo "== done at ${SECONDS}s"
(cd "$OUT" && tar czf logs_s18b.tgz *.log 2>/dev/null; rm -f *.log)

#!/usr/bin/env bash
# bench/h200_s18a.sh: session 18, first call. (1) The persistent T-form state pass
# (MODE_STATE_PERSIST 16384, `gdn_prefill_statewgtp`: one CTA an SM walking its items, the fetch
# warp loading the next item's first chunks while the warpgroup finishes the current one, the next
# item's h0 prefetched to L2 with the current item's last chunk): 4481 + 16384 = 20865 (and with
# STATE_REV, 21889); (2) the fused T-form's state products in 32 x 32 warp quadrants
# (MODE_FT_QUAD 32768, `gdn_prefill_fusedtr`): 4481 + 32768 = 37249. Correctness of each (golden
# diffs, device subsets, conformance with both bits, memcheck), then alternating rounds:
# 256x64 (chunked) default / QUAD; 16x1024 and 64x256 (auto) default / PERSIST / PERSIST+REV;
# then a PROBE 256 timeline of both fused forms.
# Predicted: PERSIST 16x1024 0.521 -> ~0.505 (the ~4 us a CTA outside its chunk chain, 7 of every
# 8 items); QUAD 256x64 0.86 -> ~0.82 (a third fewer shared-memory bytes in steps 1-3).
# Carry: .dev/pack (PROBES="256" bash bench/pack_s15.sh) .whl
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
G="tests/golden/shared/*.safetensors"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
echo "== correctness at ${SECONDS}s"
for m in 4481 37249; do
  DELTARULE_CUDA_MODE=$m timeout 40 $B diff --case $G --backend cuda:chunked > "$OUT/dc_$m.log" 2>&1
  echo "$m diff cuda:chunked rc=$? $(tail -1 "$OUT/dc_$m.log") $(grep -E ' expected ' "$OUT/dc_$m.log" | grep gdn | awk '{printf "%s/%s ", $4, $6}')"
done
for m in 4481 20865; do
  DELTARULE_CUDA_STATE_BV=wgt DELTARULE_CUDA_MODE=$m timeout 40 $B diff --case $G --backend cuda:small-bh > "$OUT/ds_$m.log" 2>&1
  echo "$m wgt diff cuda:small-bh rc=$? $(tail -1 "$OUT/ds_$m.log") $(grep -E ' expected ' "$OUT/ds_$m.log" | grep gdn | awk '{printf "%s/%s ", $4, $6}')"
done
DELTARULE_CUDA_MODE=53633 timeout 40 $B diff --case $G --backend cuda > "$OUT/d_all.log" 2>&1
echo "53633 diff cuda rc=$? $(tail -1 "$OUT/d_all.log")"
echo "== timings at ${SECONDS}s"
timeout 60 $B bench --backend cuda:chunked --shape gdn-16/32-256x64 --iters 5 > /dev/null 2>&1
for round in 1 2 3; do
  for m in 4481 37249; do
    DELTARULE_CUDA_MODE=$m timeout 40 $B bench --backend cuda:chunked --shape gdn-16/32-256x64 --iters 30 2>&1 | grep -E "^gdn" | grep -v generating | sed "s/^/r$round m$m /" | tee -a "$OUT/t.log"
  done
  for m in 4481 20865 21889; do
    DELTARULE_CUDA_MODE=$m timeout 60 $B bench --backend cuda --shape gdn-16/32-16x1024 gdn-16/32-64x256 --iters 30 2>&1 | grep -E "^gdn" | grep -v generating | sed "s/^/r$round m$m /" | tee -a "$OUT/t.log"
  done
done
echo "== means"
awk '{k=$2" "$3; s[k]+=$6; n[k]++} END {for (k in s) printf "%-40s %.4f (n=%d)\n", k, s[k]/n[k], n[k]}' "$OUT/t.log" | sort -k2,2 -k1,1
echo "== device tests at ${SECONDS}s"
DELTARULE_CUDA_MODE=37249 timeout 60 .dev/bin/cuda_device --test-threads=1 --nocapture chunked_ > "$OUT/dev_q.log" 2>&1
echo "37249 device chunked_ rc=$?"; grep -E "test result|panicked|sequences on" "$OUT/dev_q.log" | head -4
timeout 120 .dev/bin/cuda_device --test-threads=1 --nocapture small_bh_many > "$OUT/dev_m.log" 2>&1
echo "device small_bh_many (default, child with persistence) rc=$?"; grep -E "test result|panicked|many items on" "$OUT/dev_m.log" | head -6
DELTARULE_CUDA_MODE=53633 timeout 60 .dev/bin/conformance --test-threads=1 cuda:: > "$OUT/conf.log" 2>&1
echo "53633 conformance cuda:: rc=$? $(grep -E 'test result' "$OUT/conf.log" | tail -1)"
DELTARULE_CUDA_MODE=37249 timeout 40 compute-sanitizer --tool memcheck --error-exitcode 9 .dev/bin/cuda_device --test-threads=1 chunked_long > "$OUT/mc1.log" 2>&1
echo "37249 memcheck chunked_long rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/mc1.log" | tail -1)"
DELTARULE_CUDA_MODE=20865 timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 .dev/bin/cuda_device --test-threads=1 small_bh_many > "$OUT/mc2.log" 2>&1
echo "20865 memcheck small_bh_many rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/mc2.log" | tail -1)"
echo "== timeline at ${SECONDS}s (PROBE 256, cycles a CTA, mean of the sampled CTAs)"
for m in 4481 37249; do
  DELTARULE_CUDA_PROBE=256 DELTARULE_CUDA_MODE=$m timeout 40 $B bench --backend cuda:chunked --shape gdn-16/32-256x64 --iters 3 --warmup 1 > "$OUT/tl_$m.log" 2>&1
  grep TLT "$OUT/tl_$m.log" | awk -v m=$m '{for(i=1;i<=NF;i++){if($i=="intra")a+=$(i+1); if($i=="loads")b+=$(i+1); if($i=="step1")c+=$(i+1); if($i=="step2")d+=$(i+1); if($i=="step34")e+=$(i+1)}; n++} END {if(n) printf "m%s n=%d intra %.0f loads %.0f step1 %.0f step2 %.0f step34 %.0f\n", m, n, a/n, b/n, c/n, d/n, e/n}'
done
echo "== done at ${SECONDS}s"
(cd "$OUT" && tar czf logs_s18a.tgz *.log 2>/dev/null; rm -f *.log)

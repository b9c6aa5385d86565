#!/usr/bin/env bash
# bench/h200_s19b.sh: session 19, second call. FEWB (PROBE bit 4194304, the fused T-form's quadrant
# schedule with fewer barriers): -X goes to its own swizzled tile right after warps 0-3's product
# (no barrier of its own), warps 4-7 store V_new and FK ⊙ V_new under warps 0-3's Q·S0 (a named
# barrier of their own); four full barriers a V tile instead of six. Its build spills 96 bytes
# (the early V words among them), so also with the V rows loaded and converted at the tile's top
# (+ 65536: 4 bytes), and 65536 alone for reference. Predicted 256x64 0.837 -> ~0.81.
# Correctness of each (gdn golden diff through cuda:chunked, chunked_long), memcheck and racecheck
# of FEWB, alternating rounds, the PROBE 256 timeline of FEWB (the default's is s19a's).
# (The means and the timeline summary were inline awk in the call that ran; they are the
# functions of bench/h200_lib.sh now, with the same output on its saved logs.)
# Carry: .dev/pack (PROBES="4194304 4259840 65536 4194560" bash bench/pack_s15.sh)
set -uo pipefail
source bench/h200_env.sh
source bench/h200_lib.sh  # (round_means, tlt_mean)
B=.dev/bin/deltarule
G128=tests/golden/shared/gdn_gva_varlen_state.safetensors
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
echo "== correctness at ${SECONDS}s"
for pr in 4194304 4259840 65536; do
  DELTARULE_CUDA_PROBE=$pr timeout 40 $B diff --case $G128 --backend cuda:chunked > "$OUT/dc_$pr.log" 2>&1
  echo "P$pr diff gdn128 cuda:chunked rc=$? $(tail -1 "$OUT/dc_$pr.log") $(grep -E ' expected ' "$OUT/dc_$pr.log" | awk '{printf "%s/%s ", $4, $6}')"
  DELTARULE_CUDA_PROBE=$pr timeout 60 .dev/bin/cuda_device --test-threads=1 --nocapture chunked_long > "$OUT/dev_$pr.log" 2>&1
  echo "P$pr device chunked_long rc=$?"; grep -E "test result|panicked|sequences on" "$OUT/dev_$pr.log" | head -4
done
for pr in 4194304 4259840; do
  DELTARULE_CUDA_PROBE=$pr timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 .dev/bin/cuda_device --test-threads=1 chunked_long > "$OUT/mc_$pr.log" 2>&1
  echo "P$pr memcheck chunked_long rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/mc_$pr.log" | tail -1)"
  DELTARULE_CUDA_PROBE=$pr timeout 90 compute-sanitizer --tool racecheck --error-exitcode 9 $B diff --case $G128 --backend cuda:chunked > "$OUT/rc_$pr.log" 2>&1
  echo "P$pr racecheck diff gdn128 rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/rc_$pr.log" | tail -1)"
done
echo "== timings at ${SECONDS}s"
timeout 60 $B bench --backend cuda:chunked --shape gdn-16/32-256x64 --iters 5 > /dev/null 2>&1
for round in 1 2 3; do
  for pr in 0 4194304 4259840 65536; do
    DELTARULE_CUDA_PROBE=$pr timeout 40 $B bench --backend cuda:chunked --shape gdn-16/32-256x64 --iters 30 2>&1 | grep -E "^gdn" | grep -v generating | sed "s/^/r$round m$pr /" | tee -a "$OUT/t.log"
  done
done
echo "== means"
round_means "$OUT/t.log"
echo "== timeline at ${SECONDS}s (PROBE 256, cycles a CTA, mean of the sampled CTAs)"
for pr in 4194560; do
  DELTARULE_CUDA_PROBE=$pr timeout 40 $B bench --backend cuda:chunked --shape gdn-16/32-256x64 --iters 3 --warmup 1 > "$OUT/tl_$pr.log" 2>&1
  tlt_mean "$OUT/tl_$pr.log" $pr
done
echo "== done at ${SECONDS}s"
(cd "$OUT" && tar czf logs_s19b.tgz *.log 2>/dev/null; rm -f *.log)

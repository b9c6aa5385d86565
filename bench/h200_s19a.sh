#!/usr/bin/env bash
# bench/h200_s19a.sh: session 19, first call. Two diagnosis builds of the fused T-form (default
# bits 37249, `gdn_prefill_fusedtr`), as PROBE bits of the gdn K = V = 128 module:
#   524288 BAL: warps 4-7 run the whole S update (S tile loaded again from L2 after V_new's
#          product, FK ⊙ V_new in its own swizzled tile), so both groups run 160 mma a V tile
#          (QUAD: 192 on warps 0-3, 128 on warps 4-7). Predicted 256x64 0.839 -> ~0.80.
#   1048576 CSF: warp 0 runs Γ's scan in registers before the intra stage's first barrier (every
#          gdn intra stage: the fused T-form and small-bh's intrat). Predicted -0.5 to -1 %.
#   1572864 both.
# Correctness of each (gdn golden diffs through cuda:chunked, the chunked device tests, small-bh
# tests for CSF, memcheck and racecheck of BAL), alternating rounds, then PROBE 256 timelines.
# (The means and the timeline summary were inline awk in the call that ran; they are the
# functions of bench/h200_lib.sh now, with the same output on its saved logs.)
# Carry: .dev/pack (PROBES="524288 1048576 1572864 256 524544" bash bench/pack_s15.sh)
set -uo pipefail
source bench/h200_env.sh
source bench/h200_lib.sh  # (round_means, tlt_mean)
B=.dev/bin/deltarule
G="tests/golden/shared/*.safetensors"
G128=tests/golden/shared/gdn_gva_varlen_state.safetensors
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
echo "== correctness at ${SECONDS}s"
timeout 40 $B diff --case $G --backend cuda > "$OUT/d_all.log" 2>&1
echo "default diff cuda rc=$? $(tail -1 "$OUT/d_all.log")"
for pr in 0 524288 1048576 1572864; do
  DELTARULE_CUDA_PROBE=$pr timeout 40 $B diff --case $G128 --backend cuda:chunked > "$OUT/dc_$pr.log" 2>&1
  echo "P$pr diff gdn128 cuda:chunked rc=$? $(tail -1 "$OUT/dc_$pr.log") $(grep -E ' expected ' "$OUT/dc_$pr.log" | awk '{printf "%s/%s ", $4, $6}')"
  DELTARULE_CUDA_PROBE=$pr timeout 60 .dev/bin/cuda_device --test-threads=1 --nocapture chunked_long > "$OUT/dev_$pr.log" 2>&1
  echo "P$pr device chunked_long rc=$?"; grep -E "test result|panicked|sequences on" "$OUT/dev_$pr.log" | head -4
done
DELTARULE_CUDA_PROBE=1048576 timeout 90 .dev/bin/cuda_device --test-threads=1 --nocapture small_bh_gva > "$OUT/dev_s.log" 2>&1
echo "P1048576 device small_bh_gva rc=$?"; grep -E "test result|panicked|sequences on" "$OUT/dev_s.log" | head -4
DELTARULE_CUDA_PROBE=1572864 timeout 50 compute-sanitizer --tool memcheck --error-exitcode 9 .dev/bin/cuda_device --test-threads=1 chunked_long > "$OUT/mc1.log" 2>&1
echo "P1572864 memcheck chunked_long rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/mc1.log" | tail -1)"
DELTARULE_CUDA_PROBE=1572864 timeout 90 compute-sanitizer --tool racecheck --error-exitcode 9 $B diff --case $G128 --backend cuda:chunked > "$OUT/rc1.log" 2>&1
echo "P1572864 racecheck diff gdn128 rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/rc1.log" | tail -1)"
echo "== timings at ${SECONDS}s"
timeout 60 $B bench --backend cuda:chunked --shape gdn-16/32-256x64 --iters 5 > /dev/null 2>&1
for round in 1 2 3; do
  for pr in 0 524288 1048576 1572864; do
    DELTARULE_CUDA_PROBE=$pr timeout 40 $B bench --backend cuda:chunked --shape gdn-16/32-256x64 --iters 30 2>&1 | grep -E "^gdn" | grep -v generating | sed "s/^/r$round m$pr /" | tee -a "$OUT/t.log"
  done
  for pr in 0 1048576; do
    DELTARULE_CUDA_PROBE=$pr timeout 60 $B bench --backend cuda --shape gdn-16/32-16x1024 --iters 30 2>&1 | grep -E "^gdn" | grep -v generating | sed "s/^/r$round m$pr /" | tee -a "$OUT/t.log"
  done
done
echo "== means"
round_means "$OUT/t.log"
echo "== timeline at ${SECONDS}s (PROBE 256, cycles a CTA, mean of the sampled CTAs)"
for pr in 256 524544; do
  DELTARULE_CUDA_PROBE=$pr timeout 40 $B bench --backend cuda:chunked --shape gdn-16/32-256x64 --iters 3 --warmup 1 > "$OUT/tl_$pr.log" 2>&1
  tlt_mean "$OUT/tl_$pr.log" $pr
done
echo "== done at ${SECONDS}s"
(cd "$OUT" && tar czf logs_s19a.tgz *.log 2>/dev/null; rm -f *.log)

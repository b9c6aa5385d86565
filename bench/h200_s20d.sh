#!/usr/bin/env bash
# bench/h200_s20d.sh: session 20, third call. T's diagonal 32 x 32 blocks by forward
# substitution (warps 0-1, lane = column; default now) instead of 16 x 16 blocks and a doubling
# level for the 16-row pairs (two dependent products and barriers fewer; every intra stage, gdn
# and kda). s20b: the whole solve left out (PROBE 8) took 256x64 0.810 -> 0.747, 16x1024 0.523 ->
# 0.457. PROBE bits: 2097152 s20b's default; 3932160 = 2097152 + 1835008, session 19's kernels.
# Predicted: 256x64 0.810 -> ~0.79, 16x1024 0.523 -> ~0.51.
# Carry: .dev/pack (PROBES="2097152 3932160 256" bash bench/pack_s15.sh)
set -uo pipefail
source bench/h200_env.sh
source bench/h200_lib.sh  # (probe_row, round_means, tlt_mean, tlf_mean)
B=.dev/bin/deltarule
G="tests/golden/shared/*.safetensors"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
echo "== correctness at ${SECONDS}s"
for b in cuda cuda:chunked cuda:small-bh; do
  timeout 40 $B diff --case $G --backend $b > "$OUT/d_${b/:/_}.log" 2>&1
  echo "diff $b rc=$? $(tail -1 "$OUT/d_${b/:/_}.log")"
  grep -E ' expected ' "$OUT/d_${b/:/_}.log" | awk '{printf "%s %s/%s ", $1, $4, $6}'; echo
done
timeout 60 .dev/bin/cuda_device --test-threads=1 --nocapture chunked_long > "$OUT/dev_c.log" 2>&1
echo "device chunked_long rc=$?"; grep -E "test result|panicked|sequences on" "$OUT/dev_c.log" | head -4
timeout 90 .dev/bin/cuda_device --test-threads=1 --nocapture small_bh_gva > "$OUT/dev_s.log" 2>&1
echo "device small_bh_gva rc=$?"; grep -E "test result|panicked|sequences on" "$OUT/dev_s.log" | head -4
echo "== timings at ${SECONDS}s"
timeout 60 $B bench --backend cuda:chunked --shape gdn-16/32-256x64 --iters 5 > /dev/null 2>&1
for round in 1 2 3; do
  for pr in 0 2097152 3932160; do
    probe_row $round $pr cuda:chunked gdn-16/32-256x64
    probe_row $round $pr cuda gdn-16/32-16x1024
  done
done
for pr in 0 2097152; do
  probe_row 1 $pr cuda gdn-16/32-1x8192
done
echo "== means"
round_means "$OUT/t.log"
echo "== timeline at ${SECONDS}s (PROBE 256, cycles a CTA, mean of the sampled CTAs)"
DELTARULE_CUDA_PROBE=256 timeout 40 $B bench --backend cuda:chunked --shape gdn-16/32-256x64 --iters 3 --warmup 1 > "$OUT/tl_256.log" 2>&1
tlt_mean "$OUT/tl_256.log" 256
tlf_mean "$OUT/tl_256.log" 256
echo "== done at ${SECONDS}s"
(cd "$OUT" && tar czf logs_s20d.tgz *.log 2>/dev/null; rm -f *.log)

#!/usr/bin/env bash
# bench/h200_s20e.sh: session 20, last call (diagnosis for the next session; the default kernels
# are the closing call's, every .text unchanged). Two PROBE bits of the gdn K = V = 128 module:
#   4194304 mma_f32x3 (the T merges' f32-class products) with its two small products in a second
#           accumulator: two dependent mma a call instead of three (not bit-identical: the terms
#           are summed in another order)
#   8388608 the doubling left out, the diagonal blocks kept (results wrong): with s20b's PROBE 8
#           (both left out) it splits the T solve's share between the two.
# Correctness of 4194304 (golden diffs through cuda:chunked and cuda:small-bh, the chunked device
# test), then three alternating rounds.
# Carry: .dev/pack (PROBES="4194304 8388608" bash bench/pack_s15.sh)
set -uo pipefail
source bench/h200_env.sh
source bench/h200_lib.sh  # (probe_row, round_means)
B=.dev/bin/deltarule
G="tests/golden/shared/*.safetensors"
echo "== correctness at ${SECONDS}s"
for b in cuda:chunked cuda:small-bh; do
  DELTARULE_CUDA_PROBE=4194304 timeout 40 $B diff --case $G --backend $b > "$OUT/d_${b/:/_}.log" 2>&1
  echo "P4194304 diff $b rc=$? $(tail -1 "$OUT/d_${b/:/_}.log") $(grep -E ' expected ' "$OUT/d_${b/:/_}.log" | grep gdn | awk '{printf "%s/%s ", $4, $6}')"
done
DELTARULE_CUDA_PROBE=4194304 timeout 60 .dev/bin/cuda_device --test-threads=1 --nocapture chunked_long > "$OUT/dev_c.log" 2>&1
echo "P4194304 device chunked_long rc=$?"; grep -E "test result|panicked|sequences on" "$OUT/dev_c.log" | head -4
echo "== timings at ${SECONDS}s"
timeout 60 $B bench --backend cuda:chunked --shape gdn-16/32-256x64 --iters 5 > /dev/null 2>&1
for round in 1 2 3; do
  for pr in 0 4194304 8388608; do
    probe_row $round $pr cuda:chunked gdn-16/32-256x64
    probe_row $round $pr cuda gdn-16/32-16x1024
  done
done
echo "== means"
round_means "$OUT/t.log"
echo "== done at ${SECONDS}s"
(cd "$OUT" && tar czf logs_s20e.tgz *.log 2>/dev/null; rm -f *.log)

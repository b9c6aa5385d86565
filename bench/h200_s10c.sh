#!/usr/bin/env bash
# bench/h200_s10c.sh: session 10, the overlapped pair's timeline (DELTARULE_CUDA_OVERLAP_TRACE=1:
# start/end of every intra and state CTA, read back after the call) at several freeing points,
# the small-bh suite with the T-form forced (the leave-ticket fix for small grids), timings.
# Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
P1="--op gdn --tokens 8192 --seqs 1 --heads 16 --v-heads 32"
DELTARULE_CUDA_STATE_BV=wgt timeout 100 $B diff $P1 --backend cuda > "$OUT/d1.log" 2>&1
echo "P1 rc=$? $(grep -E ' o |final_state' "$OUT/d1.log" | tr -s ' ' | cut -c1-200 | tr '\n' '|')"
echo "== small-bh suite with the T-form forced (overlapped)"
timeout 150 .dev/bin/cuda_device --test-threads=1 --nocapture small_bh_conformance_with_each_wgmma_state_pass > "$OUT/t.log" 2>&1; echo "rc=$?"
grep -E "STATE_BV|test result|panicked|: cuda device error" "$OUT/t.log" | head -12
echo "== traces (last call of each)"
for v in auto 30 60 100; do
  for s in gdn-16/32-1x8192 gdn-16/32-1x32768; do
    DELTARULE_CUDA_OVERLAP_TRACE=1 DELTARULE_CUDA_OVERLAP=$v timeout 60 $B bench --backend cuda --shape $s --iters 3 2>&1 | grep "overlap trace" | tail -1 | sed "s|^|$v $s |"
  done
done
echo "== timings"
G="gdn-16/32-1x8192 gdn-16/32-1x32768"
for v in auto off 60; do
  DELTARULE_CUDA_OVERLAP=$v timeout 90 $B bench --backend cuda --shape $G --iters 30 2>&1 | grep -E "^gdn" | awk -v v=$v '{print v, $1, $4, $5}'
done

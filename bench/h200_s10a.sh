#!/usr/bin/env bash
# bench/h200_s10a.sh: session 10, the overlapped T-form pair (persistent intra kernel + the state
# pass by programmatic dependent launch, prefill.cuh "the overlapped T-form pair"):
#   1. correctness: generated gdn problems against float64 with the overlap on (auto) and off,
#      then the small-bh suite with the T-form forced (overlapped there: few state CTAs);
#   2. timings: gdn 16/32 anchors with DELTARULE_CUDA_OVERLAP auto / off / 30 / 45 / 60.
# Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
echo "== diffs (generated, float64 reference)"
P1="--op gdn --tokens 8192 --seqs 1 --heads 16 --v-heads 32"
P2="--op gdn --tokens 8192 --seqs 1 --heads 16 --v-heads 32 --l2norm --initial-state dense --checkpoint-every 1024 --seed 3"
P3="--op gdn --tokens 5000 --seqs 3 --heads 4 --v-heads 8 --head-dim 64 --out-dtype bf16 --seed 5"
for ov in auto off; do
  i=0
  for P in "$P1" "$P2" "$P3"; do
    i=$((i+1))
    DELTARULE_CUDA_STATE_BV=wgt DELTARULE_CUDA_OVERLAP=$ov timeout 100 $B diff $P --backend cuda > "$OUT/d_${ov}_$i.log" 2>&1
    echo "ov=$ov P$i rc=$? $(grep -E 'o |state|ckpt|check' "$OUT/d_${ov}_$i.log" | tr -s ' ' | head -4 | tr '\n' '|')"
  done
done
echo "== small-bh suite with the T-form forced (overlapped)"
timeout 150 .dev/bin/cuda_device --test-threads=1 --nocapture small_bh_conformance_with_each_wgmma_state_pass > "$OUT/t.log" 2>&1; echo "rc=$?"
grep -E "STATE_BV|test result|panicked" "$OUT/t.log" | head -12
echo "== timings"
G="gdn-16/32-1x8192 gdn-16/32-1x32768"
timeout 60 $B bench --backend cuda --shape gdn-16/32-1x8192 --iters 10 > /dev/null 2>&1
for v in auto off 30 45 60; do
  DELTARULE_CUDA_OVERLAP=$v timeout 90 $B bench --backend cuda --shape $G --iters 30 2>&1 | grep -E "^gdn" | awk -v v=$v '{print v, $1, $4, $5}'
done
DELTARULE_CUDA_OVERLAP=auto timeout 90 $B bench --backend cuda --shape gdn-16/32-16x1024 gdn-16/32-256x64 --iters 30 2>&1 | grep -E "^gdn" | awk '{print "auto", $1, $4, $5}'

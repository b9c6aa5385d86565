#!/usr/bin/env bash
# bench/h200_s10e.sh: session 10, the T-form intra kernels prefetch a later item's q, k rows into
# L2 (DELTARULE_CUDA_PREFETCH=0 turns it off): correctness (the small-bh suite with the T-form
# forced, a generated 16x1024 problem through auto), then the four gdn 16/32 anchors with the
# prefetch on and off, twice, alternating. Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
timeout 100 .dev/bin/cuda_device --test-threads=1 --nocapture small_bh_conformance_with_each_wgmma_state_pass > "$OUT/t.log" 2>&1; echo "suite rc=$?"
grep -E "STATE_BV=wgt" "$OUT/t.log" | head -3
timeout 100 $B diff --op gdn --tokens 16384 --seqs 16 --heads 16 --v-heads 32 --seed 7 --backend cuda > "$OUT/d.log" 2>&1
echo "diff 16 seqs rc=$? $(grep -E 'small-bh +(o|final_state) ' "$OUT/d.log" | awk '{print $4, $6, $NF}' | tr '\n' ' ')"
G="gdn-16/32-1x8192 gdn-16/32-1x32768 gdn-16/32-16x1024 gdn-16/32-256x64"
timeout 60 $B bench --backend cuda --shape gdn-16/32-1x8192 --iters 10 > /dev/null 2>&1
for r in 1 2; do
  for v in 1 0; do
    DELTARULE_CUDA_PREFETCH=$v timeout 90 $B bench --backend cuda --shape $G --iters 30 2>&1 | grep -E "^gdn" | awk -v v=$v '{print "pf=" v, $1, $4, $5}'
  done
done

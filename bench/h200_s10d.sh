#!/usr/bin/env bash
# bench/h200_s10d.sh: session 10, after the warp fix (lanes 1-31 of the fetch warp held lane 0 in
# griddepcontrol.wait): correctness (generated 1x8192 problems, the small-bh suite with the T-form
# forced), the timeline at several freeing points, timings. Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
P1="--op gdn --tokens 8192 --seqs 1 --heads 16 --v-heads 32"
P2="--op gdn --tokens 8192 --seqs 1 --heads 16 --v-heads 32 --l2norm --initial-state dense --checkpoint-every 1024 --seed 3"
i=0
for P in "$P1" "$P2"; do
  i=$((i+1))
  timeout 100 $B diff $P --backend cuda > "$OUT/d$i.log" 2>&1
  echo "P$i rc=$? $(grep -E ' (o|final_state|checkpoints) f64' "$OUT/d$i.log" | awk '{print $5, $7}' | tr '\n' ' ')"
done
timeout 150 .dev/bin/cuda_device --test-threads=1 --nocapture small_bh_conformance_with_each_wgmma_state_pass > "$OUT/t.log" 2>&1; echo "suite rc=$?"
grep -E "STATE_BV=wgt|test result" "$OUT/t.log" | head -4
echo "== traces"
for v in auto 50 65; do
  for s in gdn-16/32-1x8192 gdn-16/32-1x32768; do
    DELTARULE_CUDA_OVERLAP_TRACE=1 DELTARULE_CUDA_OVERLAP=$v timeout 60 $B bench --backend cuda --shape $s --iters 3 2>&1 | grep "overlap trace" | tail -1 | sed "s|^|$v $s |"
  done
done
echo "== timings"
G="gdn-16/32-1x8192 gdn-16/32-1x32768"
for v in auto off 50 65; do
  DELTARULE_CUDA_OVERLAP=$v timeout 90 $B bench --backend cuda --shape $G --iters 30 2>&1 | grep -E "^gdn" | awk -v v=$v '{print v, $1, $4, $5}'
done

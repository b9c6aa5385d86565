#!/usr/bin/env bash
# bench/h200_s11a.sh: session 11, call 1: the T-form state pass in runs of items (a CTA takes
# `run` consecutive (V tile, head, sequence) items; the fetch warp runs on into the next item's
# stages and prefetches its initial state to L2). Correctness first (device tests through auto,
# the overlapped pair's new device test among them; the small-bh suite with the T-form forced in
# runs of 3; generated varlen problems against float64 with run auto / 1 / 3), then timings of
# the runs at gdn 16/32 256x64 and 16x1024, and auto at 1x8192 / 1x32768. Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
source bench/h200_lib.sh
B=.dev/bin/deltarule
echo "== a first small varlen problem, T-form forced (fail fast)"
DELTARULE_CUDA_STATE_BV=wgt timeout 40 $B diff --op gdn --seqlens 0,64,700,1,0,129,3000 --heads 4 --v-heads 8 --initial-state dense --backend cuda > "$OUT/first.log" 2>&1; rc=$?
echo "rc=$rc $(grep -E 'small-bh (o|final_state) ' "$OUT/first.log" | awk '{print $4, $6, $NF}' | tr '\n' ' ')"
if [[ $rc == 124 ]]; then (cd "$OUT" && tar czf logs_a.tgz *.log; rm -f *.log); exit 1; fi
echo "== cuda checks (auto; no memcheck)"
cuda_checks 0
grep -E "overlapped_pair_through_auto" "$OUT/dev.log" | head -3
echo "== small-bh suite, each wgmma pass forced, T-form runs of 3"
DELTARULE_CUDA_STATE_RUN=3 timeout 150 .dev/bin/cuda_device --test-threads=1 --nocapture small_bh_conformance_with_each_wgmma_state_pass > "$OUT/t.log" 2>&1; echo "rc=$?"
grep -E "STATE_BV|test result" "$OUT/t.log" | head -8
echo "== generated problems (relative L2 against float64: o, final state[, checkpoints])"
P1="--op gdn --tokens 16384 --seqs 256 --heads 16 --v-heads 32 --l2norm --initial-state dense --seed 5"
P2="--op gdn --seqlens 0,64,700,1,0,129,3000,63,65,0,2,4096,17,128,1000 --heads 4 --v-heads 8 --initial-state dense --checkpoint-every 128 --seed 6"
for run in auto 1 3; do
  i=0
  for P in "$P1" "$P2"; do
    i=$((i+1))
    if [[ $run == auto ]]; then E=""; else E="DELTARULE_CUDA_STATE_RUN=$run"; fi
    env $E DELTARULE_CUDA_STATE_BV=wgt timeout 60 $B diff $P --backend cuda > "$OUT/g_${run}_$i.log" 2>&1
    echo "run=$run P$i rc=$? $(grep -E 'small-bh (o|final_state|checkpoints) ' "$OUT/g_${run}_$i.log" | awk '{print $4, $6, $NF}' | tr '\n' ' ')"
  done
done
echo "== timings (ms: median GPU, host)"
for run in auto 1 4 16; do
  if [[ $run == auto ]]; then E=""; else E="DELTARULE_CUDA_STATE_RUN=$run"; fi
  env $E timeout 90 $B bench --backend cuda --shape gdn-16/32-256x64 gdn-16/32-16x1024 --iters 30 2>&1 | grep -E "^gdn" | awk -v v=$run '{print "run", v, $1, $4, $5}'
done
timeout 90 $B bench --backend cuda --shape gdn-16/32-1x8192 gdn-16/32-1x32768 gdn-4/8-1x8192 --iters 30 2>&1 | grep -E "^gdn" | awk '{print "auto", $1, $4, $5}'
echo "== ncu split at 256x64 (run auto, run 1)"
for run in auto 1; do
  if [[ $run == auto ]]; then E=""; else E="DELTARULE_CUDA_STATE_RUN=$run"; fi
  env $E timeout 60 ncu --clock-control none --metrics gpu__time_duration.sum -k "regex:prefill_(intra|state)" -c 2 $B bench --backend cuda:small-bh --shape gdn-16/32-256x64 --warmup 0 --iters 1 --rotate-mib 1 > "$OUT/ncu_$run.log" 2>&1
  echo "run $run rc=$? $(grep -E "prefill_|gpu__time_duration" "$OUT/ncu_$run.log" | sed 's/  */ /g' | awk '/prefill_/{k=$1} /duration/{printf "%s %s us  ", k, $NF}')"
done
(cd "$OUT" && tar czf logs_a.tgz *.log 2>/dev/null; rm -f *.log)

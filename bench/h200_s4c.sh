#!/usr/bin/env bash
# bench/h200_s4c.sh (session 4, calls 3-4): v7 (call 3: transposed 4-byte o stores; call 4: state and output warps): small-bh correctness
# (device tests at each tile width), timings per tile width, ncu of the state kernel. Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
for bv in 16 32 64; do
  DELTARULE_CUDA_STATE_BV=$bv timeout 100 .dev/bin/cuda_device --test-threads=1 --nocapture small_bh > "$OUT/dev_bv$bv.log" 2>&1; echo "small_bh BV=$bv rc=$?"
  grep -E " ran, |panicked|FAIL" "$OUT/dev_bv$bv.log" | head -4
done
for b in cuda:small-bh; do timeout 60 $B diff --case tests/golden/shared/*.safetensors --backend $b > "$OUT/diff_${b/:/_}.log" 2>&1; echo "diff $b rc=$? $(tail -1 "$OUT/diff_${b/:/_}.log")"; done
for bv in 16 32 64; do
  echo "-- BV=$bv"
  DELTARULE_CUDA_STATE_BV=$bv timeout 90 $B bench --backend cuda:small-bh --shape gdn-16/32-1x8192 gdn-4/8-1x8192 kda-32/32-1x8192 gdn-16/32-1x32768 --iters 30 2>&1 | grep -v '^\s*$' | grep -v generating | tail -5
done
M='regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,sm__cycles_elapsed.avg,gpu__time_duration.sum'
timeout 120 ncu --clock-control none -k "regex:prefill_state" -c 1 --metrics "$M" $B bench --backend cuda:small-bh --shape gdn-16/32-1x8192 --warmup 0 --iters 1 --rotate-mib 1 > "$OUT/ncu.txt" 2>&1
awk '/prefill_(intra|state)/{print} /stalled/{ if ($NF+0 > 0.1) print } /inst_executed.sum|cycles_elapsed|duration/{print}' "$OUT/ncu.txt" | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | head -30

#!/usr/bin/env bash
# bench/h200_s8b.sh (session 8): where the coop gdn intra stage's step 4 goes wrong: golden diffs
# on wgpu:coop with the W and U tile products as cooperative matrices (PROBE 0) or as scalar f32
# sums over the same f16 operands (PROBE 32: W, 64: U, 96: both), and the stage times of each.
# Carry: .dev/pack .gl
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
for p in 0 32 64 96; do
  DELTARULE_WGPU_PROBE=$p timeout 60 $B diff --case tests/golden/shared/*.safetensors --backend wgpu:coop > "$OUT/diff_$p.log" 2>&1
  echo "PROBE=$p diff rc=$? $(tail -1 "$OUT/diff_$p.log")"
  grep -E 'gdn_.* o ' "$OUT/diff_$p.log" | awk '{print "   ", $1, $2, $3, $NF}' | head -4
  DELTARULE_WGPU_PROBE=$p timeout 60 $B bench --backend wgpu:coop --shape gdn-16/32-1x8192 --iters 10 2>&1 | grep stages
done

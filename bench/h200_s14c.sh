#!/usr/bin/env bash
# bench/h200_s14c.sh: session 14, third WGSL call: where the intra step 4's W/U time goes and
# whether the state pass waits on its A-operand loads (timing probes, wrong results by design),
# and the B-operand layout of step 4 (DELTARULE_WGPU_INTRA_BT=1: staged transposed, loaded
# column-major) against the row-major default, alternating rounds; kda's Γ loads without clamps
# and the second q tile's loads moved ahead (no switch: compare with s14b, kda 3.080-3.083 ms).
# From s14b: skipping the W and U stores (probe 1024, so the products too) took kda's intra
# 2.13 -> 1.80 ms; 2048 puts the stores into workgroup memory instead (racing, as a probe), 4096
# skips W's only, 8192 U's only. 16384 skips the state pass's steady-state W and qdec tile loads,
# 32768 its late kdecᵀ and P loads.
# Carry: .dev/pack (bench/pack_s14.sh: bin/deltarule, bin/conformance) .gl
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
S="gdn-16/32-1x8192 kda-32/32-1x8192"
echo "== correctness"
for bt in 0 1; do
  DELTARULE_WGPU_INTRA_BT=$bt timeout 60 $B diff --case tests/golden/shared/*.safetensors --backend wgpu:coop > "$OUT/diff_bt$bt.log" 2>&1
  echo "diff wgpu:coop BT=$bt rc=$? $(tail -1 "$OUT/diff_bt$bt.log")"
done
grep -E ' o .* expected ' "$OUT/diff_bt0.log" | awk '{print $1, $2, $4, $6, $NF}'
echo "== timings at ${SECONDS}s"
timeout 40 $B bench --backend wgpu:coop --shape kda-32/32-1x8192 --iters 10 > /dev/null 2>&1
for round in 1 2; do
  for bt in 0 1; do
    DELTARULE_WGPU_INTRA_BT=$bt timeout 90 $B bench --backend wgpu:coop --shape $S --iters 30 --json 2>/dev/null | python3 bench/wgpu_spread.py "r$round bt=$bt"
  done
done
echo "-- per pass (each timed alone)"
for bt in 0 1; do
  DELTARULE_WGPU_INTRA_BT=$bt timeout 60 $B bench --backend wgpu:coop --shape $S --iters 20 2>&1 | grep stages | sed "s/^/bt=$bt /"
done
echo "-- probes"
for pr in 1024 2048 4096 8192 16384 32768 49152; do
  DELTARULE_WGPU_PROBE=$pr timeout 40 $B bench --backend wgpu:coop --shape $S --iters 20 2>&1 | grep stages | sed "s/^/probe $pr /"
done
(cd "$OUT" && tar czf logs_s14c.tgz *.log 2>/dev/null; rm -f *.log)

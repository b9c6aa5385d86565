#!/usr/bin/env bash
# bench/h200_s13z.sh: session 13, a short last call (under 5 minutes of device time were left):
# the fused coop state pass with a chunk's kdecᵀ and P tiles loaded after its W·S products
# (DELTARULE_WGPU_STATE_LATE=1: fewer A tiles live at once) against one chunk ahead (0, the
# default), alternating rounds, then each pass alone; the golden diffs of the late form first;
# then the kda intra probes (committed in session 13, not yet run on the H200).
# Prediction: if the 28 live A tiles (~112 registers) made the pass spill, LATE=1 gains
# (state 0.97 -> ~0.85-0.9 ms); if the loads' latency is exposed instead, it loses.
# NOT RUN in session 13: device loans were paused after five calls (250 s left). Build the pack
# with `bash bench/pack_s13z.sh` (checked in session 13: ~2 minutes, 2.4 MB with .gl). The change is
# bench/patches/s13z-state-late.patch (checked here: the SPIR-V build test with LATE_B = 1, and
# kda's coop golden cases through the emulation on lavapipe with DELTARULE_WGPU_STATE_LATE=1,
# o 2.9e-4 to 3.0e-4 as with 0); pack_s13z.sh applies it in a worktree. Run this, then commit
# the change with the numbers or drop it.
# Carry: .dev/pack (bin/deltarule of the patched tree) .gl
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
S="gdn-16/32-1x8192 kda-32/32-1x8192"
DELTARULE_WGPU_STATE_LATE=1 timeout 60 $B diff --case tests/golden/shared/*.safetensors --backend wgpu:coop > "$OUT/diff_late.log" 2>&1
echo "diff wgpu:coop LATE=1 rc=$? $(tail -1 "$OUT/diff_late.log")"
grep -E ' o .* expected ' "$OUT/diff_late.log" | awk '{print $1, $4, $6, $NF}'
timeout 40 $B bench --backend wgpu:coop --shape gdn-16/32-1x8192 --iters 10 > /dev/null 2>&1
for round in 1 2; do
  for late in 0 1; do
    DELTARULE_WGPU_STATE_LATE=$late timeout 60 $B bench --backend wgpu:coop --shape $S --iters 30 --json 2>/dev/null | python3 bench/wgpu_spread.py "r$round late=$late"
  done
done
for late in 0 1; do
  DELTARULE_WGPU_STATE_LATE=$late timeout 60 $B bench --backend wgpu:coop --shape $S --iters 20 2>&1 | grep stages | sed "s/^/late=$late /"
done
echo "-- kda coop intra with parts skipped (DELTARULE_WGPU_PROBE, wrong results by design; 4: the T"
echo "   solve, 8: step 4, 16: step 2's products), to place kda's 2.2 ms against gdn's 1.06"
for pr in 4 8 16; do
  DELTARULE_WGPU_PROBE=$pr timeout 40 $B bench --backend wgpu:coop --shape kda-32/32-1x8192 --iters 20 2>&1 | grep stages | sed "s/^/probe $pr /"
done
(cd "$OUT" && tar czf logs_s13z.tgz *.log 2>/dev/null; rm -f *.log)

#!/usr/bin/env bash
# bench/h200_s14b.sh: session 14, second WGSL call: kda's coop intra stage with step 4 on
# cooperative matrices (kda_intra_coop.wgsl, DELTARULE_WGPU_KDA_MMA4=1, the default where the
# adapter has 47,888 bytes of workgroup memory) against its f32 step 4 (=0), alternating rounds;
# correctness first (this stage runs nowhere else: lavapipe has 32 KiB); then step 4's stores
# skipped by probes (256 kdec, 512 qdec, 1024 W and U) on gdn and kda, to place step 4's time
# (s14a: gdn's v6 step 4 measured 0.59 ms against 0.63 for the old form: the barriers were not
# its cost).
# Predicted: kda intra 2.19 -> ~2.0 ms (step 4 0.82 -> ~0.6-0.65, gdn's coop step 4 is 0.59),
# kda call 3.15 -> ~2.95-3.0 ms; kda o error 3.0e-4 -> <= ~5e-4.
# Carry: .dev/pack (bench/pack_s14.sh: bin/deltarule, bin/conformance) .gl
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
S="gdn-16/32-1x8192 kda-32/32-1x8192"
echo "== correctness"
timeout 60 $B diff --case tests/golden/shared/*.safetensors --backend wgpu:coop > "$OUT/diff_coop.log" 2>&1
echo "diff wgpu:coop rc=$? $(tail -1 "$OUT/diff_coop.log")"
grep -E ' expected ' "$OUT/diff_coop.log" | awk '{print $1, $2, $4, $6, $NF}'
DELTARULE_WGPU_KDA_MMA4=0 timeout 60 $B diff --case tests/golden/shared/kda*.safetensors --backend wgpu:coop > "$OUT/diff_mma0.log" 2>&1
echo "diff wgpu:coop KDA_MMA4=0 rc=$? $(tail -1 "$OUT/diff_mma0.log")"
DELTARULE_REQUIRE_WGPU=1 timeout 150 .dev/bin/conformance --test-threads=1 --nocapture wgpu > "$OUT/conf_wgpu.log" 2>&1
echo "conformance wgpu, wgpu_coop rc=$?"; grep -E " ran, |FAIL|panicked" "$OUT/conf_wgpu.log" | head -20
echo "== timings at ${SECONDS}s"
timeout 40 $B bench --backend wgpu:coop --shape kda-32/32-1x8192 --iters 10 > /dev/null 2>&1
for round in 1 2; do
  for m in 0 1; do
    DELTARULE_WGPU_KDA_MMA4=$m timeout 90 $B bench --backend wgpu:coop --shape $S --iters 30 --json 2>/dev/null | python3 bench/wgpu_spread.py "r$round mma4=$m"
  done
done
echo "-- per pass (each timed alone)"
for m in 0 1; do
  DELTARULE_WGPU_KDA_MMA4=$m timeout 60 $B bench --backend wgpu:coop --shape $S --iters 20 2>&1 | grep stages | sed "s/^/mma4=$m /"
done
echo "-- step 4 probes (wrong results by design)"
for pr in 8 256 512 1024 1792; do
  DELTARULE_WGPU_PROBE=$pr timeout 40 $B bench --backend wgpu:coop --shape $S --iters 20 2>&1 | grep stages | sed "s/^/probe $pr /"
done
(cd "$OUT" && tar czf logs_s14b.tgz *.log 2>/dev/null; rm -f *.log)

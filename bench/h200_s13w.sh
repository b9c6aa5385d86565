#!/usr/bin/env bash
# bench/h200_s13w.sh: session 13, issue 3 on the H200 (NVIDIA Vulkan), one call: the coop state
# pass with the output pass folded in (prefill_state_coop.wgsl v4, FUSE_O, default) against v3
# and its separate output pass (DELTARULE_WGPU_FUSE_O=0), fla 0.6.0 in the same call.
#   1. correctness: golden diffs on wgpu and wgpu:coop (both forms), both wgpu conformance suites;
#   2. timings, alternating rounds, gdn 16/32 and kda 32/32 at 1x8192, then each pass alone;
#   3. where the coop intra stage's time goes now: the probe masks of DELTARULE_WGPU_PROBE
#      (results wrong by design; 2: P stores, 4: the T solve, 8: step 4) on gdn, stage times;
#   4. fla on the same two shapes.
# Predicted (bench/NOTES.md, session 13): state pass 0.809 -> ~0.85-0.9 ms with o in it, the
# output pass (0.376) gone: gdn 2.31 -> ~1.95-2.0 ms, kda 3.34 -> ~2.95-3.05 ms.
# Carry: .dev/pack (bin/deltarule, bin/conformance of this tree) .gl .whl
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
S="gdn-16/32-1x8192 kda-32/32-1x8192"
echo "== correctness"
for b in wgpu wgpu:coop; do
  timeout 60 $B diff --case tests/golden/shared/*.safetensors --backend $b > "$OUT/diff_${b/:/_}.log" 2>&1
  echo "diff $b rc=$? $(tail -1 "$OUT/diff_${b/:/_}.log")"
done
DELTARULE_WGPU_FUSE_O=0 timeout 60 $B diff --case tests/golden/shared/*.safetensors --backend wgpu:coop > "$OUT/diff_coop_unfused.log" 2>&1
echo "diff wgpu:coop FUSE_O=0 rc=$? $(tail -1 "$OUT/diff_coop_unfused.log")"
grep -E ' o .* expected ' "$OUT/diff_wgpu_coop.log" | awk '{print "fused  ", $1, $4, $6, $NF}'
grep -E ' o .* expected ' "$OUT/diff_coop_unfused.log" | awk '{print "unfused", $1, $4, $6, $NF}'
DELTARULE_REQUIRE_WGPU=1 timeout 150 .dev/bin/conformance --test-threads=1 --nocapture wgpu > "$OUT/conf_wgpu.log" 2>&1
echo "conformance wgpu, wgpu_coop rc=$?"; grep -E " ran, " "$OUT/conf_wgpu.log"
echo "== timings (a throwaway run, then alternating rounds; fused = default)"
timeout 40 $B bench --backend wgpu:coop --shape gdn-16/32-1x8192 --iters 10 > /dev/null 2>&1
for round in 1 2; do
  DELTARULE_WGPU_FUSE_O=0 timeout 90 $B bench --backend wgpu:coop --shape $S --iters 30 --json 2>/dev/null | python3 bench/wgpu_spread.py "r$round unfused"
  timeout 90 $B bench --backend wgpu:coop --shape $S --iters 30 --json 2>/dev/null | python3 bench/wgpu_spread.py "r$round fused  "
done
echo "-- per pass (each timed alone)"
DELTARULE_WGPU_FUSE_O=0 timeout 60 $B bench --backend wgpu:coop --shape $S --iters 20 2>&1 | grep stages | sed 's/^/unfused /'
timeout 60 $B bench --backend wgpu:coop --shape $S --iters 20 2>&1 | grep stages | sed 's/^/fused   /'
echo "-- coop intra with parts skipped (DELTARULE_WGPU_PROBE; wrong results by design)"
for pr in 2 4 8; do
  DELTARULE_WGPU_PROBE=$pr timeout 40 $B bench --backend wgpu:coop --shape gdn-16/32-1x8192 --iters 20 2>&1 | grep stages | sed "s/^/probe $pr /"
done
echo "== fla 0.6.0, same call"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/fla_core-0.6.0-py3-none-any.whl && export PYTHONPATH=/tmp/site
PYTHONUNBUFFERED=1 timeout 200 python3 bench/fla_bench.py --shapes $S 2> "$OUT/fla.err"
tail -2 "$OUT/fla.err"
(cd "$OUT" && tar czf logs_s13w.tgz *.log *.err 2>/dev/null; rm -f *.log *.err)

#!/usr/bin/env bash
# bench/h200_s14a.sh: session 14, first WGSL call after s13z: gdn's coop intra step 4 v6
# (gdn_intra_coop.wgsl: 64-column tiles, f16 W accumulators stored straight into ws16, kdec
# staged in s_at and stored in whole rows, qdec without staging: 9 barriers where there were 20)
# against the tree before it (.dev/bin/deltarule_prev: s13z's binary, the late loads asked for
# by DELTARULE_WGPU_STATE_LATE=1, which the new tree does by default), alternating rounds;
# correctness on the H200 first (the new gdn coop intra stage cannot run on lavapipe: 48,144
# bytes of workgroup memory); kda's step-4 probe again (s13z's run fell into the low-clock
# state); fla 0.6.0 last, same call.
# Predicted: gdn intra 1.06 -> ~0.8-0.9 ms (step 4 was 0.63 of it), gdn call 2.01 -> ~1.8-1.85;
# kda unchanged (3.14). gdn o error 3.6e-4 -> up to ~6e-4 (W accumulated in f16).
# Carry: .dev/pack (bin/deltarule, bin/conformance, bin/deltarule_prev; bench/pack_s14.sh) .gl .whl
set -uo pipefail
source bench/h200_env.sh
export DELTARULE_WGPU_STATE_LATE=1
B=.dev/bin/deltarule
P=.dev/bin/deltarule_prev
S="gdn-16/32-1x8192 kda-32/32-1x8192"
echo "== correctness (this tree)"
for b in wgpu wgpu:coop; do
  timeout 60 $B diff --case tests/golden/shared/*.safetensors --backend $b > "$OUT/diff_${b/:/_}.log" 2>&1
  echo "diff $b rc=$? $(tail -1 "$OUT/diff_${b/:/_}.log")"
done
grep -E ' expected ' "$OUT/diff_wgpu_coop.log" | awk '{print $1, $2, $4, $6, $NF}'
DELTARULE_REQUIRE_WGPU=1 timeout 150 .dev/bin/conformance --test-threads=1 --nocapture wgpu > "$OUT/conf_wgpu.log" 2>&1
echo "conformance wgpu, wgpu_coop rc=$?"; grep -E " ran, |FAIL|panicked" "$OUT/conf_wgpu.log" | head -20
echo "== timings at ${SECONDS}s"
timeout 40 $P bench --backend wgpu:coop --shape gdn-16/32-1x8192 --iters 10 > /dev/null 2>&1
timeout 40 $B bench --backend wgpu:coop --shape gdn-16/32-1x8192 --iters 10 > /dev/null 2>&1
for round in 1 2; do
  timeout 90 $P bench --backend wgpu:coop --shape $S --iters 30 --json 2>/dev/null | python3 bench/wgpu_spread.py "r$round prev"
  timeout 90 $B bench --backend wgpu:coop --shape $S --iters 30 --json 2>/dev/null | python3 bench/wgpu_spread.py "r$round new "
done
echo "-- per pass (each timed alone)"
timeout 60 $P bench --backend wgpu:coop --shape $S --iters 20 2>&1 | grep stages | sed "s/^/prev /"
timeout 60 $B bench --backend wgpu:coop --shape $S --iters 20 2>&1 | grep stages | sed "s/^/new  /"
for pr in 8 4; do
  DELTARULE_WGPU_PROBE=$pr timeout 40 $B bench --backend wgpu:coop --shape $S --iters 20 2>&1 | grep stages | sed "s/^/probe $pr /"
done
echo "== fla 0.6.0, same call, at ${SECONDS}s"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/fla_core-0.6.0-py3-none-any.whl && export PYTHONPATH=/tmp/site
PYTHONUNBUFFERED=1 timeout 150 python3 bench/fla_bench.py --shapes $S 2> "$OUT/fla.err"
tail -2 "$OUT/fla.err"
echo "== ours again after fla (one round) at ${SECONDS}s"
timeout 90 $B bench --backend wgpu:coop --shape $S --iters 30 --json 2>/dev/null | python3 bench/wgpu_spread.py "r3 new "
(cd "$OUT" && tar czf logs_s14a.tgz *.log *.err 2>/dev/null; rm -f *.log *.err)

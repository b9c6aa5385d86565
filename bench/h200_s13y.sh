#!/usr/bin/env bash
# bench/h200_s13y.sh: session 13, last WGSL call: the coop kernel's A operands stored row-major
# (W, kdecᵀ, qdec, P; read with coopLoadT by the state pass and the coop output pass) against
# 9189eab (the fused state pass over the transposed layout, .dev/bin/deltarule_prev), in
# alternating rounds; correctness of both coop forms on the H200 first; fla 0.6.0 last.
# Predicted (bench/NOTES.md, session 13): the W tiles alone took the fused state pass from 1.021
# to 0.945 ms (timing probe, call s13x); all 28 A tiles row-major: ~0.80-0.85 ms, so gdn 16/32
# 2.16 -> ~1.95-2.0 ms, kda 32/32 3.19 -> ~2.95-3.0 ms (target 3.05).
# Carry: .dev/pack (bin/deltarule, bin/conformance of this tree, bin/deltarule_prev) .gl .whl
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
P=.dev/bin/deltarule_prev
S="gdn-16/32-1x8192 kda-32/32-1x8192"
echo "== correctness (this tree)"
for b in wgpu wgpu:coop; do
  timeout 60 $B diff --case tests/golden/shared/*.safetensors --backend $b > "$OUT/diff_${b/:/_}.log" 2>&1
  echo "diff $b rc=$? $(tail -1 "$OUT/diff_${b/:/_}.log")"
done
DELTARULE_WGPU_FUSE_O=0 timeout 60 $B diff --case tests/golden/shared/*.safetensors --backend wgpu:coop > "$OUT/diff_unfused.log" 2>&1
echo "diff wgpu:coop FUSE_O=0 rc=$? $(tail -1 "$OUT/diff_unfused.log")"
grep -E ' expected ' "$OUT/diff_wgpu_coop.log" | awk '{print $1, $4, $6, $NF}'
DELTARULE_REQUIRE_WGPU=1 timeout 150 .dev/bin/conformance --test-threads=1 --nocapture wgpu > "$OUT/conf_wgpu.log" 2>&1
echo "conformance wgpu, wgpu_coop rc=$?"; grep -E " ran, " "$OUT/conf_wgpu.log"
echo "== timings (a throwaway run each, then alternating rounds) at ${SECONDS}s"
timeout 40 $P bench --backend wgpu:coop --shape gdn-16/32-1x8192 --iters 10 > /dev/null 2>&1
timeout 40 $B bench --backend wgpu:coop --shape gdn-16/32-1x8192 --iters 10 > /dev/null 2>&1
for round in 1 2; do
  timeout 90 $P bench --backend wgpu:coop --shape $S --iters 30 --json 2>/dev/null | python3 bench/wgpu_spread.py "r$round prev"
  timeout 90 $B bench --backend wgpu:coop --shape $S --iters 30 --json 2>/dev/null | python3 bench/wgpu_spread.py "r$round new "
done
echo "-- per pass (each timed alone)"
timeout 60 $P bench --backend wgpu:coop --shape $S --iters 20 2>&1 | grep stages | sed "s/^/prev /"
timeout 60 $B bench --backend wgpu:coop --shape $S --iters 20 2>&1 | grep stages | sed "s/^/new  /"
DELTARULE_WGPU_FUSE_O=0 timeout 60 $B bench --backend wgpu:coop --shape $S --iters 20 2>&1 | grep stages | sed "s/^/new, FUSE_O=0 /"
echo "== fla 0.6.0, same call, at ${SECONDS}s"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/fla_core-0.6.0-py3-none-any.whl && export PYTHONPATH=/tmp/site
PYTHONUNBUFFERED=1 timeout 150 python3 bench/fla_bench.py --shapes $S 2> "$OUT/fla.err"
tail -2 "$OUT/fla.err"
echo "== our whole calls again after fla (one round)"
timeout 90 $B bench --backend wgpu:coop --shape $S --iters 30 --json 2>/dev/null | python3 bench/wgpu_spread.py "r3 new "
(cd "$OUT" && tar czf logs_s13y.tgz *.log *.err 2>/dev/null; rm -f *.log *.err)

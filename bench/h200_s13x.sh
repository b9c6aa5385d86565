#!/usr/bin/env bash
# bench/h200_s13x.sh: session 13, second WGSL call: the fused coop state pass with o leaving one
# chunk late (no added barrier; s13w's form added two a chunk: state 0.815 -> 1.060 ms with the
# 0.379 ms output pass gone), against FUSE_O=0, and a timing probe: the state pass's W tiles
# loaded row-major (DELTARULE_WGPU_PROBE=128, wrong results) to see what the column-major
# storage loads of its A operands cost. fla 0.6.0 in the same call.
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
grep -E ' expected ' "$OUT/diff_wgpu_coop.log" | awk '{print $1, $4, $6, $NF}'
DELTARULE_REQUIRE_WGPU=1 timeout 150 .dev/bin/conformance --test-threads=1 --nocapture wgpu > "$OUT/conf_wgpu.log" 2>&1
echo "conformance wgpu, wgpu_coop rc=$?"; grep -E " ran, " "$OUT/conf_wgpu.log"
echo "== timings (a throwaway run, then alternating rounds; fused = default)"
timeout 40 $B bench --backend wgpu:coop --shape gdn-16/32-1x8192 --iters 10 > /dev/null 2>&1
for round in 1 2; do
  DELTARULE_WGPU_FUSE_O=0 timeout 90 $B bench --backend wgpu:coop --shape $S --iters 30 --json 2>/dev/null | python3 bench/wgpu_spread.py "r$round unfused"
  timeout 90 $B bench --backend wgpu:coop --shape $S --iters 30 --json 2>/dev/null | python3 bench/wgpu_spread.py "r$round fused  "
done
echo "-- per pass (each timed alone)"
for round in 1 2; do
  DELTARULE_WGPU_FUSE_O=0 timeout 60 $B bench --backend wgpu:coop --shape $S --iters 20 2>&1 | grep stages | sed "s/^/r$round unfused /"
  timeout 60 $B bench --backend wgpu:coop --shape $S --iters 20 2>&1 | grep stages | sed "s/^/r$round fused   /"
  DELTARULE_WGPU_PROBE=128 timeout 60 $B bench --backend wgpu:coop --shape $S --iters 20 2>&1 | grep stages | sed "s/^/r$round W row-major (wrong) /"
done
echo "== fla 0.6.0, same call"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/fla_core-0.6.0-py3-none-any.whl && export PYTHONPATH=/tmp/site
PYTHONUNBUFFERED=1 timeout 200 python3 bench/fla_bench.py --shapes $S 2> "$OUT/fla.err"
tail -2 "$OUT/fla.err"
(cd "$OUT" && tar czf logs_s13x.tgz *.log *.err 2>/dev/null; rm -f *.log *.err)

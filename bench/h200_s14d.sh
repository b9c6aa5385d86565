#!/usr/bin/env bash
# bench/h200_s14d.sh: session 14, last call: the coop kernel's f16 A operands stored as 16 x 16
# tiles one after another (common.wgsl's TILED, the default; DELTARULE_WGPU_TILED=0 keeps plain
# row-major) against row-major, alternating rounds; correctness first (coop golden diffs in both
# forms, the wgpu_coop conformance suite); fla 0.6.0 in the same call for the issue-3 table.
# Why (s14c probes): skipping the state pass's steady-state W and qdec tile loads took it from
# 0.956 to 0.737 ms, the late kdecᵀ and P loads 0.956 -> 0.756: its matrix loads from storage
# are its cost. A row-major 16 x 16 tile of W spans 16 rows 256 bytes apart (8-16 cache lines a
# warp load); a contiguous tile is 512 bytes (4 lines).
# Predicted: state 0.955 -> ~0.75-0.85 ms (gdn and kda), gdn call 2.01 -> ~1.85-1.9, kda 3.08
# -> ~2.9-2.95 ms; errors unchanged (same values, other addresses).
# Carry: .dev/pack (bench/pack_s14.sh: bin/deltarule, bin/conformance) .gl .whl
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
S="gdn-16/32-1x8192 kda-32/32-1x8192"
echo "== correctness"
for t in 1 0; do
  DELTARULE_WGPU_TILED=$t timeout 60 $B diff --case tests/golden/shared/*.safetensors --backend wgpu:coop > "$OUT/diff_t$t.log" 2>&1
  echo "diff wgpu:coop TILED=$t rc=$? $(tail -1 "$OUT/diff_t$t.log")"
done
grep -E ' expected ' "$OUT/diff_t1.log" | awk '{print $1, $2, $4, $6, $NF}'
DELTARULE_REQUIRE_WGPU=1 timeout 100 .dev/bin/conformance --test-threads=1 --nocapture wgpu_coop > "$OUT/conf_coop.log" 2>&1
echo "conformance wgpu_coop rc=$?"; grep -E " ran, |FAIL|panicked" "$OUT/conf_coop.log" | head -10
echo "== timings at ${SECONDS}s"
timeout 40 $B bench --backend wgpu:coop --shape kda-32/32-1x8192 --iters 10 > /dev/null 2>&1
for round in 1 2; do
  for t in 0 1; do
    DELTARULE_WGPU_TILED=$t timeout 60 $B bench --backend wgpu:coop --shape $S --iters 30 --json 2>/dev/null | python3 bench/wgpu_spread.py "r$round tiled=$t"
  done
done
for t in 0 1; do
  DELTARULE_WGPU_TILED=$t timeout 40 $B bench --backend wgpu:coop --shape $S --iters 20 2>&1 | grep stages | sed "s/^/tiled=$t /"
done
echo "== fla 0.6.0, same call, at ${SECONDS}s"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/fla_core-0.6.0-py3-none-any.whl && export PYTHONPATH=/tmp/site
PYTHONUNBUFFERED=1 timeout 160 python3 bench/fla_bench.py --shapes $S 2> "$OUT/fla.err"
tail -2 "$OUT/fla.err"
echo "== ours after fla at ${SECONDS}s"
timeout 40 $B bench --backend wgpu:coop --shape $S --iters 30 --json 2>/dev/null | python3 bench/wgpu_spread.py "r3 tiled=1"
timeout 40 $B bench --backend wgpu:coop --shape $S --iters 30 2>&1 | grep -v -E 'generating|stages' | head -4
(cd "$OUT" && tar czf logs_s14d.tgz *.log *.err 2>/dev/null; rm -f *.log *.err)

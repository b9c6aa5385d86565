#!/usr/bin/env bash
# bench/h200_s9w.sh: session 9, the WGSL tree as committed (session 8's word loads in every intra
# stage's step 4, f96fb04, never run on the H200 before): golden diffs on wgpu (auto: coop where it
# applies) and wgpu:coop, issue 3's two shapes on wgpu:coop after a throwaway run (median and
# spread, per-pass split), and fla 0.6.0 on the same shapes in the same call.
# Carry: .dev/pack .gl .whl
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
S="gdn-16/32-1x8192 kda-32/32-1x8192"
for b in wgpu wgpu:coop; do
  timeout 60 $B diff --case tests/golden/shared/*.safetensors --backend $b > "$OUT/diff_${b/:/_}.log" 2>&1
  echo "diff $b rc=$? $(tail -1 "$OUT/diff_${b/:/_}.log")"
done
grep -E ' expected ' "$OUT/diff_wgpu_coop.log" | awk '{print $1, $2, $4, $6, $NF}' | head -12
timeout 40 $B bench --backend wgpu:coop --shape gdn-16/32-1x8192 --iters 10 > /dev/null 2>&1
timeout 90 $B bench --backend wgpu:coop --shape $S --iters 30 --json 2>/dev/null | python3 bench/wgpu_spread.py s9w
timeout 60 $B bench --backend wgpu:coop --shape $S --iters 20 2>&1 | grep stages
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/fla_core-0.6.0-py3-none-any.whl && export PYTHONPATH=/tmp/site
PYTHONUNBUFFERED=1 timeout 200 python3 bench/fla_bench.py --shapes $S 2> "$OUT/fla.err"
tail -3 "$OUT/fla.err"
(cd "$OUT" && tar czf logs_s9w.tgz *.log *.err 2>/dev/null; rm -f *.log *.err)

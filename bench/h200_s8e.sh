#!/usr/bin/env bash
# bench/h200_s8e.sh (session 8; NOT RUN: the device time ran out before it): the tree as committed after s8d (word loads in the coop
# gdn intra stage kept, the output pass's prefetch reverted: 0.379 -> 0.422 ms with it): golden
# diffs on wgpu, the gdn WGSL shapes on wgpu:coop (after a throwaway run) and fla 0.6.0 on the
# same shapes in the same call. Carry: .dev/pack .gl .whl
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
S="gdn-16/32-1x8192 gdn-16/32-16x1024"
timeout 40 $B diff --case tests/golden/shared/*.safetensors --backend wgpu > "$OUT/diff.log" 2>&1; echo "diff wgpu rc=$? $(tail -1 "$OUT/diff.log")"
timeout 40 $B bench --backend wgpu:coop --shape gdn-16/32-1x8192 --iters 10 > /dev/null 2>&1
timeout 60 $B bench --backend wgpu:coop --shape $S --iters 30 --json 2>/dev/null | python3 bench/wgpu_spread.py s8e
timeout 40 $B bench --backend wgpu:coop --shape gdn-16/32-1x8192 --iters 20 2>&1 | grep stages
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/fla_core-0.6.0-py3-none-any.whl && export PYTHONPATH=/tmp/site
PYTHONUNBUFFERED=1 timeout 70 python3 bench/fla_bench.py --shapes $S 2> "$OUT/fla.err"

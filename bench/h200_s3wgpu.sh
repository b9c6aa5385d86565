#!/usr/bin/env bash
# bench/h200_s3wgpu.sh: session 3's closing WGSL call: the coop kernel v2 and the f32 chunked
# kernel on the WGSL target shapes (whole call with spread, passes timed alone), the CUDA auto
# rows of the same shapes, and flash-linear-attention 0.6.0 on them in the same call.
# Carry: .dev/pack .whl .gl
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
S="gdn-16/32-1x8192 kda-32/32-1x8192 gdn-16/32-16x1024"
timeout 200 $B bench --backend wgpu:coop wgpu:chunked --shape $S --iters 30 --json 2>/dev/null | python3 bench/wgpu_spread.py wgpu
timeout 100 $B bench --backend wgpu:coop wgpu:chunked --shape $S --iters 20 2>&1 | grep stages
timeout 100 $B bench --backend cuda --shape $S --iters 30 2>&1 | grep -E '^(shape|gdn|kda)'
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/fla_core-0.6.0-py3-none-any.whl && export PYTHONPATH=/tmp/site
PYTHONUNBUFFERED=1 timeout 250 python3 bench/fla_bench.py --shapes $S 2> "$OUT/fla.err"; tail -2 "$OUT/fla.err"

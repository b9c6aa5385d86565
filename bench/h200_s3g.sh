#!/usr/bin/env bash
# bench/h200_s3g.sh (session 3): the wgpu f32 path's slow outliers with wgpu's own WGSL pipeline
# against every stage built by the backend and passed through as SPIR-V
# (DELTARULE_WGPU_PASSTHROUGH=1), alternated twice, plus the golden diff through passthrough.
# Carry: .dev/pack .gl
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
DELTARULE_WGPU_PASSTHROUGH=1 timeout 60 $B diff --case tests/golden/shared/*.safetensors --backend wgpu:chunked wgpu:coop 2>&1 | tail -1
run() {
  env "$@" timeout 100 $B bench --backend wgpu:chunked --shape gdn-16/32-1x8192 kda-32/32-1x8192 --iters 40 --json 2>/dev/null | python3 bench/wgpu_spread.py "$*"
}
for rep in 1 2; do
  run DELTARULE_WGPU_PASSTHROUGH=0
  run DELTARULE_WGPU_PASSTHROUGH=1
done

#!/usr/bin/env bash
# bench/h200_s3f.sh (session 3): where the slow outliers of the wgpu f32 path come from: the
# whole-call spread of wgpu:chunked with the split-K W·S (WS 1, default) and without (WS 0), with
# 16-column state tiles, against wgpu:coop. Carry: .dev/pack .gl
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
run() {
  env "$@" timeout 100 $B bench --backend wgpu:chunked --shape gdn-16/32-1x8192 kda-32/32-1x8192 --iters 40 --json 2>/dev/null | python3 bench/wgpu_spread.py "$*"
}
run DELTARULE_WGPU_STATE_WS=1
run DELTARULE_WGPU_STATE_WS=0
run DELTARULE_WGPU_STATE_BV=16
run DELTARULE_WGPU_COOP=0

#!/usr/bin/env bash
# bench/h200_s18e.sh: session 18, the final tree (a91144a: mma_quad folded, .text unchanged; the
# long device tests through one helper): the golden diffs through auto and the whole CUDA
# device-test suite.
# Carry: .dev/pack (bash bench/pack_s15.sh)
set -uo pipefail
source bench/h200_env.sh
timeout 40 .dev/bin/deltarule diff --case tests/golden/shared/*.safetensors --backend cuda > "$OUT/d.log" 2>&1
echo "diff cuda rc=$? $(tail -1 "$OUT/d.log")"
timeout 120 .dev/bin/cuda_device --test-threads=1 --nocapture > "$OUT/dev_all.log" 2>&1
echo "cuda_device (all) rc=$?"; grep -E "^test |test result|panicked|sequences on|many items on" "$OUT/dev_all.log" | cut -c1-200 | head -24
echo "== done at ${SECONDS}s"

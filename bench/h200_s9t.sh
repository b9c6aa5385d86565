#!/usr/bin/env bash
# bench/h200_s9t.sh: session 9: the device test that reruns the small-bh conformance with each
# wgmma state pass forced (wg, wgt) in a child process. Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
timeout 150 .dev/bin/cuda_device --test-threads=1 --nocapture small_bh_conformance_with_each_wgmma_state_pass > "$OUT/t.log" 2>&1; echo "rc=$?"
grep -E "STATE_BV|test result|panicked" "$OUT/t.log" | head -12

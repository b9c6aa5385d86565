#!/usr/bin/env bash
# bench/h200_s3d.sh (session 3): cooperative-matrix layout probes (backends/wgpu/tests/coop.rs).
# Carry: .dev/pack2 (the coop test binary) .gl
set -uo pipefail
source bench/h200_env.sh
DELTARULE_REQUIRE_COOP=1 timeout 60 .dev/pack2/wgpu_coop --nocapture --test-threads=1 2>&1 | grep -E 'coop|test result|panicked'

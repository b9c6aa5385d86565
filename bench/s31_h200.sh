#!/usr/bin/env bash
# bench/s31_h200.sh: session 31's call for the H200 only (any other GPU: prints its name, exits).
# 1. the closing call of issue 4, bench/h200_s24.sh whole (device tests with
#    DELTARULE_REQUIRE_CUDA=1, conformance `cuda::`, golden diffs, sanitizers, reruns, ours and fla
#    0.6.0 on the anchors in the same call, copy floor, eager vs graph, Python GPU tests; ~340 s on
#    the H100 in session 31);
# 2. then bench/s29b.sh until STOP (default 520 s): the recurrence's device tests and diffs, and
#    the decode anchors under the forms DELTARULE_CUDA_MODE forces (4, 5, 6 blocks, persistent)
#    against auto, interleaved, medians of 100: the decode rule (DecodeForm::pick) was tuned on the H100 only, and session 27 argued the
#    H200 may want more bytes in flight than 4 blocks an SM hold.
# Carry: .dev/pack .whl (bash bench/pack_s15.sh; the deltarule wheel from python/ by maturin)
set -uo pipefail
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$name" in *H200*) ;; *) echo "$name: not an H200, nothing run"; exit 0 ;; esac
FLA_END=${FLA_END:-480} bash bench/h200_s24.sh
# s29b.sh: the recurrence's device tests and decode diffs, then the forms, interleaved
left=$((${STOP:-520} - SECONDS))
echo "== decode forms at ${SECONDS}s"
# s29b's device tests and diffs take ~60 s before its first timing: skip it when less is left
[ $left -lt 100 ] && { echo "== s31 done at ${SECONDS}s (${left}s left: decode forms skipped)"; exit 0; }
STOP=$left SH="gdn-decode-16/32-256x1 kda-decode-32/32-256x1 gdn-decode-16/32-256x2 kda-decode-32/32-256x4" \
  bash bench/s29b.sh
echo "== s31 done at ${SECONDS}s"

#!/usr/bin/env bash
# bench/s31_h200.sh: session 31's call for the H200 only (any other GPU: prints its name, exits).
# 1. the closing call of issue 4, bench/h200_s24.sh whole (device tests with
#    DELTARULE_REQUIRE_CUDA=1, conformance `cuda::`, golden diffs, sanitizers, reruns, ours and fla
#    0.6.0 on the anchors in the same call, copy floor, eager vs graph, Python GPU tests; ~340 s on
#    the H100 in session 31);
# 2. then, with the time left before STOP (default 520 s), the decode anchors under the forms
#    DELTARULE_CUDA_MODE forces (4, 5, 6 blocks, persistent) against auto, interleaved, medians of
#    100: the decode rule (DecodeForm::pick) was tuned on the H100 only, and session 27 argued the
#    H200 may want more bytes in flight than 4 blocks an SM hold.
# Carry: .dev/pack .whl (bash bench/pack_s15.sh; the deltarule wheel from python/ by maturin)
set -uo pipefail
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$name" in *H200*) ;; *) echo "$name: not an H200, nothing run"; exit 0 ;; esac
FLA_END=${FLA_END:-480} bash bench/h200_s24.sh
source bench/h200_env.sh
B=.dev/bin/deltarule
D=37249
declare -A M=([auto]=$D [lb4]=$((D | 524288)) [lb5]=$((D | 131072)) [lb6]=$((D | 65536)) [pers]=$((D | 262144)))
SH="gdn-decode-16/32-256x1 kda-decode-32/32-256x1 gdn-decode-16/32-256x2 kda-decode-32/32-256x4"
echo "== decode forms at ${SECONDS}s"
for r in 1 2; do
  for v in auto lb4 lb5 lb6 pers; do
    [ $SECONDS -gt ${STOP:-520} ] && break 2
    DELTARULE_CUDA_MODE=${M[$v]} timeout 60 $B bench --backend cuda --shape $SH --iters 100 --json >> "$OUT/b_$v.jsonl" 2>> "$OUT/b.err"
    echo "round $r $v rc=$? at ${SECONDS}s"
  done
done
python3 bench/bench_table.py auto="$OUT/b_auto.jsonl" lb4="$OUT/b_lb4.jsonl" lb5="$OUT/b_lb5.jsonl" lb6="$OUT/b_lb6.jsonl" pers="$OUT/b_pers.jsonl"
echo "== s31 done at ${SECONDS}s"

#!/usr/bin/env bash
# bench/s30_any.sh: session 30's call on whatever GPU comes. On an H200 the closing call of
# issue 4 with the production defaults (the token recurrence's form picked by DecodeForm::pick;
# the persistent form lost on one token in session 29, so it is not forced): bench/h200_s24.sh
# whole. Else bench/s29b.sh, short, on the rule's unmeasured bands: kda at 7 tokens, few sequences
# with many tokens each (4 x 500, 16 x 64).
# LIMIT=seconds (default 600): the call's limit; fla's timings end 40 s before it, so the anchor
# table prints even when the device time left cuts the call short.
# QUICK=1 (little device time left): on an H200 only the anchors, ours then fla, the decode anchor
# first and the kda shapes (fla autotunes them for up to 80 s each) last; the files under $OUT
# come back when the limit cuts it (python3 bench/anchor_table.py ours.jsonl fla.jsonl here).
# ONLY_H200=1: on another GPU print its name and exit (a last call for the H200 only).
# Carry: .dev/pack .whl
if [ "${QUICK:-0}" = 1 ]; then
  export FLA_SHAPES=${FLA_SHAPES:-"gdn-decode-16/32-256x1 gdn-16/32-1x8192 gdn-16/32-16x1024 gdn-16/32-256x64 gdn-4/8-1x8192 gdn-16/32-1x32768 kda-32/32-1x8192 kda-64/64-1x8192"}
fi
end=$((${LIMIT:-600} - 40)); [ $end -gt 560 ] && end=560
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$name" in
  *H200*) FLA_END=$end exec bash bench/h200_s24.sh ;;
  *) [ "${ONLY_H200:-0}" = 1 ] && { echo "$name: not an H200, nothing run"; exit 0; }
     STOP=${STOP:-150} SH=${SH:-"kda-decode-32/32-256x7 gdn-decode-16/32-4x500 kda-decode-32/32-4x500 gdn-decode-16/32-16x64 kda-decode-32/32-16x64"} exec bash bench/s29b.sh ;;
esac

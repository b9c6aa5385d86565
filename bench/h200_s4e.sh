#!/usr/bin/env bash
# bench/h200_s4e.sh (session 4, call 6): per-instruction warp-stall samples of the v7 state kernel
# (gdn 16/32 1x8192) to place its 2,400 cycles a chunk. Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
timeout 200 ncu --clock-control none -k "regex:prefill_state" -c 1 --section SourceCounters --section WarpStateStats -o "$OUT/state" $B bench --backend cuda:small-bh --shape gdn-16/32-1x8192 --warmup 0 --iters 1 --rotate-mib 1 > "$OUT/ncu.log" 2>&1
echo "ncu rc=$?"; tail -3 "$OUT/ncu.log"
ncu -i "$OUT/state.ncu-rep" --page source --print-source sass --csv > "$OUT/src.csv" 2> "$OUT/src.err"; echo "src rc=$? $(wc -l < "$OUT/src.csv")"; head -3 "$OUT/src.csv" | cut -c1-600
rm -f "$OUT/state.ncu-rep"

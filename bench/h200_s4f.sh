#!/usr/bin/env bash
# bench/h200_s4f.sh (session 4, call 7): per-instruction warp-stall samples of the small-bh intra
# kernels (gdn 16/32 and kda 32/32, 1x8192). Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
for sh in gdn-16/32-1x8192 kda-32/32-1x8192; do
  n=${sh%%-*}
  timeout 200 ncu --clock-control none -k "regex:prefill_intra" -c 1 --section SourceCounters --section WarpStateStats -o "$OUT/$n" $B bench --backend cuda:small-bh --shape $sh --warmup 0 --iters 1 --rotate-mib 1 > "$OUT/ncu_$n.log" 2>&1
  echo "ncu $n rc=$?"
  ncu -i "$OUT/$n.ncu-rep" --page source --print-source sass --csv > "$OUT/src_$n.csv" 2> /dev/null
  ncu -i "$OUT/$n.ncu-rep" --page source --print-source cuda,sass --csv > "$OUT/srcl_$n.csv" 2> /dev/null
  rm -f "$OUT/$n.ncu-rep"
done
ls -la "$OUT"

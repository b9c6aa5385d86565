#!/usr/bin/env bash
# bench/s29a.sh: session 29, any GPU (~200 s). (1) Where the persistent decode form's warps stall
# on the gdn decode anchor against the default (Nsight Compute warp-state sampling of one launch
# each, per SASS line; the files come back xz'd). (2) The token recurrence's forms against tokens
# per sequence: default (4 blocks an SM), 5 and 6 blocks an SM, persistent; gdn 16/32 and kda
# 32/32, 256 sequences x 1..8 tokens, every pool row active; two rounds interleaved, medians of 100.
# Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
D=37249
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
for m in $((D | 262144)) $D; do
  # (--print-source needs --page source, which prints no sections: one report, read twice)
  DELTARULE_CUDA_MODE=$m timeout 100 $NCU -k regex:decode --launch-skip 3 --launch-count 1 \
    --section WarpStateStats --section SourceCounters --section SpeedOfLight --import-source yes \
    -o "$OUT/ncu_$m" $B bench --backend cuda --shape gdn-decode-16/32-256x1 --iters 5 > "$OUT/ncu_run_$m.txt" 2>&1
  echo "ncu mode $m rc=$?"
  $NCU --import "$OUT/ncu_$m.ncu-rep" --page details --print-details all > "$OUT/ncu_$m.txt" 2>&1
  $NCU --import "$OUT/ncu_$m.ncu-rep" --page source --print-source sass --csv > "$OUT/ncu_src_$m.csv" 2>&1
  grep -E "Duration|DRAM Throughput|Stall|Warp Cycles Per Issued" "$OUT/ncu_$m.txt" | head -30 | cut -c1-150
done
echo "== sweep at ${SECONDS}s"
declare -A M=([lb4]=$D [lb5]=$((D | 131072)) [lb6]=$((D | 65536)) [pers]=$((D | 262144)))
SH="gdn-decode-16/32-256x1 gdn-decode-16/32-256x2 gdn-decode-16/32-256x3 gdn-decode-16/32-256x4 gdn-decode-16/32-256x6 gdn-decode-16/32-256x8 kda-decode-32/32-256x1 kda-decode-32/32-256x2 kda-decode-32/32-256x4 gdn-decode-16/32-64x1 gdn-decode-16/32-64x4"
for r in 1 2; do
  for v in lb4 lb5 lb6 pers; do
    DELTARULE_CUDA_MODE=${M[$v]} timeout 100 $B bench --backend cuda --shape $SH --iters 100 --json >> "$OUT/b_$v.jsonl" 2>> "$OUT/b.err"
    echo "round $r $v rc=$? at ${SECONDS}s"
  done
done
tail -3 "$OUT/b.err"
python3 bench/bench_table.py lb4="$OUT/b_lb4.jsonl" lb5="$OUT/b_lb5.jsonl" lb6="$OUT/b_lb6.jsonl" pers="$OUT/b_pers.jsonl"
cd "$OUT" && xz -T4 ncu_*.txt ncu_*.csv ncu_*.ncu-rep
echo "== done at ${SECONDS}s"

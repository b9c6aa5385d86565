#!/usr/bin/env bash
# bench/h200_s6a.sh (session 6, call 1): where the small-bh intra kernels' time goes, per
# instruction (ncu SourceCounters: warp-stall samples and instructions executed per SASS line,
# summarised per barrier-delimited region by bench/sass_regions.py), with the scheduler and
# instruction statistics, on session 5's final tree. Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
source bench/h200_lib.sh
for sh in kda-32/32-1x8192 gdn-16/32-1x8192; do
  n=${sh%%-*}
  timeout 240 ncu --clock-control none -k "regex:prefill_intra" -c 1 --section SourceCounters --section WarpStateStats --section SchedulerStats --section InstructionStats --section LaunchStats --section Occupancy -o "$OUT/$n" $B bench --backend cuda:small-bh --shape $sh --warmup 0 --iters 1 --rotate-mib 1 > "$OUT/ncu_$n.log" 2>&1
  echo "== ncu $n rc=$?"
  ncu -i "$OUT/$n.ncu-rep" --page details > "$OUT/det_$n.txt" 2>&1
  grep -E "Duration|Issue Slots Busy|Issued Warp Per Scheduler|No Eligible|Active Warps Per Scheduler|Eligible Warps|Warp Cycles Per Issued|Executed Ipc A|Registers Per|Achieved Occupancy|Block Limit" "$OUT/det_$n.txt" | sed 's/  */ /g' | head -20
  ncu -i "$OUT/$n.ncu-rep" --page raw --csv --metrics regex:smsp__pcsamp_warps_issue_stalled_.* > "$OUT/raw_$n.csv" 2>/dev/null
  ncu -i "$OUT/$n.ncu-rep" --page source --print-source sass --csv > "$OUT/src_$n.csv" 2> /dev/null
  python3 bench/sass_regions.py "$OUT/src_$n.csv" 30
  rm -f "$OUT/$n.ncu-rep"
done
tl_probe cuda:small-bh kda-32/32-1x8192
xz -T8 "$OUT"/src_*.csv
ls -la "$OUT"

#!/usr/bin/env bash
# bench/h200_s7b.sh (session 7, call 2): where the wgmma state pass's time goes. s7a measured it
# at 180 us (1x8192) and 689 us (1x32768: 1.35 us a chunk), the same as the mma.sync pass,
# although its tensor work is ~900 cycles a chunk. (1) its time without the fetches
# (DELTARULE_CUDA_PROBE=1: only the first two chunks are fetched; results wrong); (2) ncu
# speed-of-light, memory and stall sections plus per-instruction stall samples of the state
# kernel. Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
source bench/h200_lib.sh
for pr in 0 1; do
  echo "-- PROBE=$pr"
  DELTARULE_CUDA_PROBE=$pr bench_rows --backend cuda --shape gdn-16/32-1x8192 gdn-16/32-1x32768 kda-32/32-1x8192 --iters 20 | tail -3 | awk '{print $1, $3, $4, $5}' | tee -a "$OUT/table.txt"
  DELTARULE_CUDA_PROBE=$pr ncu_split gdn-16/32-1x8192 | tee -a "$OUT/table.txt"
done
timeout 200 ncu --clock-control none -k "regex:prefill_statewg" -c 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section SourceCounters -o "$OUT/st" $B bench --backend cuda --shape gdn-16/32-1x8192 --warmup 0 --iters 1 --rotate-mib 1 > "$OUT/ncu_st.log" 2>&1
echo "== ncu rc=$?"
ncu -i "$OUT/st.ncu-rep" --page details 2>&1 | grep -E "Throughput|Bandwidth|Busy|Issued Warp|No Eligible|Warp Cycles Per Issued|Hit Rate|Duration|Stall" | sed 's/  */ /g' | head -40
ncu -i "$OUT/st.ncu-rep" --page source --print-source sass --csv > "$OUT/src_st.csv" 2> /dev/null
python3 bench/sass_regions.py "$OUT/src_st.csv" 25 > "$OUT/regions.txt" 2>&1; head -c 9000 "$OUT/regions.txt"
rm -f "$OUT/st.ncu-rep"; xz -T8 -f "$OUT/src_st.csv"
(cd "$OUT" && tar czf logs.tgz *.log && rm -f *.log)
echo "== table"; cat "$OUT/table.txt"

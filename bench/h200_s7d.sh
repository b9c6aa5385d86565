#!/usr/bin/env bash
# bench/h200_s7d.sh (session 7, call 4): the wgmma state pass with per-stage "empty" mbarriers
# (s7c's named barrier raced: auto benchmarks hung). Correctness (device tests, golden diffs,
# memcheck), repeated benchmarks (a hang shows here), auto against the mma.sync pass, the state
# kernel's stall samples; the table last. Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
source bench/h200_lib.sh
cuda_checks 150
echo "-- timings: auto (wgmma) against the mma.sync pass (BV=32)"
for bv in auto 32; do
  if [[ $bv == auto ]]; then unset DELTARULE_CUDA_STATE_BV; else export DELTARULE_CUDA_STATE_BV=$bv; fi
  echo "BV=$bv" | tee -a "$OUT/table.txt"
  bench_rows --backend cuda --shape gdn-16/32-1x8192 gdn-16/32-1x32768 gdn-16/32-16x1024 gdn-16/32-256x64 gdn-4/8-1x8192 kda-32/32-1x8192 kda-64/64-1x8192 --iters 30 | tail -7 | awk '{print $1, $3, $4, $5}' | tee -a "$OUT/table.txt"
done
unset DELTARULE_CUDA_STATE_BV
ncu_split gdn-16/32-1x8192 | tee -a "$OUT/table.txt"
timeout 100 ncu --clock-control none -k "regex:prefill_statewg" -c 1 --section WarpStateStats --section SourceCounters -o "$OUT/st" $B bench --backend cuda --shape gdn-16/32-1x8192 --warmup 0 --iters 1 --rotate-mib 1 > "$OUT/ncu_st.log" 2>&1
echo "== ncu rc=$?"
ncu -i "$OUT/st.ncu-rep" --page source --print-source sass --csv > "$OUT/src_st.csv" 2> /dev/null
rm -f "$OUT/st.ncu-rep"; xz -T8 -f "$OUT/src_st.csv"
(cd "$OUT" && tar czf logs.tgz *.log && rm -f *.log)
echo "== table"; cat "$OUT/table.txt"

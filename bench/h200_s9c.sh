#!/usr/bin/env bash
# bench/h200_s9c.sh: session 9, third H200 call (measurement only): where the T-form kernels
# spend their time at gdn 16/32 1x8192: the intra timeline probe (PROBE 256) and per-instruction
# stall samples (ncu SourceCounters) of gdn_prefill_intrat and gdn_prefill_statewgt.
# Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
source bench/h200_lib.sh
tl_probe cuda:small-bh gdn-16/32-1x8192
src_profile gdn-16/32-1x8192 14
timeout 240 ncu --clock-control none -k "regex:statewgt" -c 1 --section SourceCounters --section WarpStateStats --section SchedulerStats -o "$OUT/st" $B bench --backend cuda:small-bh --shape gdn-16/32-1x8192 --warmup 0 --iters 1 --rotate-mib 1 > "$OUT/ncu_st.log" 2>&1
echo "== ncu statewgt rc=$?"
ncu -i "$OUT/st.ncu-rep" --page details 2>&1 | grep -E "Issued Warp Per Scheduler|No Eligible|Eligible Warps|Warp Cycles Per Issued|Duration" | sed 's/  */ /g'
ncu -i "$OUT/st.ncu-rep" --page source --print-source sass --csv > "$OUT/src_st.csv" 2> /dev/null
python3 bench/sass_regions.py "$OUT/src_st.csv" 30
rm -f "$OUT/st.ncu-rep"; xz -T8 -f "$OUT/src_st.csv"
(cd "$OUT" && tar czf logs_s9c.tgz *.log 2>/dev/null; rm -f *.log)

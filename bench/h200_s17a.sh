#!/usr/bin/env bash
# bench/h200_s17a.sh: session 17, first call. The fused T-form with its state tiles' loads issued
# ahead of their use (MODE_FT_PIPE = 4096, entry `gdn_prefill_fusedtq`: the first tile's S0 and
# V rows during the intra stage, the next tile's under the S update's successor, o's product),
# against the default (385: `gdn_prefill_fusedt`) in the same call, alternating rounds; the probe
# builds 32768 (no early loads) and 65536 (V converted as before) split its two parts. Then the
# clock64 timelines, and ncu's stall samples of both fused kernels at 256x64 and of the T-form
# state pass at 16x1024 (where the time goes next).
# Predicted: 256x64 0.877 -> ~0.80 (the loads phase, 7.7 K of 46 K cycles a CTA, mostly hidden).
# Carry: .dev/pack (PROBES="256 32768 65536" bash bench/pack_s15.sh) .whl
set -uo pipefail
source bench/h200_env.sh
source bench/h200_lib.sh
B=.dev/bin/deltarule
G="tests/golden/shared/*.safetensors"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
echo "== correctness"
for pr in 0 32768 65536; do
  DELTARULE_CUDA_PROBE=$pr DELTARULE_CUDA_MODE=4481 timeout 40 $B diff --case $G --backend cuda:chunked > "$OUT/diff_q$pr.log" 2>&1
  echo "4481 probe $pr diff cuda:chunked rc=$? $(tail -1 "$OUT/diff_q$pr.log") $(grep -E ' expected ' "$OUT/diff_q$pr.log" | grep gdn | awk '{printf "%s ", $4}')"
done
DELTARULE_CUDA_MODE=4481 timeout 90 .dev/bin/cuda_device --test-threads=1 --nocapture chunked_ > "$OUT/dev_q.log" 2>&1
echo "4481 device chunked_ rc=$?"; grep -E "test result|panicked|sequences on|errors" "$OUT/dev_q.log" | head -8
DELTARULE_CUDA_MODE=4481 timeout 60 .dev/bin/conformance --test-threads=1 cuda:: > "$OUT/conf_q.log" 2>&1
echo "4481 conformance cuda:: rc=$? $(grep -E 'test result' "$OUT/conf_q.log" | tail -1)"
DELTARULE_CUDA_MODE=4481 timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 $B diff --case $G --backend cuda:chunked > "$OUT/mc_q.log" 2>&1
echo "4481 memcheck diff cuda:chunked rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/mc_q.log" | tail -1)"
echo "== timings at ${SECONDS}s"
timeout 60 $B bench --backend cuda:chunked --shape gdn-16/32-256x64 --iters 5 > /dev/null 2>&1
for round in 1 2 3; do
  for v in 385:0 4481:0 4481:32768 4481:65536; do
    m=${v%%:*}; pr=${v##*:}
    DELTARULE_CUDA_PROBE=$pr DELTARULE_CUDA_MODE=$m timeout 60 $B bench --backend cuda:chunked --shape gdn-16/32-256x64 gdn-16/32-128x128 --iters 30 2>&1 | grep -E "^gdn" | sed "s/^/r$round m$m p$pr /" | tee -a "$OUT/t.log"
  done
done
awk '{k=$2" "$3" "$4; s[k]+=$7; n[k]++} END {for (k in s) printf "%-36s %.4f (n=%d)\n", k, s[k]/n[k], n[k]}' "$OUT/t.log" | sort
echo "== timelines at ${SECONDS}s"
for m in 385 4481; do
  DELTARULE_CUDA_MODE=$m DELTARULE_CUDA_PROBE=256 timeout 60 $B bench --backend cuda:chunked --shape gdn-16/32-256x64 --warmup 1 --iters 1 --rotate-mib 1 > "$OUT/tl$m.log" 2>&1
  echo "mode $m rc=$? $(grep -c '^TLT' "$OUT/tl$m.log") lines"
  grep '^TLT' "$OUT/tl$m.log" | awk '{for(i=1;i<=NF;i++) if($i ~ /^(intra|loads|step1|step2|step34)$/){s[$i]+=$(i+1); if(n0[$i]++==0) o[++k]=$i}} END{for(j=1;j<=k;j++) printf "%s %.0f  ", o[j], s[o[j]]/n0[o[j]]; print ""}'
done
echo "== ncu at ${SECONDS}s"
fprof() {  # name mode kernel-regex backend shape
  DELTARULE_CUDA_MODE=$2 timeout 150 ncu --clock-control none -k "regex:$3" -c 1 --section SourceCounters --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section SpeedOfLight -o "$OUT/$1" $B bench --backend $4 --shape $5 --warmup 0 --iters 1 --rotate-mib 1 > "$OUT/ncu_$1.log" 2>&1
  echo "-- ncu $1 rc=$?"
  ncu -i "$OUT/$1.ncu-rep" --page details 2>&1 | grep -E "Duration|Issued Warp Per Scheduler|No Eligible|Eligible Warps|Warp Cycles Per Issued|Memory Throughput|DRAM Throughput|L2 Hit|Compute \(SM\) Throughput|Registers Per|Achieved Occupancy" | sed 's/  */ /g'
  ncu -i "$OUT/$1.ncu-rep" --page source --print-source sass --csv > "$OUT/src_$1.csv" 2> /dev/null
  python3 bench/sass_regions.py "$OUT/src_$1.csv" 14 | cut -c1-220
  rm -f "$OUT/$1.ncu-rep"; xz -T8 -f "$OUT/src_$1.csv"
}
fprof ft 385 "prefill_fusedt$" cuda:chunked gdn-16/32-256x64
fprof ftq 4481 "prefill_fusedtq" cuda:chunked gdn-16/32-256x64
if (( SECONDS < 470 )); then fprof wgt 385 "prefill_statewgt" cuda:small-bh gdn-16/32-16x1024; fi
echo "== done at ${SECONDS}s"
(cd "$OUT" && tar czf logs_s17a.tgz *.log 2>/dev/null; rm -f *.log)

# bench/h200_lib.sh: helpers sourced by device scripts (bench/h200_s5*.sh, h200_s19a.sh, h200_s19b.sh), after
# bench/h200_env.sh (which sets OUT and unpacks .dev/pack). B is the deltarule binary.
# (s5a-s5h ran with these commands inline; they were moved here after the session's device calls,
# unchanged, so the next scripts can reuse them.)
B=.dev/bin/deltarule

# Correctness before any timing: the CUDA device tests (every kernel), conformance through auto,
# golden diffs on cuda, cuda:small-bh and cuda:chunked, and (unless $1 is 0) compute-sanitizer
# memcheck on the sanitizer subset with a timeout of $1 seconds.
cuda_checks() {
  local san=${1:-150}
  timeout ${DEV_TIMEOUT:-120} .dev/bin/cuda_device --test-threads=1 --nocapture > "$OUT/dev.log" 2>&1; echo "device tests rc=$?"
  grep -E " ran, |panicked|FAIL" "$OUT/dev.log" | head -12
  timeout 60 .dev/bin/conformance --test-threads=1 --nocapture cuda:: > "$OUT/conf.log" 2>&1; echo "conformance cuda:: rc=$?"
  grep -E " ran, " "$OUT/conf.log"
  local b
  for b in cuda cuda:small-bh cuda:chunked; do
    timeout 40 $B diff --case tests/golden/shared/*.safetensors --backend $b > "$OUT/diff_${b/:/_}.log" 2>&1
    echo "diff $b rc=$? $(tail -1 "$OUT/diff_${b/:/_}.log")"
  done
  if [[ $san != 0 ]]; then
    timeout "$san" compute-sanitizer --tool memcheck --error-exitcode 9 .dev/bin/cuda_device --test-threads=1 sanitizer_subset > "$OUT/memcheck.log" 2>&1
    echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
  fi
}

# `deltarule bench` rows without the blank and progress lines.
bench_rows() { timeout 90 $B bench "$@" 2>&1 | grep -v '^\s*$' | grep -v generating; }

# The clock64 timeline probe (DELTARULE_CUDA_PROBE=256, kernels/prefill.cuh) of backend $1 on
# shape $2: mean cycles per intra phase over the sampled chunks, and for the fused kernel the
# intra / state cycles per CTA. Keeps only the TL lines of the log (20 kB at most).
tl_probe() {
  local f="$OUT/tl_${2//\//_}_${1/:/_}.log"
  DELTARULE_CUDA_PROBE=256 timeout 60 $B bench --backend "$1" --shape "$2" --warmup 2 --iters 3 --rotate-mib 1 > "$f" 2>&1
  echo "$1 $2 rc=$?"
  grep '^TL ' "$f" | tail -n 40 | awk '{for(i=1;i<=NF;i++) if($i ~ /^(load|cumsum|AP|diag|merge|tprime|step4|step5|total)$/){s[$i]+=$(i+1); if(n0[$i]++==0) o[++k]=$i}} END{for(j=1;j<=k;j++) printf "%s %.0f  ", o[j], s[o[j]]/n0[o[j]]; print ""}'
  grep '^TLF ' "$f" | tail -n 40 | awk '{a+=$(NF-3); b+=$(NF-1); n++} END{if(n) printf "fused: intra %.0f state %.0f cycles per CTA (n=%d)\n", a/n, b/n, n}'
  sed -i '/^TL/!d' "$f"; head -c 20000 "$f" > "$f.x"; mv "$f.x" "$f"
}

# Per-kernel GPU durations (ncu) of the small-bh intra and state kernels on each shape given.
ncu_split() {
  local sh
  for sh in "$@"; do
    timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum -k "regex:prefill_(intra|state)" -c 2 $B bench --backend cuda:small-bh --shape $sh --warmup 0 --iters 1 --rotate-mib 1 > "$OUT/ncu_${sh//\//_}.log" 2>&1
    echo "$sh rc=$? $(grep -E "prefill_|gpu__time_duration" "$OUT/ncu_${sh//\//_}.log" | sed 's/  */ /g' | awk '/prefill_/{k=$1} /duration/{printf "%s %s us  ", k, $NF}')"
  done
}

# The session-5 timing block: the five small-bh anchor shapes through auto, chunked against
# small-bh on the many-pair shapes, then the timeline probe on gdn and kda small-bh and the fused
# kernel, for each DELTARULE_CUDA_PROBE value given (default 0: production builds).
s5_timings() {
  local pr
  for pr in "${@:-0}"; do
    echo "-- auto, PROBE=$pr"
    DELTARULE_CUDA_PROBE=$pr bench_rows --backend cuda --shape gdn-16/32-1x8192 gdn-4/8-1x8192 kda-32/32-1x8192 kda-64/64-1x8192 gdn-16/32-1x32768 --iters 30 | tail -6
    DELTARULE_CUDA_PROBE=$pr bench_rows --backend cuda:chunked cuda:small-bh --shape gdn-16/32-16x1024 gdn-16/32-256x64 --iters 30 | tail -4
  done
  echo "-- timeline probe (cycles per phase, mean over sampled chunks)"
  tl_probe cuda:small-bh gdn-16/32-1x8192
  tl_probe cuda:small-bh kda-32/32-1x8192
  tl_probe cuda:chunked gdn-16/32-256x64
}

# Per-instruction stall samples of the small-bh intra kernel (ncu SourceCounters) on shape $1,
# summarised per barrier-delimited region by bench/sass_regions.py ($2 = how many top lines); the
# CSV stays in $OUT (xz). (session 6)
src_profile() {
  local n=${1%%-*}
  timeout 240 ncu --clock-control none -k "regex:prefill_intra" -c 1 --section SourceCounters --section WarpStateStats --section SchedulerStats -o "$OUT/$n" $B bench --backend cuda:small-bh --shape "$1" --warmup 0 --iters 1 --rotate-mib 1 > "$OUT/ncu_$n.log" 2>&1
  echo "== ncu $n rc=$?"
  ncu -i "$OUT/$n.ncu-rep" --page details 2>&1 | grep -E "Issued Warp Per Scheduler|No Eligible|Eligible Warps|Warp Cycles Per Issued" | sed 's/  */ /g'
  ncu -i "$OUT/$n.ncu-rep" --page source --print-source sass --csv > "$OUT/src_$n.csv" 2> /dev/null
  python3 bench/sass_regions.py "$OUT/src_$n.csv" "${2:-12}"
  rm -f "$OUT/$n.ncu-rep"; xz -T8 -f "$OUT/src_$n.csv"
}

# compute-sanitizer racecheck (shared-memory hazards) of `deltarule diff` on a generated problem:
# name, an environment assignment (X=1 for none), backend, problem flags; prints the summary, the
# errors against float64 and the first kernel lines named. Timeout RC_TIMEOUT (35 s). (Session 11.)
rc() {
  env $2 timeout ${RC_TIMEOUT:-35} compute-sanitizer --tool racecheck --racecheck-report hazard --print-limit 3 $B diff $4 --backend $3 > "$OUT/$1.log" 2>&1
  echo "$1 [$2 $3] rc=$? $(grep -E 'RACECHECK SUMMARY' "$OUT/$1.log") $(grep -E ' (o|final_state) +f64' "$OUT/$1.log" | awk '{print $4, $6, $NF}' | tr '\n' ' ')"
  grep -m2 -E "prefill.cuh:[0-9]+" "$OUT/$1.log" | sed 's/.* in //'
}

# (session 19) Means over alternating rounds of `deltarule bench` rows saved as "r<round> m<variant>
# <row>" in file $1 (the GPU ms is field 6): one line per (variant, shape), sorted by shape.
round_means() {
  awk '{k=$2" "$3; s[k]+=$6; n[k]++} END {for (k in s) printf "%-40s %.4f (n=%d)\n", k, s[k]/n[k], n[k]}' "$1" | sort -k2,2 -k1,1
}

# (session 19) Mean phase cycles per CTA of the fused T-form's TLT lines (PROBE 256) in log $1,
# labelled P$2.
tlt_mean() {
  grep TLT "$1" | awk -v m="$2" '{for(i=1;i<=NF;i++){if($i=="intra")a+=$(i+1); if($i=="loads")b+=$(i+1); if($i=="step1")c+=$(i+1); if($i=="step2")d+=$(i+1); if($i=="step34")e+=$(i+1)}; n++} END {if(n) printf "P%s n=%d intra %.0f loads %.0f step1 %.0f step2 %.0f step34 %.0f total %.0f\n", m, n, a/n, b/n, c/n, d/n, e/n, (a+b+c+d+e)/n}'
}

# (session 20) Mean phase cycles of the fused T-form's intra stage (TLF lines, PROBE 256) in log
# $1, labelled P$2.
tlf_mean() {
  grep TLF "$1" | awk -v m="$2" '{for(i=1;i<=NF;i++){if($i=="load")a+=$(i+1); if($i=="cumsum")b+=$(i+1); if($i=="AP")c+=$(i+1); if($i=="diag")d+=$(i+1); if($i=="merge")e+=$(i+1); if($i=="tbuild")f+=$(i+1)}; n++} END {if(n) printf "P%s n=%d load %.0f cumsum %.0f AP %.0f diag %.0f merge %.0f tbuild %.0f total %.0f\n", m, n, a/n, b/n, c/n, d/n, e/n, f/n, (a+b+c+d+e+f)/n}'
}

# (session 20) One timed row of variant (PROBE bits) $2 in round $1: `deltarule bench` (medians of
# 30) on backend $3 and shape $4, appended to $OUT/t.log as "r<round> m<bits> <row>" for
# round_means. (Session 20's calls ran it inline, with a 40 s box for the 256x64 rows.)
probe_row() {
  DELTARULE_CUDA_PROBE=$2 timeout 60 $B bench --backend "$3" --shape "$4" --iters 30 2>&1 | grep -E "^(gdn|kda)" \
    | grep -v generating | sed "s/^/r$1 m$2 /" | tee -a "$OUT/t.log"
}

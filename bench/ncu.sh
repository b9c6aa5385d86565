#!/usr/bin/env bash
# bench/ncu.sh: Nsight Compute over `deltarule bench` on one named shape: the kernels' speed of
# light, memory, warp states, occupancy and launch figures, or their durations alone, or the warp
# stall samples per SASS instruction summarised per barrier-delimited region (bench/sass_regions.py).
#
#   bash bench/ncu.sh SHAPE [options]            e.g. bash bench/ncu.sh gdn-decode-16/32-256x1
#
#   --backend B      cuda (default), cuda:chunked, cuda:small-bh, cuda:recurrent
#   --kernel REGEX   the kernels profiled (default: every deltarule kernel, `prefill|decode`)
#   --skip N         matching launches skipped first (default 3: past the warm-up's first calls)
#   --count N        launches profiled (default 1; --durations: 12)
#   --durations      only each launch's GPU duration (gpu__time_duration.sum)
#   --source         warp stall sampling per instruction (SourceCounters, WarpStateStats): the
#                    SASS as CSV under OUT, summarised by bench/sass_regions.py
#   --top N          instructions listed by --source's summary (default 25)
#   --out DIR        reports and logs (default /tmp/deltarule-ncu)
# DELTARULE names the CLI (default target/release/deltarule); NCU the profiler (default: ncu on
# PATH, else under /usr/local/cuda*). The tuning variables of docs/tuning.md pass through, e.g.
#   DELTARULE_CUDA_DECODE_FORM=persistent bash bench/ncu.sh gdn-decode-16/32-256x1
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
DELTARULE=${DELTARULE:-$HERE/../target/release/deltarule}
OUT=${OUT:-/tmp/deltarule-ncu}
BACKEND=cuda KERNEL='prefill|decode' SKIP=3 COUNT='' MODE=sections TOP=25 SHAPE=''

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --backend) BACKEND=$2; shift ;;
    --kernel) KERNEL=$2; shift ;;
    --skip) SKIP=$2; shift ;;
    --count) COUNT=$2; shift ;;
    --durations) MODE=durations ;;
    --source) MODE=source ;;
    --top) TOP=$2; shift ;;
    --out) OUT=$2; shift ;;
    -h|--help) usage 0 ;;
    -*) echo "ncu.sh: unknown option $1" >&2; usage 2 ;;
    *) SHAPE=$1 ;;
  esac
  shift
done
[ -n "$SHAPE" ] || { echo "ncu.sh: give a named shape, e.g. gdn-16/32-1x8192" >&2; usage 2; }
NCU=${NCU:-$(command -v ncu)}
for f in /usr/local/cuda*/bin/ncu; do [ -z "$NCU" ] && [ -x "$f" ] && NCU=$f; done
[ -n "$NCU" ] || { echo "ncu.sh: Nsight Compute (ncu) not found; set NCU" >&2; exit 2; }
[ -x "$DELTARULE" ] || { echo "ncu.sh: no deltarule CLI at $DELTARULE; set DELTARULE" >&2; exit 2; }
mkdir -p "$OUT"
name=$(echo "${SHAPE}_${BACKEND}" | tr '/:' '__')
run=("$DELTARULE" bench --backend "$BACKEND" --shape "$SHAPE" --warmup 2 --iters 5 --rotate-mib 1)
"$NCU" --version | tail -1

case $MODE in
  durations)
    "$NCU" --clock-control none -k "regex:$KERNEL" --launch-skip "$SKIP" --launch-count "${COUNT:-12}" \
      --metrics gpu__time_duration.sum "${run[@]}" > "$OUT/$name.durations.txt" 2>&1
    echo "ncu rc=$?"
    # one line per launch: the kernel, its grid and block, its duration
    awk '/\([0-9]+, [0-9]+, [0-9]+\)x\([0-9]+, [0-9]+, [0-9]+\)/ { k = $0; sub(/^ +/, "", k); sub(/, Context.*/, "", k) }
         /gpu__time_duration.sum/ { print k ": " $NF " " $(NF-1) }' "$OUT/$name.durations.txt"
    ;;
  sections)
    "$NCU" --clock-control none -k "regex:$KERNEL" --launch-skip "$SKIP" --launch-count "${COUNT:-1}" \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
      --section Occupancy --section LaunchStats "${run[@]}" > "$OUT/$name.sections.txt" 2>&1
    echo "ncu rc=$? (the whole report: $OUT/$name.sections.txt)"
    grep -E '\([0-9]+, [0-9]+, [0-9]+\)x\(|Duration|DRAM Throughput|Memory Throughput|Warp Cycles Per Issued|Achieved Occupancy|Theoretical Occupancy|Registers Per Thread|Block Limit|L2 Hit Rate|L1/TEX Hit Rate|Waves Per SM' \
      "$OUT/$name.sections.txt"
    ;;
  source)
    "$NCU" --clock-control none -k "regex:$KERNEL" --launch-skip "$SKIP" --launch-count "${COUNT:-1}" \
      --section WarpStateStats --section SourceCounters --import-source yes -f -o "$OUT/$name" \
      "${run[@]}" > "$OUT/$name.run.txt" 2>&1
    echo "ncu rc=$?"
    # --print-source needs --page source, which prints no sections: the report is read twice
    "$NCU" --import "$OUT/$name.ncu-rep" --page details > "$OUT/$name.details.txt" 2>&1
    grep -E 'Warp Cycles Per Issued|Issued Warp Per Scheduler|No Eligible|Eligible Warps' "$OUT/$name.details.txt"
    "$NCU" --import "$OUT/$name.ncu-rep" --page source --print-source sass --csv > "$OUT/$name.sass.csv" 2> /dev/null
    python3 "$HERE/sass_regions.py" "$OUT/$name.sass.csv" "$TOP"
    ;;
esac

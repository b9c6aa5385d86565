#!/usr/bin/env bash
# bench/s33_decode.sh: session 33, the H200 only (any other GPU: prints its name, exits; ~40 s).
# The decode anchor sat at its target's line in session 33's closing call (0.2786 ms in the anchor
# table, medians of 30; 0.2805 / 0.2808 in bench/s29b.sh's two later rounds, medians of 100): time
# it again, three interleaved rounds of 200 of auto and of the 5-block form (0.2798 there), with
# the copy floor of the same 1.07 GB first and last. Carry: .dev/pack .whl
set -uo pipefail
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$name" in *H200*) ;; *) echo "$name: not an H200, nothing run"; exit 0 ;; esac
source bench/h200_env.sh
B=.dev/bin/deltarule
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,temperature.gpu --format=csv,noheader
timeout 60 python3 bench/copy_floor.py
S="gdn-decode-16/32-256x1 kda-decode-32/32-256x1"
$B bench --backend cuda --shape $S --iters 20 > /dev/null 2>&1   # warm-up (CUBIN load)
for r in 1 2 3; do
  for v in auto lb5; do
    m=37249; [ $v = lb5 ] && m=$((37249 | 131072))
    DELTARULE_CUDA_MODE=$m timeout 60 $B bench --backend cuda --shape $S --iters 200 --json >> "$OUT/d_$v.jsonl" 2>> "$OUT/d.err"
    echo "round $r $v rc=$? at ${SECONDS}s"
  done
done
timeout 60 python3 bench/copy_floor.py
nvidia-smi --query-gpu=temperature.gpu,clocks.sm --format=csv,noheader
python3 - "$OUT" <<'PY'
import json, sys, glob
for f in sorted(glob.glob(sys.argv[1] + "/d_*.jsonl")):
    for l in open(f):
        m = json.loads(l)
        print(f.split("/")[-1], m["shape"], m["rule"], "median %.4f p10 %.4f p90 %.4f ms, %.3f x floor" % (
            m["gpu_ms_median"], m["gpu_ms_p10"], m["gpu_ms_p90"], m["x_floor"]))
PY

#!/usr/bin/env bash
# bench/ncu_s28b.sh: session 28, where the persistent decode form's warps stall on the gdn decode
# anchor (H100): Nsight Compute warp-state sampling per source line and SASS instruction of one
# launch of each form. Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
$NCU --version | tail -1
for m in 299393 37249; do
  # (--print-source needs --page source, which prints no sections: one report, read twice;
  # session 29 found the single call failing)
  DELTARULE_CUDA_MODE=$m timeout 200 $NCU -k regex:decode --launch-skip 3 --launch-count 1 \
    --section WarpStateStats --section SourceCounters --import-source yes -o "$OUT/ncu_$m" \
    $B bench --backend cuda --shape gdn-decode-16/32-256x1 --iters 5 > "$OUT/ncu_run_$m.txt" 2>&1
  echo "mode $m rc=$?"
  $NCU --import "$OUT/ncu_$m.ncu-rep" --page details --print-details all > "$OUT/ncu_src_$m.txt" 2>&1
  $NCU --import "$OUT/ncu_$m.ncu-rep" --page source --print-source cuda,sass --csv > "$OUT/ncu_src_$m.csv" 2>&1
  echo "mode $m: $(wc -c < "$OUT/ncu_src_$m.txt") + $(wc -c < "$OUT/ncu_src_$m.csv") bytes"
done
cd "$OUT" && xz -T4 ncu_src_*.txt ncu_src_*.csv && ls -la

#!/usr/bin/env bash
# bench/h200_s6d.sh (session 6, call 4): s6c's tree, plus the out-of-phase start experiment
# (PROBE 1024: the second CTA of each SM in the first wave starts half a chunk later; 2048: a
# quarter). Correctness of the production build first, then the anchor shapes per variant, the
# table last. Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
source bench/h200_lib.sh
cuda_checks 150
for pr in 0 1024 2048 0; do
  echo "-- auto, PROBE=$pr"
  DELTARULE_CUDA_PROBE=$pr bench_rows --backend cuda --shape kda-32/32-1x8192 kda-64/64-1x8192 gdn-16/32-1x8192 gdn-16/32-1x32768 gdn-4/8-1x8192 --iters 30 | tail -5 | awk '{print $1, $4, $5}'
done
(cd "$OUT" && tar czf logs.tgz *.log && rm -f *.log)

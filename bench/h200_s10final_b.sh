#!/usr/bin/env bash
# bench/h200_s10final_b.sh: session 10's closing H200 call, part 2 (timings, all in this call):
#   1. the gdn anchors through auto (the overlapped T-form pair where it applies) against the
#      same pair with the overlap off (DELTARULE_CUDA_OVERLAP=off, session 9's launch);
#   2. every CUDA anchor through auto, flash-linear-attention 0.6.0 on every anchor and FlashQLA
#      0.1.3 on the gdn anchors (eager and graph replay), each in its own process, the o
#      cross-check between them, and the table (ours, fla, FlashQLA) last.
# Carry: .dev/pack .whl .fq
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
G="gdn-16/32-1x8192 gdn-16/32-1x32768 gdn-16/32-16x1024 gdn-16/32-256x64"
timeout 60 $B bench --backend cuda --shape gdn-16/32-1x8192 --iters 10 > /dev/null 2>&1
echo "== gdn: auto / overlap off"
for v in auto off; do
  DELTARULE_CUDA_OVERLAP=$v timeout 90 $B bench --backend cuda --shape $G --iters 30 2>&1 | grep -E "^gdn" | awk -v v=$v '{print v, $1, $4, $5}'
done
echo "== cuda + peers"
OURS_BACKENDS=cuda FLA_TIMEOUT=260 FQLA_TIMEOUT=200 timeout 500 bash bench/h200_cuda.sh bench 2>&1 | tee "$OUT/cuda_bench.txt" | tail -16
(cd "$OUT" && tar czf logs_b.tgz *.err *.jsonl 2>/dev/null; rm -f *.err)

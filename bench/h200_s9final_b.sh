#!/usr/bin/env bash
# bench/h200_s9final_b.sh: session 9's closing H200 call, part 2 (timings, all in this call):
#   1. the gdn anchors through auto (the T-form pass) against the session-8 wgmma pass
#      (DELTARULE_CUDA_STATE_BV=wg) and against per-thread o stores (PROBE 4096);
#   2. every CUDA anchor through auto, flash-linear-attention 0.6.0 on every anchor and FlashQLA
#      0.1.3 on the gdn anchors (eager and graph replay), each in its own process, the o
#      cross-check between them, and the table (ours, fla, FlashQLA) last.
# (No WGSL change this session: its numbers stay session 8's.) Carry: .dev/pack .whl .fq
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
G="gdn-16/32-1x8192 gdn-16/32-1x32768 gdn-16/32-16x1024 gdn-16/32-256x64"
timeout 60 $B bench --backend cuda --shape gdn-16/32-1x8192 --iters 10 > /dev/null 2>&1
echo "== gdn: auto (T-form) / BV=wg / PROBE 4096"
for v in auto wg p4096; do
  case $v in
    auto) env -u DELTARULE_CUDA_STATE_BV timeout 90 $B bench --backend cuda --shape $G --iters 30 ;;
    wg) DELTARULE_CUDA_STATE_BV=wg timeout 90 $B bench --backend cuda --shape $G --iters 30 ;;
    p4096) DELTARULE_CUDA_PROBE=4096 timeout 90 $B bench --backend cuda --shape $G --iters 30 ;;
  esac 2>&1 | grep -E "^gdn" | awk -v v=$v '{print v, $1, $4, $5}'
done
echo "== cuda + peers"
OURS_BACKENDS=cuda FLA_TIMEOUT=260 FQLA_TIMEOUT=200 timeout 520 bash bench/h200_cuda.sh bench 2>&1 | tee "$OUT/cuda_bench.txt" | tail -16
(cd "$OUT" && tar czf logs_b.tgz *.err *.jsonl 2>/dev/null; rm -f *.err)

#!/usr/bin/env bash
# bench/h200_s8final_b.sh: session 8's closing H200 call, part 2 (timings, all in this call):
#   1. the CUDA anchors through auto (`deltarule bench`, CUDA events, median, rotated inputs);
#   2. the WGSL targets on wgpu:coop and wgpu:chunked (Vulkan timestamps; a throwaway run first:
#      the first bench of a call can run at a low clock), with spread and the per-pass split;
#   3. flash-linear-attention 0.6.0 on every anchor and FlashQLA 0.1.3 on the gdn anchors
#      (eager and graph replay), each in its own process, and the o cross-check between them;
#   4. the table (ours, fla, FlashQLA) last.
# Carry: .dev/pack .gl .whl .fq
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
S="gdn-16/32-1x8192 kda-32/32-1x8192 gdn-16/32-16x1024"
timeout 60 $B bench --backend wgpu:coop --shape gdn-16/32-1x8192 --iters 10 > /dev/null 2>&1
echo "== wgpu"
timeout 120 $B bench --backend wgpu:coop wgpu:chunked --shape $S --iters 30 --json 2>/dev/null | python3 bench/wgpu_spread.py s8 | tee "$OUT/wgpu.txt"
timeout 90 $B bench --backend wgpu:coop --shape $S --iters 20 2>&1 | grep stages | tee -a "$OUT/wgpu.txt"
echo "== cuda + peers"
OURS_BACKENDS=cuda FLA_TIMEOUT=260 FQLA_TIMEOUT=200 timeout 560 bash bench/h200_cuda.sh bench 2>&1 | tee "$OUT/cuda_bench.txt" | tail -16
(cd "$OUT" && tar czf logs_b.tgz *.err *.jsonl 2>/dev/null; rm -f *.err)
echo "== wgpu (again)"; cat "$OUT/wgpu.txt"

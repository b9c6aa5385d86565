#!/usr/bin/env bash
# bench/h200_s22b.sh: session 22, closing call for issue 4, part 2: FlashQLA 0.1.3 (TileLang; eager
# and CUDA-graph replay) beside ours (auto) on the gdn prefill anchors in the same call, the o
# cross-check between them and the table (bench/h200_cuda.sh's bench part with fla left out: part
# 1, h200_s22a.sh, ran fla). FlashQLA compiles 20 to 45 s per shape on its first call; its timing
# starts after that warm-up.
# Carry: .dev/pack (bash bench/pack_s15.sh) .fq (bash bench/fq_pack.sh)
set -uo pipefail
source bench/h200_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
timeout 60 .dev/bin/deltarule bench --backend cuda --shape gdn-16/32-256x64 --iters 5 > /dev/null 2>&1
FLA=0 OURS_BACKENDS=cuda FQLA_TIMEOUT=400 timeout 540 bash bench/h200_cuda.sh bench 2>&1 | tee "$OUT/cuda_bench.txt" | tail -16
echo "== done at ${SECONDS}s"
(cd "$OUT" && tar czf logs_s22b.tgz *.err *.jsonl *.txt 2>/dev/null; rm -f *.err)

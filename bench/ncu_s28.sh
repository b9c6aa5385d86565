#!/usr/bin/env bash
# bench/ncu_s28.sh: session 28, why the persistent decode form (DELTARULE_CUDA_MODE=299393) is 9 %
# slower than the block-per-item kernel (37249) on the gdn decode anchor on the H100 while it is
# 11 % faster on the 256 x 4 verify shape: Nsight Compute of one launch of each form on the anchor
# (speed of light, memory, warp states, occupancy). Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
echo "ncu: ${NCU:-none}"
nvidia-smi --query-gpu=name --format=csv,noheader
for m in 37249 299393; do
  echo "== DELTARULE_CUDA_MODE=$m"
  DELTARULE_CUDA_MODE=$m timeout 150 $NCU -k regex:decode --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
    --section LaunchStats $B bench --backend cuda --shape gdn-decode-16/32-256x1 --iters 5 > "$OUT/ncu_$m.txt" 2>&1
  echo "rc=$?"
  grep -E "Duration|DRAM Throughput|Memory Throughput|Warp Cycles Per Issued|Stall|Achieved Occupancy|Registers Per|Block Limit|Theoretical Occ|dram__|L2 Hit|L1/TEX Hit|Mem Busy|Max Bandwidth|Waves" "$OUT/ncu_$m.txt" | head -40
done

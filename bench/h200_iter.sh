set -uo pipefail
source bench/h200_env.sh
B=./target/release/deltarule
for pr in 0 8 64 128 192; do printf "probe %-4s" $pr; DELTARULE_CUDA_PROBE=$pr $B bench --backend cuda:small-bh --shape gdn-16/32-1x8192 --iters 20 2>/dev/null | awk 'NR==2{print $4" ms"}'; done
$B bench --backend cuda:small-bh --shape gdn-16/32-1x8192 gdn-4/8-1x8192 kda-32/32-1x8192 gdn-16/32-16x1024 --iters 20 2>/dev/null
timeout 200 .dev/bin/cuda_device --test-threads=1 --nocapture small > $OUT/dev.log 2>&1; echo "device tests rc=$?"; grep -E " ran, |test result|panicked|FAIL" $OUT/dev.log | head -20
$B diff --case tests/golden/shared/*.safetensors --backend cuda:small-bh 2>&1 | tail -16

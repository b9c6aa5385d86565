set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
NV=$(python3 -c 'import nvidia.cu13, os; print(os.path.join(list(nvidia.cu13.__path__)[0], "lib"))' 2>/dev/null)
ldconfig -p | grep -q libnvrtc.so || export LD_LIBRARY_PATH=${NV:-}:${LD_LIBRARY_PATH:-}
export DELTARULE_CUDA_CACHE=/tmp/deltarule-cubin; mkdir -p $DELTARULE_CUDA_CACHE; cp .dev/cubin/*.cubin $DELTARULE_CUDA_CACHE/
export DELTARULE_REQUIRE_CUDA=1 DELTARULE_GOLDEN=$PWD/tests/golden/shared
B=./target/release/deltarule
for pr in 0 8 64 128 192; do printf "probe %-4s" $pr; DELTARULE_CUDA_PROBE=$pr $B bench --backend cuda:small-bh --shape gdn-16/32-1x8192 --iters 20 2>/dev/null | awk 'NR==2{print $4" ms"}'; done
$B bench --backend cuda:small-bh --shape gdn-16/32-1x8192 gdn-4/8-1x8192 kda-32/32-1x8192 gdn-16/32-16x1024 --iters 20 2>/dev/null
timeout 200 .dev/bin/cuda_device --test-threads=1 --nocapture small > $OUT/dev.log 2>&1; echo "device tests rc=$?"; grep -E " ran, |test result|panicked|FAIL" $OUT/dev.log | head -20
$B diff --case tests/golden/shared/*.safetensors --backend cuda:small-bh 2>&1 | tail -16

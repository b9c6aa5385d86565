#!/usr/bin/env bash
# bench/h200_final.sh PART: the closing H200 runs of issues 3 and 6, in two parts that each fit one
# device call (10 minutes). Carry: target/release/deltarule, .gl (Vulkan loader debs), .whl (the
# fla-core 0.6.0 wheel and the deltarule wheel built here with maturin), .dev/cubin-final.
#   part 1: fla timings of the two WGSL target shapes, then bench/h200_wgpu.sh (backends, golden
#           diff on wgpu, bench) and the golden diff on cuda, all in the same call;
#   part 2 (PYTEST_ARGS narrows it, e.g. -k 'not fla'): the Python package's CUDA tests (vs float64 and fla, opcheck, graph capture, compile,
#           inference-mode refill, pools, host time) and the Qwen3-Next layer example.
set -uo pipefail
PART=${1:-1}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site
if ! ldconfig -p | grep -q libnvrtc.so; then
  NV=$(python3 -c 'import nvidia.cu13, os; print(os.path.join(list(nvidia.cu13.__path__)[0], "lib"))' 2>/dev/null)
  export LD_LIBRARY_PATH=${NV:-}:${LD_LIBRARY_PATH:-}
fi
export DELTARULE_GOLDEN=$PWD/tests/golden/shared
# CUBINs compiled here (DELTARULE_PRECOMPILE=... cargo test -p deltarule-cuda --test kernels
# precompile), so device time is not spent in NVRTC
if [ -d .dev/cubin-final ]; then
  export DELTARULE_CUDA_CACHE=/tmp/deltarule-cubin
  mkdir -p "$DELTARULE_CUDA_CACHE" && cp -n .dev/cubin-final/*.cubin "$DELTARULE_CUDA_CACHE"/
fi
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader

if [[ $PART == 1 ]]; then
  echo "== fla 0.6.0 on the WGSL target shapes (same call)"
  timeout 240 python3 bench/fla_bench.py --shapes gdn-16/32-1x8192 kda-32/32-1x8192 \
    | tee "$OUT/fla_wgpu.jsonl"
  echo "== wgpu through NVIDIA's Vulkan driver"
  timeout 240 bash bench/h200_wgpu.sh > "$OUT/wgpu.log" 2>&1
  echo "wgpu script rc=$?"
  echo "== golden diff on cuda (final kernels)"
  ./target/release/deltarule diff --case tests/golden/shared/*.safetensors --backend cuda > "$OUT/diff_cuda.log" 2>&1
  echo "diff cuda rc=$?"
  grep -E "comparisons|FAIL" "$OUT/diff_cuda.log" | head -5
  echo "== wgpu log (tail)"
  tail -40 "$OUT/wgpu.log"
fi

if [[ $PART == 2 ]]; then
  echo "== python tests (torch $(python3 -c 'import torch; print(torch.__version__)'))"
  DELTARULE_PY_REPORT=$OUT/py_report.txt timeout 420 python3 -m pytest -q -p no:cacheprovider \
    -o addopts="" ${PYTEST_ARGS:-} python/tests > "$OUT/pytest.log" 2>&1
  echo "pytest rc=$?"
  grep -E "passed|failed|error|Error" "$OUT/pytest.log" | tail -15
  echo "== example"
  timeout 120 python3 python/examples/qwen3_next_layer.py 2>&1 | tee "$OUT/example.log" | tail -12
  echo "== report"
  cat "$OUT/py_report.txt" 2>/dev/null
fi

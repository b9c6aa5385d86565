#!/usr/bin/env bash
# bench/h200_s23py.sh: session 23, the Python package's CUDA tests on the tree that closes issue 4
# (ae5d95c's kernels; none ran from Python in sessions 21-22): python/tests whole (float64 and
# fla 0.6.0 comparisons, opcheck, graph capture with the T-form forced, compile, pools, host time),
# then the Qwen3-Next layer example.
# Carry: .dev/pack (binaries and CUBINs of the tree, bash bench/pack_s15.sh) .whl (the deltarule
# wheel built here by .ci/run's maturin step, and the fla-core 0.6.0 wheel)
set -uo pipefail
source bench/h200_env.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== graph capture, T-form forced (overlapped pair) at ${SECONDS}s"
DELTARULE_CUDA_STATE_BV=wgt DELTARULE_PY_REPORT=$OUT/py_graph.txt timeout 120 python3 -m pytest -q -p no:cacheprovider \
  -o addopts="" -k "graph or pool_rows or compile" python/tests/test_cuda.py > "$OUT/pytest_graph.log" 2>&1
echo "pytest rc=$?"; grep -E "passed|failed|Error" "$OUT/pytest_graph.log" | tail -5
echo "== python/tests whole through auto (torch $(python3 -c 'import torch; print(torch.__version__)')) at ${SECONDS}s"
DELTARULE_PY_REPORT=$OUT/py_report.txt timeout 330 python3 -m pytest -q -p no:cacheprovider \
  -o addopts="" python/tests > "$OUT/pytest.log" 2>&1
echo "pytest rc=$?"; grep -E "passed|failed|Error" "$OUT/pytest.log" | tail -10
echo "== example at ${SECONDS}s"
timeout 90 python3 python/examples/qwen3_next_layer.py 2>&1 | tee "$OUT/example.log" | tail -12
echo "== report"
cat "$OUT/py_graph.txt" "$OUT/py_report.txt" 2>/dev/null | tail -30
echo "done at ${SECONDS}s"

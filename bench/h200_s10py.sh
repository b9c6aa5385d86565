#!/usr/bin/env bash
# bench/h200_s10py.sh: session 10, the Python package's CUDA tests with the wheel of this tree:
# first the CUDA-graph capture/replay test with the T-form forced (DELTARULE_CUDA_STATE_BV=wgt: its
# gdn 4-head, 3-sequence problem then runs the overlapped pair, so the capture holds the
# programmatic-dependent launch), then test_cuda.py through auto without the fla comparisons.
# Carry: .dev/pack (CUBINs), .whl10 (the deltarule wheel built here with maturin)
set -uo pipefail
source bench/h200_env.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl10/*.whl \
  && export PYTHONPATH=/tmp/site
export PYTHONUNBUFFERED=1
echo "== graph capture, T-form forced (overlapped pair)"
DELTARULE_CUDA_STATE_BV=wgt DELTARULE_PY_REPORT=$OUT/py_graph.txt timeout 150 python3 -m pytest -q -p no:cacheprovider \
  -o addopts="" -k "graph or pool_rows or compile" python/tests/test_cuda.py > "$OUT/pytest_graph.log" 2>&1
echo "pytest rc=$?"; grep -E "passed|failed|Error" "$OUT/pytest_graph.log" | tail -5; cat "$OUT/py_graph.txt" 2>/dev/null | tail -8
echo "== test_cuda.py through auto (no fla)"
DELTARULE_PY_REPORT=$OUT/py_report.txt timeout 240 python3 -m pytest -q -p no:cacheprovider \
  -o addopts="" -k "not fla" python/tests/test_cuda.py > "$OUT/pytest.log" 2>&1
echo "pytest rc=$?"; grep -E "passed|failed|Error" "$OUT/pytest.log" | tail -8

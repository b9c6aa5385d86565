#!/usr/bin/env bash
# bench/h200_s6py.sh (session 6, after the closing call): the torch ops now take their workspace
# from PyTorch's caching allocator per call (the native side kept one per problem signature
# forever). The CUDA device tests (owned workspaces, unchanged path) and the Python package's GPU
# tests (fla comparisons deselected) on the wheel built from this tree. Carry: .dev/pack .whl
set -uo pipefail
source bench/h200_env.sh
timeout 120 .dev/bin/cuda_device --test-threads=1 --nocapture > "$OUT/dev.log" 2>&1; echo "device tests rc=$?"
grep -E " ran, |panicked|FAIL" "$OUT/dev.log" | head -12
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
DELTARULE_PY_REPORT=$OUT/py_report.txt timeout 150 python3 -m pytest -q -p no:cacheprovider -o addopts="" -k "not fla" python/tests > "$OUT/pytest.log" 2>&1
echo "pytest rc=$?"; grep -E "passed|failed|error|Error|assert" "$OUT/pytest.log" | tail -12
cat "$OUT/py_report.txt" 2>/dev/null | tail -6
(cd "$OUT" && tar czf logs.tgz *.log && rm -f *.log)

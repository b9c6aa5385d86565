#!/usr/bin/env bash
# bench/h200_s7py.sh (session 7): the Python wrappers' eager fast path (python/deltarule/ops.py,
# call_eager: no custom-op dispatch for plain CUDA tensors in eager mode). The package's GPU tests
# (fla comparisons deselected; a new test checks the fast path against the op bit for bit), then
# the host time split of bench/py_host_split.py; golden diffs first (the launch code changed:
# one launch_one for both parameter lists). Carry: .dev/pack .whl
set -uo pipefail
source bench/h200_env.sh
for b in cuda cuda:small-bh cuda:chunked; do
  timeout 60 .dev/bin/deltarule diff --case tests/golden/shared/*.safetensors --backend $b > "$OUT/diff.log" 2>&1
  echo "diff $b rc=$? $(tail -1 "$OUT/diff.log")"
done
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
DELTARULE_PY_REPORT=$OUT/py_report.txt timeout 150 python3 -m pytest -q -p no:cacheprovider -o addopts="" -k "not fla" python/tests > "$OUT/pytest.log" 2>&1
echo "pytest rc=$?"; grep -E "passed|failed|error|Error" "$OUT/pytest.log" | tail -8
grep -E "^time|graph replay" "$OUT/py_report.txt"
timeout 120 python3 bench/py_host_split.py 2>&1 | tail -6

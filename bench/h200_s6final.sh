#!/usr/bin/env bash
# bench/h200_s6final.sh: session 6's closing H200 call:
#   1. bench/h200_cuda.sh all (CUDA device tests, conformance through auto, golden diffs on cuda,
#      cuda:chunked and cuda:small-bh, memcheck, the anchor shapes on every CUDA kernel next to
#      flash-linear-attention 0.6.0 in the same call) and the golden errors of the diffs;
#   2. many-pair shapes through auto (small-bh with 64-column state tiles since this session)
#      against cuda:chunked;
#   3. the Python package's tests on the GPU (the wheel built from this tree; fla comparisons
#      deselected: fla's kda autotuning alone takes minutes).
# (No WGSL change this session.) Carry: .dev/pack .whl
set -uo pipefail
source bench/h200_env.sh
echo "== cuda"
TEST_TIMEOUT=200 SAN_TIMEOUT=150 timeout 420 bash bench/h200_cuda.sh all; echo "h200_cuda.sh rc=$?"
echo "== golden errors (relative L2 against float64)"
grep -E "^###| expected " "$OUT/diff.log" | awk '{print $1, $2, $4, $6, $NF}' | head -40
echo "== many pairs: auto against chunked"
.dev/bin/deltarule bench --backend cuda cuda:chunked --shape gdn-16/32-64x256 gdn-16/32-128x128 kda-32/32-16x1024 kda-32/32-64x256 --iters 20 2>&1 | grep -v '^\s*$' | grep -v generating | awk '{print $1, $2, $3, $4, $5}'
echo "== python tests (torch $(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null))"
export PYTHONPATH=/tmp/site
DELTARULE_PY_REPORT=$OUT/py_report.txt timeout 150 python3 -m pytest -q -p no:cacheprovider -o addopts="" -k "not fla" python/tests > "$OUT/pytest.log" 2>&1
echo "pytest rc=$?"; grep -E "passed|failed|error|Error" "$OUT/pytest.log" | tail -8
cat "$OUT/py_report.txt" 2>/dev/null | head -20
(cd "$OUT" && tar czf logs.tgz *.log *.err *.jsonl 2>/dev/null; rm -f *.log *.err *.jsonl)

#!/usr/bin/env bash
# bench/h200_s7final.sh: session 7's closing H200 call (the wgmma state pass through auto):
#   1. bench/h200_cuda.sh all (CUDA device tests, conformance through auto, golden diffs on cuda,
#      cuda:chunked and cuda:small-bh, memcheck, the anchor shapes on every CUDA kernel next to
#      flash-linear-attention 0.6.0 in the same call) and the golden errors of the diffs;
#   2. the state passes side by side on the anchor shapes: auto (the wgmma pass, or the
#      16-column mma.sync pass for few pairs) against the mma.sync pass forced to 32 columns;
#   3. the Python package's tests on the GPU (the wheel built from this tree; fla comparisons
#      deselected: fla's kda autotuning alone takes minutes).
# (No WGSL change this session.) Carry: .dev/pack .whl
set -uo pipefail
source bench/h200_env.sh
echo "== cuda"
TEST_TIMEOUT=200 SAN_TIMEOUT=150 timeout 420 bash bench/h200_cuda.sh all 2>&1 | tee "$OUT/cuda_all.txt"; echo "h200_cuda.sh rc=${PIPESTATUS[0]}"
echo "== golden errors (relative L2 against float64)"
grep -E "^###| expected " "$OUT/diff.log" | awk '{print $1, $2, $4, $6, $NF}' | head -40
echo "== state passes: auto against the mma.sync pass (BV=32)"
for bv in auto 32; do
  if [[ $bv == auto ]]; then unset DELTARULE_CUDA_STATE_BV; else export DELTARULE_CUDA_STATE_BV=$bv; fi
  echo "BV=$bv"
  .dev/bin/deltarule bench --backend cuda --shape gdn-16/32-1x8192 gdn-16/32-1x32768 gdn-16/32-16x1024 gdn-16/32-256x64 kda-32/32-1x8192 kda-64/64-1x8192 --iters 30 2>&1 | grep -v '^\s*$' | grep -v generating | tail -6 | awk '{print $1, $3, $4, $5}'
done
unset DELTARULE_CUDA_STATE_BV
echo "== python tests (torch $(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null))"
export PYTHONPATH=/tmp/site
DELTARULE_PY_REPORT=$OUT/py_report.txt timeout 150 python3 -m pytest -q -p no:cacheprovider -o addopts="" -k "not fla" python/tests > "$OUT/pytest.log" 2>&1
echo "pytest rc=$?"; grep -E "passed|failed|error|Error" "$OUT/pytest.log" | tail -8
cat "$OUT/py_report.txt" 2>/dev/null | head -20
(cd "$OUT" && tar czf logs.tgz *.log *.err *.jsonl 2>/dev/null; rm -f *.log *.err *.jsonl)
echo "== table (from part 1)"; sed -n '/^shape /,$p' "$OUT/cuda_all.txt" | head -30

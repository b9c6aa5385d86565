#!/usr/bin/env bash
# bench/h200_s24.sh: session 24's closing call for issue 4. The decode anchor now moves all 256
# states (bench.rs `every_sequence_active`; until this session the generator's pool map left
# every fourth sequence at index -1, so ours was timed on 192 states and fla on 256):
#   1. bench/h200_s22a.sh whole: device tests, conformance `cuda::`, golden diffs, sanitizers,
#      reruns, then ours and fla 0.6.0 on the anchors in the same call and the table;
#   2. the copy floor of the decode anchor's 1.07 GB (bench/copy_floor.py);
#   3. eager against CUDA-graph replay through the Python wrappers (bench/py_graph_vs_eager.py).
# Carry: .dev/pack (bash bench/pack_s15.sh) .whl (fla 0.6.0 and the deltarule wheel)
# H200_ONLY=1 exits at once on another GPU. QUICK=1 skips part 1's correctness checks (run on an H100 earlier in session 24 on the same
# kernels) and runs only its anchors, ours then fla (FLA_SHAPES="a b": only those of fla's).
set -uo pipefail
# H200_ONLY=1: exit at once on any other GPU (the targets are H200 times; an H100 run of this
# script has been made in sessions 24 and 26)
if [ "${H200_ONLY:-0}" = 1 ]; then
  name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  case "$name" in *H200*) ;; *) echo "$name: not an H200, nothing run"; exit 0 ;; esac
fi
if [ "${QUICK:-0}" = 1 ]; then
  source bench/h200_env.sh
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  B=.dev/bin/deltarule
  timeout 60 $B bench --backend cuda --shape gdn-16/32-256x64 --iters 5 > /dev/null 2>&1
  timeout 100 $B bench --backend cuda --shape anchors --iters 30 --json > "$OUT/ours.jsonl" 2> "$OUT/ours.err"
  echo "ours rc=$? at ${SECONDS}s"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
  PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 timeout $((${FLA_END:-400} - SECONDS)) python3 bench/fla_bench.py ${FLA_SHAPES:+--shapes $FLA_SHAPES} > "$OUT/fla.jsonl" 2> "$OUT/fla.err"
  echo "fla rc=$? at ${SECONDS}s"; tail -2 "$OUT/fla.err"
  python3 bench/anchor_table.py "$OUT/ours.jsonl" "$OUT/fla.jsonl"
else
  bash bench/h200_s22a.sh
  source bench/h200_env.sh
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2> /dev/null
export PYTHONPATH=/tmp/site
echo "== copy floor at ${SECONDS}s"
timeout 60 python3 bench/copy_floor.py
echo "== eager vs graph at ${SECONDS}s"
timeout 90 python3 bench/py_graph_vs_eager.py
echo "rc=$? done at ${SECONDS}s"
echo "== python GPU tests (graph capture, max_seqlen, workspace) at ${SECONDS}s"
DELTARULE_PY_REPORT=$OUT/py_s24.txt timeout 150 python3 -m pytest -q -p no:cacheprovider -o addopts="" -k "graph or max_seqlen or workspace" python/tests/test_cuda.py > "$OUT/pytest_s24.log" 2>&1
echo "pytest rc=$?"; grep -E "passed|failed|Error" "$OUT/pytest_s24.log" | tail -8; cat "$OUT/py_s24.txt" 2>/dev/null
echo "== done at ${SECONDS}s"

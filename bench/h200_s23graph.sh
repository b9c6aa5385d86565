#!/usr/bin/env bash
# bench/h200_s23graph.sh: session 23, issue 4's "eager within 10 % of graph replay" goal measured
# through the Python wrappers (bench/py_graph_vs_eager.py) on the anchor shapes, then the CLI's
# anchors in the same call for the same tree.
# Carry: .dev/pack .whl
set -uo pipefail
source bench/h200_env.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/deltarule-*.whl \
  && export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 240 python3 bench/py_graph_vs_eager.py
echo "rc=$? at ${SECONDS}s"
timeout 120 .dev/bin/deltarule bench --backend cuda --shape anchors --iters 30 2>&1 | grep -v "generating" | tail -10
echo "done at ${SECONDS}s"

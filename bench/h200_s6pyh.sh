#!/usr/bin/env bash
# bench/h200_s6pyh.sh (session 6): where the torch op's host time per call goes after the
# workspace moved to PyTorch's allocator (bench/py_host_split.py). Carry: .dev/pack .whl
set -uo pipefail
source bench/h200_env.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
timeout 120 python3 bench/py_host_split.py 2>&1 | tail -5

#!/usr/bin/env bash
# bench/s31_any.sh: session 31's call on whatever GPU comes. On an H200: bench/s31_h200.sh (the
# closing call of issue 4, then the decode forms). On another GPU: bench/sm_probe.py, the decode
# forms' memory-level parallelism with 41 of 132 SMs held (a proxy for the H200's bandwidth).
# Carry: .dev/pack .whl
set -uo pipefail
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$name" in
  *H200*) exec bash bench/s31_h200.sh ;;
esac
source bench/h200_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2> /dev/null
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
timeout ${LIMIT:-540} python3 bench/sm_probe.py --stop ${STOP:-380} "$@"
echo "== done at ${SECONDS}s"

#!/usr/bin/env bash
# bench/h200_s23host.sh: session 23, where the Python wrappers' host time goes on the final tree
# (h200_s23py.sh's timing test printed 96-99 us a call through the eager fast path, 162-171 us
# through the torch op, against session 7's 47.7 / 80.1 us at 1x512) and whether the torch path
# selects the fused kernel at 256x64 through the max_seq hint (never run on a GPU before): the
# split of bench/py_host_split.py, then the CLI's numbers for the same shapes in the same call.
# Carry: .dev/pack .whl
set -uo pipefail
source bench/h200_env.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/deltarule-*.whl \
  && export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lscpu | grep -E "Model name|^CPU\(s\)|MHz" | head -4
B=.dev/bin/deltarule
for r in 1; do echo "== split, round $r"; timeout 120 python3 bench/py_host_split.py; done
echo "== CLI"
for s in gdn-16/32-1x512 gdn-16/32-1x8192 gdn-16/32-256x64; do
  timeout 60 $B bench --backend cuda --shape $s --iters 30 2>&1 | grep -v "^$" | tail -4
done
echo "== CLI, 256x64 in the split's state layout (vk), rotated and not"
timeout 60 $B bench --backend cuda --op gdn --seqs 256 --seqlens $(python3 -c 'print(",".join(["64"]*256))') \
  --heads 16 --v-heads 32 --layout vk --initial-state dense --final-state dense --out-dtype bf16 --iters 30 2>&1 | grep -v "^$" | tail -2
timeout 60 $B bench --backend cuda --op gdn --seqs 256 --seqlens $(python3 -c 'print(",".join(["64"]*256))') \
  --heads 16 --v-heads 32 --layout vk --initial-state dense --final-state dense --out-dtype bf16 --iters 30 --rotate-mib 0 2>&1 | grep -v "^$" | tail -2
echo "done at ${SECONDS}s"

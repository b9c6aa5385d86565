#!/usr/bin/env bash
# bench/h200_s26d.sh: a decode diff of 70000 sequences (any GPU), then the decode target of issue 4
# on an H200 only (exits on another GPU, so that a lent H100 costs no more device time): the decode anchors through `deltarule bench`,
# fla 0.6.0's decode anchor (bench/fla_bench.py) and the table, the copy floor of the 1.07 GB and
# the wrapper beside fla's fused_recurrent on the same inputs (bench/py_decode_ab.py).
# Carry: .dev/pack (bash bench/pack_s15.sh) .whl (fla 0.6.0 and the deltarule wheel)
set -uo pipefail
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "$name"
source bench/h200_env.sh
B=.dev/bin/deltarule
# on any GPU: more sequences than a 3-D grid's z holds (the recurrence's 1-D grid, session 26)
timeout 120 $B diff --op gdn --mode decode --seqs 70000 --tokens 70000 --heads 1 --v-heads 1 --head-dim 32 --initial-state pool --backend cuda:recurrent > "$OUT/wide.log" 2>&1
echo "gdn decode 70000 x 1 token, K = V = 32, pool: rc=$? $(tail -1 "$OUT/wide.log")"; grep -E ' (o|final_state) ' "$OUT/wide.log" | awk '{print $4, $6, $NF}'
case "$name" in *H200*) ;; *) echo "not an H200: the decode target not run"; exit 0 ;; esac
timeout 60 $B bench --backend cuda --shape gdn-decode-16/32-256x1 kda-decode-32/32-256x1 --iters 100 --json > "$OUT/ours.jsonl" 2> "$OUT/ours.err"
echo "ours rc=$?"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2> /dev/null
export PYTHONPATH=/tmp/site
timeout 120 python3 bench/fla_bench.py --shapes gdn-decode-16/32-256x1 > "$OUT/fla.jsonl" 2> "$OUT/fla.err"
echo "fla rc=$?"; python3 bench/anchor_table.py "$OUT/ours.jsonl" "$OUT/fla.jsonl"
timeout 60 python3 bench/copy_floor.py
timeout 120 python3 bench/py_decode_ab.py --label h200 --copy --fla 2>&1 | grep -v Warning | tail -4
echo "== done at ${SECONDS}s"

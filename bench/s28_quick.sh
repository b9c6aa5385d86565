#!/usr/bin/env bash
# bench/s28_quick.sh: session 28, the persistent decode form with its pool indices by cp.async,
# short (~90 s, for a call with little device time left), any GPU: device tests `recurrent_`, the
# persistent form's decode diffs (both layouts), memcheck of one, then the default and the
# persistent form on the decode anchors and the 256 x 4 verify shape, and the copy floor.
# Carry: .dev/pack .whl
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
D=37249; PM=$((D | 262144))
timeout 100 .dev/bin/cuda_device --test-threads=1 --nocapture recurrent_ > "$OUT/dev.log" 2>&1
echo "device tests recurrent_ rc=$? $(grep -E '^test result' "$OUT/dev.log" | tail -1)"
SEQ=$(python3 -c "import random; random.seed(1); print(','.join(str(random.choice([0, 1, 1, 2, 3])) for _ in range(1500)))")
export DELTARULE_CUDA_MODE=$PM
for l in kv vk; do
  timeout 60 $B diff --op kda --mode decode --seqlens "$SEQ" --heads 4 --v-heads 4 --layout $l --state-dtype bf16 --initial-state pool --checkpoint-every 1 --backend cuda:recurrent > "$OUT/d$l.log" 2>&1
  echo "persistent kda varlen 0-3 pool $l bf16 ckpt1 rc=$? $(tail -1 "$OUT/d$l.log")"
done
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 $B diff --op gdn --mode decode --layout kv --seqs 600 --tokens 1200 --heads 2 --v-heads 2 --initial-state pool --checkpoint-every 3 --backend cuda:recurrent > "$OUT/mc.log" 2>&1
echo "persistent memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/mc.log" | tail -1)"
S4=$(python3 -c "print(','.join(['4'] * 256))")
for v in $D $PM $D $PM; do
  export DELTARULE_CUDA_MODE=$v
  timeout 60 $B bench --backend cuda --shape gdn-decode-16/32-256x1 kda-decode-32/32-256x1 --iters 100 --json > "$OUT/b.jsonl" 2> "$OUT/b.err"
  timeout 60 $B bench --backend cuda --op gdn --mode decode --seqlens "$S4" --heads 16 --v-heads 32 --initial-state pool --iters 100 --json >> "$OUT/b.jsonl" 2>> "$OUT/b.err"
  python3 bench/bench_rows.py "$v" "$OUT/b.jsonl" | cut -c1-160
done
unset DELTARULE_CUDA_MODE
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2> /dev/null
PYTHONPATH=/tmp/site timeout 60 python3 bench/copy_floor.py
echo "== done at ${SECONDS}s"

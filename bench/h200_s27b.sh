#!/usr/bin/env bash
# bench/h200_s27b.sh: session 27, the persistent form of the token recurrence (`{op}_decode_persistent`,
# DELTARULE_CUDA_MODE=37249|262144: 4 blocks an SM walking the items, the next item's state tile in
# flight into shared memory by cp.async) against the default block-per-item kernel, on any GPU:
#   1. correctness: the device tests `recurrent_` (the generated suite, many-items decode problems,
#      every entry point bit-equal to the default), decode diffs with the persistent form (1200 x 1
#      pool, varlen 0-3 tokens with bf16 state and checkpoints, K = V = 64 f16 dense, both layouts),
#      memcheck and racecheck of it (kv and vk, gdn and kda, several tokens, more items than blocks);
#   2. `deltarule bench`, default / persistent / 6-block form, twice interleaved: the decode anchors
#      and a verify shape (256 sequences x 4 tokens); the copy floor of the decode anchor.
# On an H200 the device tests and the sanitizers are left out (the call's 10 minutes), and the
# closing call follows: bench/h200_s24.sh whole, with DELTARULE_CUDA_MODE set to the persistent
# form when its five diffs passed and it timed faster than the default on the gdn decode anchor
# (so the closing call's device tests, conformance, sanitizers and Python tests run it: the same
# kernels and host path that a default of 299393 would run), else with the default.
# Carry: .dev/pack (bash bench/pack_s15.sh) .whl (fla 0.6.0 and the deltarule wheel)
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
D=37249; PM=$((D | 262144))
h200=0; case "$name" in *H200*) h200=1 ;; esac
last() { tail -1 "$1" | tr -s ' '; }
pok=1 # every diff of the persistent form passed
ok() { [ "$1" = 0 ] || pok=0; }
echo "== correctness at ${SECONDS}s"
if [ $h200 = 0 ]; then
  timeout 200 .dev/bin/cuda_device --test-threads=1 --nocapture recurrent_ > "$OUT/dev.log" 2>&1
  echo "device tests recurrent_ rc=$? $(grep -E '^test result' "$OUT/dev.log" | tail -1)"
  grep -E "many-items errors|DELTARULE_CUDA_MODE=.* ran" "$OUT/dev.log" | cut -c1-220
fi
SEQ=$(python3 -c "import random; random.seed(1); print(','.join(str(random.choice([0, 1, 1, 2, 3])) for _ in range(1500)))")
export DELTARULE_CUDA_MODE=$PM
timeout 90 $B diff --op gdn --mode decode --seqs 1200 --tokens 1200 --heads 4 --v-heads 8 --initial-state pool --backend cuda:recurrent > "$OUT/d1.log" 2>&1
rc=$?; ok $rc; echo "persistent gdn 1200x1 pool kv f32 rc=$rc $(last "$OUT/d1.log")"
for l in kv vk; do
  timeout 90 $B diff --op kda --mode decode --seqlens "$SEQ" --heads 4 --v-heads 4 --layout $l --state-dtype bf16 --initial-state pool --checkpoint-every 1 --backend cuda:recurrent > "$OUT/d2$l.log" 2>&1
  rc=$?; ok $rc; echo "persistent kda varlen 0-3 pool $l bf16 ckpt1 rc=$rc $(last "$OUT/d2$l.log")"
  timeout 90 $B diff --op gdn --mode decode --seqlens "$SEQ" --heads 2 --v-heads 8 --head-dim 64 --layout $l --initial-state dense --final-state dense --checkpoint-every 2 --state-dtype f16 --l2norm --backend cuda:recurrent > "$OUT/d3$l.log" 2>&1
  rc=$?; ok $rc; echo "persistent gdn K64 varlen dense $l f16 ckpt2 l2norm rc=$rc $(last "$OUT/d3$l.log")"
done
SAN=("gdn kv 100 240" "kda vk 40 200" "gdn kv 600 1200" "kda vk 600 1000"); [ $h200 = 1 ] && SAN=()
for c in "${SAN[@]}"; do
  set -- $c
  S="--op $1 --mode decode --layout $2 --seqs $3 --tokens $4 --heads 2 --v-heads 2 --initial-state pool --checkpoint-every 3 --backend cuda:recurrent"
  timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 $B diff $S > "$OUT/mc.log" 2>&1
  m="memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/mc.log" | tail -1 | sed 's/=* //')"
  timeout 90 compute-sanitizer --tool racecheck --error-exitcode 9 $B diff $S > "$OUT/race.log" 2>&1
  echo "persistent [$c] $m; racecheck rc=$? $(grep -E 'RACECHECK SUMMARY' "$OUT/race.log" | tail -1 | sed 's/=* //') | $(last "$OUT/race.log")"
done
unset DELTARULE_CUDA_MODE
echo "== bench at ${SECONDS}s"
declare -A M=([lb4]=$D [pers]=$PM [lb6]=$((D | 65536)))
S4=$(python3 -c "print(','.join(['4'] * 256))")
# (an H200: one round of the default and the persistent form, so that the closing call after
# them fits the call's 10 minutes)
ROUNDS="1 2"; FORMS="lb4 pers lb6"; [ $h200 = 1 ] && ROUNDS=1 && FORMS="lb4 pers"
for r in $ROUNDS; do
  for v in $FORMS; do
    export DELTARULE_CUDA_MODE=${M[$v]}
    timeout 60 $B bench --backend cuda --shape gdn-decode-16/32-256x1 kda-decode-32/32-256x1 --iters 100 --json > "$OUT/b.jsonl" 2> "$OUT/b.err"
    timeout 60 $B bench --backend cuda --op gdn --mode decode --seqlens "$S4" --heads 16 --v-heads 32 --initial-state pool --iters 100 --json >> "$OUT/b.jsonl" 2>> "$OUT/b.err"
    python3 bench/bench_rows.py "$v" "$OUT/b.jsonl" | cut -c1-160
    cat "$OUT/b.jsonl" >> "$OUT/b_$v.jsonl"
  done
done
# the closing call's form: the persistent one if every diff of it passed and its median gdn decode
# anchor time (the median over the rounds) is below the default's
faster=$(python3 bench/bench_rows.py --faster gdn-decode-16/32-256x1 "$OUT/b_pers.jsonl" "$OUT/b_lb4.jsonl")
echo "persistent diffs all passed: $pok; persistent faster on the gdn decode anchor: $faster"
unset DELTARULE_CUDA_MODE
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2> /dev/null
PYTHONPATH=/tmp/site timeout 60 python3 bench/copy_floor.py
echo "== done at ${SECONDS}s"
(cd "$OUT" && tar czf logs_s27b.tgz *.log *.jsonl *.err 2>/dev/null; rm -f *.log *.err *.jsonl)
if [ $h200 = 1 ]; then
  if [ $pok = 1 ] && [ "$faster" = yes ]; then export DELTARULE_CUDA_MODE=$PM; fi
  echo "== the closing call with DELTARULE_CUDA_MODE=${DELTARULE_CUDA_MODE:-unset (the default, $D)}"
  H200_ONLY=1 bash bench/h200_s24.sh
else echo "$name: not an H200, the closing call not run"; fi

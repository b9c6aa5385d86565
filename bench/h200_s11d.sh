#!/usr/bin/env bash
# bench/h200_s11d.sh: session 11, closing call (the tree as committed): the W/U intra kernel's
# race fixed (a barrier between gdn_xqk's reads of Tmp and the V stores that overlap it), few-pair
# gdn through the overlapped T-form pair. Racecheck and the failing problems of s11b/s11c on every
# state pass and on cuda:chunked; device tests (each state pass forced on the small-bh tests, a
# new gdn 4/8 long-sequence test), conformance and golden diffs through auto (no memcheck: the
# kernels are session 10's but one barrier); every CUDA anchor through auto; fla on gdn 4/8 and 16/32 1x8192 in the same call.
# Carry: .dev/pack .whl
set -uo pipefail
source bench/h200_env.sh
source bench/h200_lib.sh
B=.dev/bin/deltarule
P2="--op gdn --seqlens 0,64,700,1,0,129,3000 --heads 4 --v-heads 8 --initial-state dense --seed 8"
P3="--op gdn --seqlens 3000 --heads 4 --v-heads 8 --seed 8"
P1="--op gdn --tokens 8192 --seqs 1 --heads 4 --v-heads 8 --l2norm --initial-state dense --checkpoint-every 1024 --seed 7"
echo "== racecheck, 16-column pass forced, gdn 4/8 one sequence of 3000 tokens"
DELTARULE_CUDA_STATE_BV=16 timeout 100 compute-sanitizer --tool racecheck --racecheck-report hazard --print-limit 5 $B diff $P3 --backend cuda:small-bh > "$OUT/race.log" 2>&1
echo "racecheck rc=$? $(grep -E 'RACECHECK SUMMARY' "$OUT/race.log")"; grep -m4 -E "hazard detected|prefill.cuh" "$OUT/race.log"
echo "== generated gdn 4/8 problems on each pass (o, final state[, checkpoints] against float64)"
run() {  # name, env, backend, problem
  env $2 timeout 60 $B diff $4 --backend $3 > "$OUT/$1.log" 2>&1
  echo "$1 [$2 $3] rc=$? $(grep -E ' (o|final_state|checkpoints) +f64' "$OUT/$1.log" | awk '{print $4, $6}' | tr '\n' ' ')"
}
for bv in 16 32 64 wg; do run "p2_$bv" DELTARULE_CUDA_STATE_BV=$bv cuda:small-bh "$P2"; done
run p2_chunked X=1 cuda:chunked "$P2"
run p2_auto X=1 cuda "$P2"
run p1_16 DELTARULE_CUDA_STATE_BV=16 cuda:small-bh "$P1"
run p1_auto X=1 cuda "$P1"
echo "== cuda checks through auto (no memcheck: session 10's kernels but one barrier)"
DEV_TIMEOUT=200 cuda_checks 0
grep -E "overlap errors|gva long|STATE_BV=(16|wg|wgt)" "$OUT/dev.log" | head -16
echo "== timings (median GPU ms, host us)"
timeout 60 $B bench --backend cuda --shape gdn-16/32-1x8192 --iters 10 > /dev/null 2>&1
timeout 120 $B bench --backend cuda --shape gdn-16/32-1x8192 gdn-16/32-1x32768 gdn-16/32-16x1024 gdn-16/32-256x64 gdn-4/8-1x8192 kda-32/32-1x8192 kda-64/64-1x8192 gdn-decode-16/32-256x1 --iters 30 2>&1 | grep -E "^(gdn|kda)" | awk '{print "ours", $1, $4, $5}'
DELTARULE_CUDA_STATE_BV=16 timeout 60 $B bench --backend cuda --shape gdn-4/8-1x8192 --iters 30 2>&1 | grep -E "^gdn" | awk '{print "16-col", $1, $4, $5}'
echo "== fla (same call)"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/fla_core*.whl && export PYTHONPATH=/tmp/site
PYTHONUNBUFFERED=1 timeout 100 python3 bench/fla_bench.py --shapes gdn-4/8-1x8192 gdn-16/32-1x8192 > "$OUT/fla.jsonl" 2> "$OUT/fla.err"; echo "fla rc=$?"
cat "$OUT/fla.jsonl"
(cd "$OUT" && tar czf logs_d.tgz *.log 2>/dev/null; rm -f *.log)

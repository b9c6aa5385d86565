#!/usr/bin/env bash
# bench/h200_s11b.sh: session 11, call 3 (kernels as session 10's): `auto` sends few-pair gdn
# (16-column tiles before) to the overlapped T-form pair. Correctness: the fixed device test of
# the overlapped pair, conformance through auto (small gdn problems now take the pair), generated
# gdn 4/8 problems against float64 (auto vs the 16-column pass forced). Timings: gdn 4/8 at
# several lengths, auto vs STATE_BV=16 in two alternating rounds; the freeing share at 1x32768;
# fla on gdn 4/8 and 16/32 1x8192 in the same call. Carry: .dev/pack .whl
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
echo "== device test: overlapped pair through auto"
timeout 90 .dev/bin/cuda_device --test-threads=1 --nocapture overlapped_pair_through_auto > "$OUT/ov.log" 2>&1; echo "rc=$?"
grep -E "overlap errors|test result" "$OUT/ov.log" | head -3
echo "== conformance through auto"
timeout 90 .dev/bin/conformance --test-threads=1 --nocapture cuda:: > "$OUT/conf.log" 2>&1; echo "rc=$?"
grep -E " ran, " "$OUT/conf.log"
for b in cuda cuda:small-bh; do
  timeout 40 $B diff --case tests/golden/shared/*.safetensors --backend $b > "$OUT/diff_${b/:/_}.log" 2>&1
  echo "diff $b rc=$? $(tail -1 "$OUT/diff_${b/:/_}.log")"
done
echo "== generated gdn 4/8 (relative L2 against float64: o, final state[, checkpoints])"
P1="--op gdn --tokens 8192 --seqs 1 --heads 4 --v-heads 8 --l2norm --initial-state dense --checkpoint-every 1024 --seed 7"
P2="--op gdn --seqlens 0,64,700,1,0,129,3000 --heads 4 --v-heads 8 --initial-state dense --seed 8"
for bv in auto 16; do
  i=0
  for P in "$P1" "$P2"; do
    i=$((i+1))
    if [[ $bv == auto ]]; then E=""; else E="DELTARULE_CUDA_STATE_BV=$bv"; fi
    env $E timeout 60 $B diff $P --backend cuda > "$OUT/g_${bv}_$i.log" 2>&1
    echo "bv=$bv P$i rc=$? $(grep -E ' (o|final_state|checkpoints) +f64' "$OUT/g_${bv}_$i.log" | awk '{print $4, $6, $3}' | tr '\n' ' ')"
  done
done
echo "== timings (median GPU ms, host us)"
S="gdn-4/8-1x8192 gdn-4/8-1x512 gdn-4/8-1x2048 gdn-4/8-1x32768 gdn-4/8-4x2048"
timeout 60 $B bench --backend cuda --shape gdn-4/8-1x8192 --iters 10 > /dev/null 2>&1
for round in 1 2; do
  for bv in auto 16; do
    if [[ $bv == auto ]]; then E=""; else E="DELTARULE_CUDA_STATE_BV=$bv"; fi
    env $E timeout 90 $B bench --backend cuda --shape $S --iters 30 2>&1 | grep -E "^gdn" | awk -v v=$bv -v r=$round '{print r, v, $1, $4, $5}'
  done
done
for v in auto 55 60; do
  DELTARULE_CUDA_OVERLAP=$v timeout 90 $B bench --backend cuda --shape gdn-16/32-1x32768 gdn-16/32-1x8192 --iters 30 2>&1 | grep -E "^gdn" | awk -v v=$v '{print "share", v, $1, $4, $5}'
done
echo "== fla (same call)"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/fla_core*.whl && export PYTHONPATH=/tmp/site
PYTHONUNBUFFERED=1 timeout 150 python3 bench/fla_bench.py --shapes gdn-4/8-1x8192 gdn-16/32-1x8192 > "$OUT/fla.jsonl" 2> "$OUT/fla.err"; echo "fla rc=$?"
cat "$OUT/fla.jsonl"
(cd "$OUT" && tar czf logs_b.tgz *.log *.err 2>/dev/null; rm -f *.log)

#!/usr/bin/env bash
# bench/h200_s26a.sh: session 26, the decode kernel after session 25's experiments (kernels/
# decode.cuh back to a block per item, now on a 1-D grid; production entry point with 80 registers
# and 5 blocks an SM; DELTARULE_CUDA_MODE bits DEC_LB6 65536 = session 24's 64 registers and 6
# blocks, DEC_LB4 131072 = 96 registers and 4 blocks, on top of the default 37249):
#   1. correctness of every variant: the device test recurrent_conformance and three diffs through
#      cuda:recurrent (gdn 1200 x 1 token pool; kda varlen 0-3 tokens vk bf16 state with
#      checkpoints; gdn K = V = 64 f16 dense state checkpoints);
#   2. memcheck of the default; racecheck of the default in both layouts and of DEC_LB6 in kv
#      (session 25 saw hazards in kv, whose state warps meet at a partial named barrier that the
#      tool has misread before: NOTES sessions 11 and 19; vk has none);
#   3. `deltarule bench` of the decode anchors per variant, the anchor through the Python wrapper
#      with the copy floor and fla's fused_recurrent on the same inputs, ncu DRAM figures.
# Carry: .dev/pack (bash bench/pack_s15.sh) .whl (fla 0.6.0 and the deltarule wheel)
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
D=37249
declare -A M=([lb5]=$D [lb6]=$((D | 65536)) [lb4]=$((D | 131072)))
ORDER=${ORDER:-"lb5 lb6 lb4"}
SEQ=$(python3 -c "import random; random.seed(1); print(','.join(str(random.choice([0, 1, 1, 2, 3])) for _ in range(1500)))")
last() { tail -1 "$1" | tr -s ' '; }
echo "== correctness per variant at ${SECONDS}s"
for v in $ORDER; do
  export DELTARULE_CUDA_MODE=${M[$v]}
  timeout 60 .dev/bin/cuda_device --test-threads=1 --nocapture recurrent_conformance > "$OUT/rc_$v.log" 2>&1
  echo "$v ($DELTARULE_CUDA_MODE): device recurrent_conformance rc=$? $(grep -E ' ran, ' "$OUT/rc_$v.log" | tr -s ' ' | head -2 | tr '\n' ' ')"
  timeout 90 $B diff --op gdn --mode decode --seqs 1200 --tokens 1200 --heads 4 --v-heads 8 --initial-state pool --backend cuda:recurrent > "$OUT/d1_$v.log" 2>&1
  echo "  gdn 1200x1 pool kv f32 rc=$? $(last "$OUT/d1_$v.log")"
  timeout 90 $B diff --op kda --mode decode --seqlens "$SEQ" --heads 4 --v-heads 4 --layout vk --state-dtype bf16 --initial-state pool --checkpoint-every 1 --backend cuda:recurrent > "$OUT/d2_$v.log" 2>&1
  echo "  kda varlen 0-3 pool vk bf16 ckpt1 rc=$? $(last "$OUT/d2_$v.log")"
  timeout 90 $B diff --op gdn --mode decode --seqlens "$SEQ" --heads 2 --v-heads 8 --head-dim 64 --initial-state dense --final-state dense --checkpoint-every 2 --state-dtype f16 --backend cuda:recurrent > "$OUT/d3_$v.log" 2>&1
  echo "  gdn K64 varlen dense f16 ckpt2 rc=$? $(last "$OUT/d3_$v.log")"
done
unset DELTARULE_CUDA_MODE
SMALL="--op gdn --mode decode --seqs 100 --tokens 240 --heads 2 --v-heads 2 --initial-state pool --checkpoint-every 1 --backend cuda:recurrent"
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 $B diff $SMALL > "$OUT/mc_dec.log" 2>&1
echo "memcheck lb5 kv rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/mc_dec.log" | tail -1) | $(last "$OUT/mc_dec.log")"
for r in "lb5 kv" "lb5 vk" "lb6 kv"; do
  set -- $r
  DELTARULE_CUDA_MODE=${M[$1]} timeout 90 compute-sanitizer --tool racecheck --error-exitcode 9 $B diff $SMALL --layout $2 > "$OUT/race_$1_$2.log" 2>&1
  echo "racecheck $1 $2 rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/race_$1_$2.log" | tail -1) | $(last "$OUT/race_$1_$2.log")"
done
echo "== bench per variant at ${SECONDS}s"
for v in $ORDER lb5; do
  DELTARULE_CUDA_MODE=${M[$v]} timeout 60 $B bench --backend cuda --shape gdn-decode-16/32-256x1 kda-decode-32/32-256x1 --iters 100 --json > "$OUT/b_$v.jsonl" 2> "$OUT/b_$v.err"
  python3 -c "import json,sys
for l in open(sys.argv[1]):
    if l.startswith('{'):
        j=json.loads(l); print(f\"{sys.argv[2]:<6} {j['shape']:<24} {j['rule']:<26} {j['gpu_ms_median']:.4f} ms (p10 {j['gpu_ms_p10']:.4f} p90 {j['gpu_ms_p90']:.4f}) host {j['host_us_median']:.1f} us\")" "$OUT/b_$v.jsonl" "$v"
done
echo "== python wrapper at ${SECONDS}s"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2> /dev/null
PYTHONPATH=/tmp/site timeout 120 python3 bench/py_decode_ab.py --label lb5 --copy --fla 2>&1 | grep -v Warning | tail -4
for v in lb6 lb4 lb5; do
  DELTARULE_CUDA_MODE=${M[$v]} PYTHONPATH=/tmp/site timeout 60 python3 bench/py_decode_ab.py --label "$v" 2>&1 | tail -1
done
echo "== ncu at ${SECONDS}s"
for v in lb5 lb6; do
  DELTARULE_CUDA_MODE=${M[$v]} timeout 90 ncu --clock-control none --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,dram__bytes_write.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread -k regex:decode -c 1 $B bench --backend cuda --shape gdn-decode-16/32-256x1 --warmup 0 --iters 1 > "$OUT/ncu_$v.log" 2>&1
  echo "ncu $v rc=$? $(grep -E 'duration|dram__|warps_active|registers' "$OUT/ncu_$v.log" | awk '{printf "%s %s %s; ", $1, $(NF-1), $NF}')"
done
echo "== done at ${SECONDS}s"
(cd "$OUT" && tar czf logs_s26a.tgz *.log *.jsonl *.err 2>/dev/null; rm -f *.log *.err *.jsonl)

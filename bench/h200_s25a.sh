#!/usr/bin/env bash
# bench/h200_s25a.sh: session 25, the decode kernel's variants (kernels/decode.cuh, the
# DELTARULE_CUDA_MODE bits DEC_PERSIST 65536, DEC_PF 131072, DEC_LB5 262144 on top of the default
# 37249), after the decode anchor was found to have timed 192 of its 256 states (session 24):
#   1. correctness of every variant: the device test recurrent_conformance, and diffs through
#      cuda:recurrent of problems with many more items than a persistent grid has blocks (gdn
#      1200 x 1 token pool; kda varlen 0-3 tokens vk bf16 state with checkpoints; gdn K = V = 64
#      f16 dense state checkpoints), then memcheck and racecheck of the persistent variant;
#   2. `deltarule bench` of the decode anchor per variant (and kda 32/32 256x1), ncu DRAM figures
#      of two variants;
#   3. the anchor through the Python wrapper per variant, the old kernel (session 24's wheel, in
#      .dev/old), the copy floor and fla's fused_recurrent on the same inputs (bench/py_decode_ab.py).
# Ran against session 25's working tree, kept as bench/patches/s25-persistent-decode.patch (against
# 45f0dbf); the mode bits above do not exist in later trees (session 26 reused 65536 and 131072).
# Carry: .dev/pack (bash bench/pack_s15.sh) .whl (fla 0.6.0 and the deltarule wheel) .dev/old
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
D=37249
declare -A M=([classic]=$D [persist]=$((D | 65536)) [persist_pf]=$((D | 65536 | 131072))
  [classic5]=$((D | 262144)) [persist5]=$((D | 65536 | 262144)) [persist5_pf]=$((D | 65536 | 131072 | 262144)))
ORDER=${ORDER:-"classic persist persist_pf classic5 persist5 persist5_pf"}
SEQ=$(python3 -c "import random; random.seed(1); print(','.join(str(random.choice([0, 1, 1, 2, 3])) for _ in range(1500)))")
last() { tail -1 "$1" | tr -s ' '; }
echo "== correctness per variant at ${SECONDS}s"
for v in ${ORDER_C:-classic persist persist_pf persist5_pf}; do
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
grep -h -E "fail|FAIL" "$OUT"/d?_*.log | head -5
export DELTARULE_CUDA_MODE=${M[persist_pf]}
SMALL="--op gdn --mode decode --seqs 300 --tokens 700 --heads 2 --v-heads 2 --initial-state pool --checkpoint-every 1 --backend cuda:recurrent"
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 $B diff $SMALL > "$OUT/mc_dec.log" 2>&1
echo "memcheck persist_pf 2400 items rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/mc_dec.log" | tail -1) $(last "$OUT/mc_dec.log")"
timeout 90 compute-sanitizer --tool racecheck --error-exitcode 9 $B diff $SMALL > "$OUT/race_dec.log" 2>&1
echo "racecheck persist_pf rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/race_dec.log" | tail -1)"
unset DELTARULE_CUDA_MODE
echo "== bench per variant at ${SECONDS}s"
for v in $ORDER; do
  DELTARULE_CUDA_MODE=${M[$v]} timeout 60 $B bench --backend cuda --shape gdn-decode-16/32-256x1 kda-decode-32/32-256x1 --iters 100 --json > "$OUT/b_$v.jsonl" 2> "$OUT/b_$v.err"
  python3 -c "import json,sys
for l in open(sys.argv[1]):
    if l.startswith('{'):
        j=json.loads(l); print(f\"{sys.argv[2]:<12} {j['shape']:<24} {j['rule']:<22} {j['gpu_ms_median']:.4f} ms (p10 {j['gpu_ms_p10']:.4f} p90 {j['gpu_ms_p90']:.4f}) host {j['host_us_median']:.1f} us\")" "$OUT/b_$v.jsonl" "$v"
done
echo "== python wrapper at ${SECONDS}s"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2> /dev/null
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site_old .dev/old/*.whl 2> /dev/null
PYTHONPATH=/tmp/site timeout 120 python3 bench/py_decode_ab.py --label classic --copy --fla 2>&1 | grep -v Warning | tail -4
for v in $ORDER; do
  [ "$v" = classic ] && continue
  DELTARULE_CUDA_MODE=${M[$v]} PYTHONPATH=/tmp/site timeout 60 python3 bench/py_decode_ab.py --label "$v" 2>&1 | tail -1
done
PYTHONPATH=/tmp/site_old timeout 90 python3 bench/py_decode_ab.py --label "old (s24 wheel)" 2>&1 | tail -1
PYTHONPATH=/tmp/site timeout 60 python3 bench/py_decode_ab.py --label "classic again" 2>&1 | tail -1
echo "== ncu at ${SECONDS}s"
for v in classic persist_pf; do
  DELTARULE_CUDA_MODE=${M[$v]} timeout 90 ncu --clock-control none --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,dram__bytes_write.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,lts__t_sector_hit_rate.pct -k regex:decode -c 1 $B bench --backend cuda --shape gdn-decode-16/32-256x1 --warmup 0 --iters 1 > "$OUT/ncu_$v.log" 2>&1
  echo "ncu $v rc=$? $(grep -E 'duration|dram__|warps_active|registers|hit_rate' "$OUT/ncu_$v.log" | awk '{printf "%s %s %s; ", $1, $(NF-1), $NF}')"
done
echo "== done at ${SECONDS}s"
(cd "$OUT" && tar czf logs_s25a.tgz *.log *.jsonl *.err 2>/dev/null; rm -f *.log *.err *.jsonl)

#!/usr/bin/env bash
# bench/h200_s26b.sh: session 26, the decode anchor with the kept kernel (96 registers, 4 blocks an
# SM; DELTARULE_CUDA_MODE bits 65536 and 131072 give the 6- and 5-block forms): racecheck and
# memcheck of the default in both layouts, `deltarule bench` of the decode anchors per form (twice,
# interleaved), and the anchor through the Python wrapper with the copy floor and fla's
# fused_recurrent on the same inputs (bench/py_decode_ab.py, each call queued behind a GPU spin).
# Carry: .dev/pack (bash bench/pack_s15.sh) .whl (fla 0.6.0 and the deltarule wheel)
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
D=37249
declare -A M=([lb4]=$D [lb6]=$((D | 65536)) [lb5]=$((D | 131072)))
last() { tail -1 "$1" | tr -s ' '; }
SMALL="--op gdn --mode decode --seqs 100 --tokens 240 --heads 2 --v-heads 2 --initial-state pool --checkpoint-every 1 --backend cuda:recurrent"
for l in kv vk; do
  timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 $B diff $SMALL --layout $l > "$OUT/mc_$l.log" 2>&1
  echo "memcheck lb4 $l rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/mc_$l.log" | tail -1) | $(last "$OUT/mc_$l.log")"
  timeout 90 compute-sanitizer --tool racecheck --error-exitcode 9 $B diff $SMALL --layout $l > "$OUT/race_$l.log" 2>&1
  echo "racecheck lb4 $l rc=$? $(grep -E 'RACECHECK SUMMARY' "$OUT/race_$l.log" | tail -1) | $(last "$OUT/race_$l.log")"
done
grep -h -E "Race reported|Read access" "$OUT/race_kv.log" | sed -E 's/.*(Write|Read) access at .*in (decode.cuh:[0-9]+).*/\1 \2/' | sort | uniq -c
echo "== bench per form at ${SECONDS}s"
for v in lb4 lb5 lb6 lb4 lb5 lb6; do
  DELTARULE_CUDA_MODE=${M[$v]} timeout 60 $B bench --backend cuda --shape gdn-decode-16/32-256x1 kda-decode-32/32-256x1 --iters 100 --json > "$OUT/b_$v.jsonl" 2> "$OUT/b_$v.err"
  python3 -c "import json,sys
for l in open(sys.argv[1]):
    if l.startswith('{'):
        j=json.loads(l); print(f\"{sys.argv[2]:<6} {j['shape']:<24} {j['rule']:<26} {j['gpu_ms_median']:.4f} ms (p10 {j['gpu_ms_p10']:.4f} p90 {j['gpu_ms_p90']:.4f}) host {j['host_us_median']:.1f} us {j.get('gbps', 0) or 0:.0f} GB/s\")" "$OUT/b_$v.jsonl" "$v"
done
echo "== python wrapper at ${SECONDS}s"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2> /dev/null
PYTHONPATH=/tmp/site timeout 150 python3 bench/py_decode_ab.py --label lb4 --copy --fla 2>&1 | grep -v Warning | tail -4
echo "== done at ${SECONDS}s"
(cd "$OUT" && tar czf logs_s26b.tgz *.log *.jsonl *.err 2>/dev/null; rm -f *.log *.err *.jsonl)

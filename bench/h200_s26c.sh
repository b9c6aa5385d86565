#!/usr/bin/env bash
# bench/h200_s26c.sh: session 26, the decode kernel whose kv state warps meet at a block barrier
# mid-token (the token warp issues the next token's loads before it and stores them after) instead
# of a named barrier of the state warps alone, which racecheck flagged (h200_s26a/b):
#   1. correctness: the CUDA device tests, conformance `cuda::`, the golden diffs through cuda,
#      three decode diffs (many items, varlen 0-3 tokens, checkpoints, both layouts), reruns;
#   2. memcheck and racecheck (kv and vk, gdn and kda, several tokens per sequence);
#   3. `deltarule bench`, this tree against the previous pack (.dev/prev: named barrier), twice
#      interleaved: the decode anchors and a speculative-verify shape (256 sequences x 4 tokens);
#      fla's decode anchor (bench/fla_bench.py) and the Python wrapper beside the copy floor and
#      fla's fused_recurrent on the same inputs (bench/py_decode_ab.py).
# Carry: .dev/pack (bash bench/pack_s15.sh) .dev/prev (the previous dev.tar.xz) .whl
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
mkdir -p .dev/prev/x && xz -dc .dev/prev/dev.tar.xz | tar -C .dev/prev/x -xf - && cp .dev/prev/x/cubin/*.cubin "$DELTARULE_CUDA_CACHE"/
P=.dev/prev/x/bin/deltarule
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
last() { tail -1 "$1" | tr -s ' '; }
G="tests/golden/shared/*.safetensors"
echo "== correctness at ${SECONDS}s"
timeout 150 .dev/bin/cuda_device --test-threads=1 > "$OUT/dev.log" 2>&1
echo "device tests rc=$? $(grep -E '^test result' "$OUT/dev.log" | tail -1)"
timeout 150 .dev/bin/conformance --test-threads=1 --nocapture cuda:: > "$OUT/conf.log" 2>&1
echo "conformance cuda:: rc=$? $(grep -E ' ran, ' "$OUT/conf.log" | tr -s ' ' | tr '\n' ';')"
timeout 60 $B diff --case $G --backend cuda > "$OUT/golden.log" 2>&1
echo "golden diff cuda rc=$? $(last "$OUT/golden.log")"; grep -E 'decode' "$OUT/golden.log" | awk '{print $1, $4, $6, $NF}'
SEQ=$(python3 -c "import random; random.seed(1); print(','.join(str(random.choice([0, 1, 1, 2, 3])) for _ in range(1500)))")
timeout 90 $B diff --op gdn --mode decode --seqs 1200 --tokens 1200 --heads 4 --v-heads 8 --initial-state pool --backend cuda:recurrent > "$OUT/d1.log" 2>&1
echo "gdn 1200x1 pool kv f32 rc=$? $(last "$OUT/d1.log")"
for l in kv vk; do
  timeout 90 $B diff --op kda --mode decode --seqlens "$SEQ" --heads 4 --v-heads 4 --layout $l --state-dtype bf16 --initial-state pool --checkpoint-every 1 --backend cuda:recurrent > "$OUT/d2$l.log" 2>&1
  echo "kda varlen 0-3 pool $l bf16 ckpt1 rc=$? $(last "$OUT/d2$l.log")"
  timeout 90 $B diff --op gdn --mode decode --seqlens "$SEQ" --heads 2 --v-heads 8 --head-dim 64 --layout $l --initial-state dense --final-state dense --checkpoint-every 2 --state-dtype f16 --l2norm --backend cuda:recurrent > "$OUT/d3$l.log" 2>&1
  echo "gdn K64 varlen dense $l f16 ckpt2 l2norm rc=$? $(last "$OUT/d3$l.log")"
done
V="--op gdn --mode decode --seqs 64 --tokens 640 --heads 4 --v-heads 8 --initial-state pool --l2norm --backend cuda:recurrent"
for i in 1 2; do timeout 40 $B diff $V --json > "$OUT/rerun_$i.json" 2>&1; done
if cmp -s "$OUT/rerun_1.json" "$OUT/rerun_2.json"; then echo "rerun: $(grep -c rel_l2 "$OUT/rerun_1.json") rows bit-equal"; else echo "rerun DIFFERENT"; fi
echo "== sanitizers at ${SECONDS}s"
for c in "gdn kv 100 240" "gdn vk 100 240" "gdn kv 1 50" "kda kv 40 200" "kda vk 40 200"; do
  set -- $c
  S="--op $1 --mode decode --layout $2 --seqs $3 --tokens $4 --heads 2 --v-heads 2 --initial-state pool --checkpoint-every 3 --backend cuda:recurrent"
  timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 $B diff $S > "$OUT/mc.log" 2>&1
  m="memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/mc.log" | tail -1 | sed 's/=* //')"
  timeout 90 compute-sanitizer --tool racecheck --error-exitcode 9 $B diff $S > "$OUT/race_$1_$2_$3.log" 2>&1
  echo "[$c] $m; racecheck rc=$? $(grep -E 'RACECHECK SUMMARY' "$OUT/race_$1_$2_$3.log" | tail -1 | sed 's/=* //') | $(last "$OUT/race_$1_$2_$3.log")"
done
echo "== bench at ${SECONDS}s"
S4=$(python3 -c "print(','.join(['4'] * 256))")
for r in 1 2; do
  for b in new prev; do
    X=$B; [ $b = prev ] && X=$P
    timeout 60 $X bench --backend cuda --shape gdn-decode-16/32-256x1 kda-decode-32/32-256x1 --iters 100 --json > "$OUT/b_$b.jsonl" 2> "$OUT/b_$b.err"
    for op in gdn kda; do
      H=16; [ $op = kda ] && H=32
      timeout 60 $X bench --backend cuda --op $op --mode decode --seqlens "$S4" --heads $H --v-heads 32 --initial-state pool --iters 100 --json >> "$OUT/b_$b.jsonl" 2>> "$OUT/b_$b.err"
    done
    python3 -c "import json,sys
for l in open(sys.argv[1]):
    if l.startswith('{'):
        j=json.loads(l); print(f\"{sys.argv[2]:<5} {j['shape'][:40]:<40} {j['gpu_ms_median']:.4f} ms (p10 {j['gpu_ms_p10']:.4f} p90 {j['gpu_ms_p90']:.4f}) host {j['host_us_median']:.1f} us {j.get('gbps', 0) or 0:.0f} GB/s\")" "$OUT/b_$b.jsonl" "$b"
  done
done
echo "== fla and the wrapper at ${SECONDS}s"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2> /dev/null
export PYTHONPATH=/tmp/site
timeout 90 $B bench --backend cuda --shape gdn-decode-16/32-256x1 --iters 100 --json > "$OUT/ours.jsonl" 2> /dev/null
timeout 120 python3 bench/fla_bench.py --shapes gdn-decode-16/32-256x1 > "$OUT/fla.jsonl" 2> "$OUT/fla.err"
echo "fla rc=$?"; python3 bench/anchor_table.py "$OUT/ours.jsonl" "$OUT/fla.jsonl"
timeout 150 python3 bench/py_decode_ab.py --label new --copy --fla 2>&1 | grep -v Warning | tail -4
echo "== done at ${SECONDS}s"
(cd "$OUT" && tar czf logs_s26c.tgz *.log *.json *.jsonl *.err 2>/dev/null; rm -f *.log *.err *.json *.jsonl)

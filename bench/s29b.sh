#!/usr/bin/env bash
# bench/s29b.sh: session 29, any GPU (~150 s): the production token recurrence, which now picks its
# form by tokens per sequence (lib.rs DecodeForm::pick), against the forms forced by
# DELTARULE_CUDA_MODE (4 blocks 524288, 5 blocks 131072, 6 blocks 65536, persistent 262144), and
# kda at 3, 6 and 8 tokens, where the rule's persistent band is an extrapolation of s29a; then the
# device test of every form against the default, and a decode diff through the default at 2 and 4
# tokens. Correctness first; medians of 100 over up to two interleaved rounds, no new
# bench after STOP seconds (default 250). Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
D=37249
declare -A M=([auto]=$D [lb4]=$((D | 524288)) [lb5]=$((D | 131072)) [lb6]=$((D | 65536)) [pers]=$((D | 262144)))
SH=${SH:-"gdn-decode-16/32-256x1 gdn-decode-16/32-256x2 gdn-decode-16/32-256x4 kda-decode-32/32-256x1 kda-decode-32/32-256x2 kda-decode-32/32-256x3 kda-decode-32/32-256x4 kda-decode-32/32-256x6 kda-decode-32/32-256x8"}
timeout 150 .dev/bin/cuda_device --test-threads=1 --nocapture recurrent_ > "$OUT/dev.log" 2>&1
echo "device tests recurrent_ rc=$? $(grep -E '^test result' "$OUT/dev.log" | tail -1)"
grep -E "DELTARULE_CUDA_MODE=.* ran|panicked" "$OUT/dev.log" | cut -c1-200
for c in "gdn 2 kv" "kda 4 vk" "kda 3 kv"; do
  set -- $c
  timeout 60 $B diff --op $1 --mode decode --seqs 300 --tokens $((300 * $2)) --heads 2 --v-heads 4 --layout $3 --initial-state pool --checkpoint-every 2 --backend cuda:recurrent > "$OUT/d.log" 2>&1
  echo "default diff $c tokens/seq rc=$? $(tail -1 "$OUT/d.log")"
done
for r in 1 2; do
  for v in auto lb4 lb5 lb6 pers; do
    DELTARULE_CUDA_MODE=${M[$v]} timeout 100 $B bench --backend cuda --shape $SH --iters 100 --json >> "$OUT/b_$v.jsonl" 2>> "$OUT/b.err"
    echo "round $r $v rc=$? at ${SECONDS}s"
    [ $SECONDS -gt ${STOP:-250} ] && break 2
  done
done
python3 bench/bench_table.py auto="$OUT/b_auto.jsonl" lb4="$OUT/b_lb4.jsonl" lb5="$OUT/b_lb5.jsonl" lb6="$OUT/b_lb6.jsonl" pers="$OUT/b_pers.jsonl"
echo "== done at ${SECONDS}s"

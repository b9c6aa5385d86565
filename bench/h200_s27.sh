#!/usr/bin/env bash
# bench/h200_s27.sh: session 27, the closing call of issue 4 on an H200 only (exits at once on any
# other GPU). First the decode anchors per entry point of the token recurrence (4, 5 and 6 blocks an
# SM: DELTARULE_CUDA_MODE bits 0, 131072, 65536 over the default 37249; twice, interleaved), since
# the H100 picked 4 blocks and the H200's bandwidth asks for more bytes in flight than the H100's;
# then bench/h200_s24.sh whole (every acceptance check, the anchors beside fla 0.6.0, the copy
# floor, eager against graph).
# Carry: .dev/pack (bash bench/pack_s15.sh) .whl (fla 0.6.0 and the deltarule wheel)
set -uo pipefail
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$name" in *H200*) ;; *) echo "$name: not an H200, nothing run"; exit 0 ;; esac
source bench/h200_env.sh
B=.dev/bin/deltarule
D=37249
declare -A M=([lb4]=$D [lb6]=$((D | 65536)) [lb5]=$((D | 131072)))
echo "== decode per entry point at ${SECONDS}s"
for v in lb4 lb5 lb6 lb4 lb5 lb6; do
  DELTARULE_CUDA_MODE=${M[$v]} timeout 60 $B bench --backend cuda --shape gdn-decode-16/32-256x1 kda-decode-32/32-256x1 --iters 100 --json > "$OUT/b_$v.jsonl" 2> "$OUT/b_$v.err"
  python3 bench/bench_rows.py "$v" "$OUT/b_$v.jsonl"
done
rm -f "$OUT"/b_*
H200_ONLY=1 bash bench/h200_s24.sh

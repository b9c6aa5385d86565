#!/usr/bin/env bash
# bench/h200_s22a.sh: session 22, closing call for issue 4, part 1 (tree of session 21, ae5d95c's
# kernels): every correctness check of the acceptance list on one tree, then the anchors through
# auto and flash-linear-attention 0.6.0 in the same call, and the table. Part 2 (h200_s22b.sh)
# runs FlashQLA 0.1.3 beside ours (both parts together run past one call's 10-minute limit:
# 454 s and 287 s; bench/h200_cuda.sh runs ours, fla and FlashQLA in one call when time allows).
#   1. the whole CUDA device-test suite, conformance `cuda::`, golden diffs through cuda,
#      cuda:chunked, cuda:small-bh and the small-bh T-form forced, memcheck of the sanitizer
#      subset (cuda_checks in h200_lib.sh), all with DELTARULE_REQUIRE_CUDA=1;
#   2. memcheck of a vk + pool + checkpoints diff and of chunked_long_and_short_sequences,
#      racecheck of the gdn golden diff through cuda:chunked (the fused T-form) and small-bh;
#   3. reruns bit-identical: the same generated diff twice through auto, full-precision errors.
# Carry: .dev/pack (bash bench/pack_s15.sh) .whl
set -uo pipefail
source bench/h200_env.sh
source bench/h200_lib.sh
G="tests/golden/shared/*.safetensors"
G128=tests/golden/shared/gdn_gva_varlen_state.safetensors
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
echo "== correctness at ${SECONDS}s (DELTARULE_REQUIRE_CUDA=$DELTARULE_REQUIRE_CUDA)"
# (180 s: session 27 added recurrent_many_items and recurrent_entry_points_agree, ~4 child runs)
DEV_TIMEOUT=180 cuda_checks 150
DELTARULE_CUDA_STATE_BV=wgt timeout 40 $B diff --case $G --backend cuda:small-bh > "$OUT/diff_wgt.log" 2>&1
echo "diff cuda:small-bh T-form forced rc=$? $(tail -1 "$OUT/diff_wgt.log")"
grep -E ' expected ' "$OUT/diff_cuda.log" | awk '{print $1, $2, $4, $6, $NF}'
GB="--op gdn --seqs 40 --tokens 3000 --heads 4 --v-heads 8 --initial-state pool --layout vk --checkpoint-every 128"
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 $B diff $GB --backend cuda:chunked > "$OUT/mc2.log" 2>&1
echo "memcheck diff vk pool checkpoints cuda:chunked rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/mc2.log" | tail -1)"
timeout 50 compute-sanitizer --tool memcheck --error-exitcode 9 .dev/bin/cuda_device --test-threads=1 chunked_long > "$OUT/mc1.log" 2>&1
echo "memcheck chunked_long rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/mc1.log" | tail -1)"
for b in cuda:chunked cuda:small-bh; do
  timeout 70 compute-sanitizer --tool racecheck --error-exitcode 9 $B diff --case $G128 --backend $b > "$OUT/rc_${b#cuda:}.log" 2>&1
  echo "racecheck gdn128 $b rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/rc_${b#cuda:}.log" | tail -1)"
done
GA="--op gdn --seqs 40 --tokens 3000 --heads 4 --v-heads 8 --initial-state dense --final-state dense --checkpoint-every 64 --l2norm"
for i in 1 2; do timeout 40 $B diff $GA --backend cuda --json > "$OUT/rerun_$i.json" 2>&1; done
if cmp -s "$OUT/rerun_1.json" "$OUT/rerun_2.json"; then echo "rerun: $(grep -c rel_l2 "$OUT/rerun_1.json") rows bit-equal"; else echo "rerun DIFFERENT"; fi
echo "== ours at ${SECONDS}s"
timeout 60 $B bench --backend cuda --shape gdn-16/32-256x64 --iters 5 > /dev/null 2>&1
timeout 100 $B bench --backend cuda --shape anchors --iters 30 --json > "$OUT/ours.jsonl" 2> "$OUT/ours.err"
echo "ours rc=$?"
echo "== fla at ${SECONDS}s"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
left=$((${FLA_END:-560} - SECONDS)) # FLA_END: the second by which fla must be done (a shorter call)
PYTHONUNBUFFERED=1 timeout $left python3 bench/fla_bench.py --shapes gdn-16/32-256x64 gdn-16/32-16x1024 gdn-16/32-1x8192 \
  gdn-16/32-1x32768 gdn-4/8-1x8192 gdn-decode-16/32-256x1 kda-32/32-1x8192 kda-64/64-1x8192 > "$OUT/fla.jsonl" 2> "$OUT/fla.err"
echo "fla rc=$? at ${SECONDS}s"; tail -2 "$OUT/fla.err"
python3 bench/anchor_table.py "$OUT/ours.jsonl" "$OUT/fla.jsonl"
echo "== done at ${SECONDS}s"
(cd "$OUT" && tar czf logs_s22a.tgz *.log *.json *.jsonl *.err 2>/dev/null; rm -f *.log *.err *.json)

#!/usr/bin/env bash
# bench/h200_s21b.sh: session 21, second call. Where the fused T-form issues its first state
# tile's loads (intra_chunk's `early`, EARLY_AT): default now 1, before T's diagonal solve (the
# loads' issue overlaps the substitution on four half-warps, not the merges' shared loads);
# PROBE 16777216 = 0, after it (session 17-20, .text equal to session 20's on a local NVRTC
# cubin); PROBE 2097152 = 2, before step 2 (the A, P products). No arithmetic moves: outputs
# must be bit-equal (full-precision errors of diff --json). s21a's FTB (merged T build) lost and
# is reverted (bench/patches/s21a-ftb.patch).
# Predicted: 256x64 0.810 -> ~0.80 (part of the merges' ~6,000 cycles a CTA are the loads' issue).
# Carry: .dev/pack (PROBES="16777216 2097152 256" bash bench/pack_s15.sh)
set -uo pipefail
source bench/h200_env.sh
source bench/h200_lib.sh
B=.dev/bin/deltarule
G="tests/golden/shared/*.safetensors"
G128=tests/golden/shared/gdn_gva_varlen_state.safetensors
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
echo "== correctness at ${SECONDS}s"
for b in cuda cuda:chunked; do
  timeout 40 $B diff --case $G --backend $b > "$OUT/diff_${b/:/_}.log" 2>&1
  echo "diff $b rc=$? $(tail -1 "$OUT/diff_${b/:/_}.log")"
done
grep -E ' expected ' "$OUT/diff_cuda_chunked.log" | grep gdn | awk '{print "chunked:", $1, $4, $6, $NF}'
echo "-- bit-equality of the three placements (cuda:chunked, full-precision errors)"
GEN="--op gdn --seqs 37 --tokens 6000 --heads 16 --v-heads 32 --initial-state dense --final-state dense --l2norm"
GEN2="--op gdn --seqs 300 --tokens 19200 --heads 16 --v-heads 32 --initial-state pool --layout vk"
for pr in 0 16777216 2097152; do
  DELTARULE_CUDA_PROBE=$pr timeout 40 $B diff --case $G128 --backend cuda:chunked --json > "$OUT/j_$pr.json" 2>&1
  DELTARULE_CUDA_PROBE=$pr timeout 40 $B diff $GEN --backend cuda:chunked --json >> "$OUT/j_$pr.json" 2>&1
  DELTARULE_CUDA_PROBE=$pr timeout 40 $B diff $GEN2 --backend cuda:chunked --json >> "$OUT/j_$pr.json" 2>&1
done
for pr in 16777216 2097152; do
  if cmp -s "$OUT/j_0.json" "$OUT/j_$pr.json"; then echo "P$pr: $(grep -c rel_l2 "$OUT/j_0.json") rows, bit-equal to the default"; else echo "P$pr: DIFFERENT"; diff "$OUT/j_0.json" "$OUT/j_$pr.json" | cut -c1-300 | head -4; fi
done
grep -o '"tensor":"[a-z_]*"\|"rel_l2":[0-9.e-]*\|"pass":[a-z]*' "$OUT/j_0.json" | paste - - - | tr '\n' ' '; echo
timeout 60 .dev/bin/cuda_device --test-threads=1 --nocapture chunked_ > "$OUT/dev_c.log" 2>&1
echo "cuda_device chunked_ rc=$?"; grep -E "test result|panicked" "$OUT/dev_c.log" | head -4
timeout 80 compute-sanitizer --tool racecheck --error-exitcode 9 $B diff --case $G128 --backend cuda:chunked > "$OUT/rc1.log" 2>&1
echo "racecheck gdn128 cuda:chunked rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/rc1.log" | tail -1)"
timeout 50 compute-sanitizer --tool memcheck --error-exitcode 9 .dev/bin/cuda_device --test-threads=1 chunked_long > "$OUT/mc1.log" 2>&1
echo "memcheck chunked_long rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/mc1.log" | tail -1)"
echo "== timings at ${SECONDS}s"
timeout 60 $B bench --backend cuda:chunked --shape gdn-16/32-256x64 --iters 5 > /dev/null 2>&1
for round in 1 2 3 4; do
  for pr in 0 16777216 2097152; do
    probe_row $round $pr cuda:chunked gdn-16/32-256x64
  done
  probe_row $round 0 cuda gdn-16/32-16x1024
done
echo "== means"
round_means "$OUT/t.log"
echo "== timeline at ${SECONDS}s (PROBE 256: the default placement, cycles a CTA)"
DELTARULE_CUDA_PROBE=256 timeout 40 $B bench --backend cuda:chunked --shape gdn-16/32-256x64 --iters 3 --warmup 1 > "$OUT/tl_256.log" 2>&1
tlt_mean "$OUT/tl_256.log" 256
tlf_mean "$OUT/tl_256.log" 256
echo "== done at ${SECONDS}s"
(cd "$OUT" && tar czf logs_s21b.tgz *.log *.json 2>/dev/null; rm -f *.log *.json)

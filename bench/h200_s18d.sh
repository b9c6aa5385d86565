#!/usr/bin/env bash
# bench/h200_s18d.sh: session 18, a short check of the final tree: the reordered quadrant
# schedule is now fusedtr's code (its .text equals the PROBE 262144 build timed in s18c, whose
# golden diffs timed out compiling the kda module with the probe's flags). Golden diffs, the
# chunked device tests, memcheck of chunked_long, three rounds of 256x64 and 16x1024 (auto).
# Carry: .dev/pack (bash bench/pack_s15.sh)
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
G="tests/golden/shared/*.safetensors"
for b in cuda cuda:chunked; do
  timeout 40 $B diff --case $G --backend $b > "$OUT/diff_${b/:/_}.log" 2>&1
  echo "diff $b rc=$? $(tail -1 "$OUT/diff_${b/:/_}.log") $(grep -E ' expected ' "$OUT/diff_${b/:/_}.log" | grep gdn | awk '{printf "%s/%s ", $4, $6}')"
done
timeout 60 .dev/bin/cuda_device --test-threads=1 --nocapture chunked_ > "$OUT/dev_c.log" 2>&1
echo "cuda_device chunked_ rc=$?"; grep -E "test result|panicked|sequences on" "$OUT/dev_c.log" | head -6
timeout 50 compute-sanitizer --tool memcheck --error-exitcode 9 .dev/bin/cuda_device --test-threads=1 chunked_long > "$OUT/mc1.log" 2>&1
echo "memcheck chunked_long rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/mc1.log" | tail -1)"
timeout 60 $B bench --backend cuda --shape gdn-16/32-256x64 --iters 5 > /dev/null 2>&1
for round in 1 2 3; do
  for m in 37249 4481; do
    DELTARULE_CUDA_MODE=$m timeout 60 $B bench --backend cuda --shape gdn-16/32-256x64 gdn-16/32-16x1024 --iters 30 2>&1 | grep -E "^gdn" | grep -v generating | sed "s/^/r$round m$m /" | tee -a "$OUT/t.log"
  done
done
awk '{k=$2" "$3; s[k]+=$6; n[k]++} END {for (k in s) printf "%-40s %.4f (n=%d)\n", k, s[k]/n[k], n[k]}' "$OUT/t.log" | sort
echo "== done at ${SECONDS}s"
(cd "$OUT" && tar czf logs_s18d.tgz *.log 2>/dev/null; rm -f *.log)

#!/usr/bin/env bash
# bench/h200_s5h.sh (session 5, call 10, after the closing call): kda's q/k rows by cp.async into
# shared memory, normalised in place after the gate loads (one exposed load latency instead of
# two); gdn small-bh's V rows by cp.async into the free k̃ slot at the start. Correctness (device tests, conformance, diffs, memcheck subset), kda times, kda timeline.
# Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
timeout 100 .dev/bin/cuda_device --test-threads=1 --nocapture > "$OUT/dev.log" 2>&1; echo "device tests rc=$?"
grep -E " ran, |panicked|FAIL" "$OUT/dev.log" | head -12
timeout 60 .dev/bin/conformance --test-threads=1 --nocapture cuda:: > "$OUT/conf.log" 2>&1; echo "conformance cuda:: rc=$?"
grep -E " ran, " "$OUT/conf.log"
for b in cuda cuda:small-bh cuda:chunked; do timeout 40 $B diff --case tests/golden/shared/*.safetensors --backend $b > "$OUT/diff_${b/:/_}.log" 2>&1; echo "diff $b rc=$? $(tail -1 "$OUT/diff_${b/:/_}.log")"; done
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 .dev/bin/cuda_device --test-threads=1 sanitizer_subset > "$OUT/memcheck.log" 2>&1; echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
timeout 60 $B bench --backend cuda --shape kda-32/32-1x8192 kda-64/64-1x8192 gdn-16/32-1x8192 gdn-4/8-1x8192 gdn-16/32-1x32768 --iters 30 2>&1 | grep -v '^\s*$' | grep -v generating | tail -6
f="$OUT/tl.log"
for sh in kda-32/32-1x8192 gdn-16/32-1x8192; do
DELTARULE_CUDA_PROBE=256 timeout 60 $B bench --backend cuda:small-bh --shape $sh --warmup 2 --iters 3 --rotate-mib 1 > "$f" 2>&1
grep '^TL ' "$f" | tail -n 40 | awk '{for(i=1;i<=NF;i++) if($i ~ /^(load|cumsum|AP|diag|merge|tprime|step4|step5|total)$/){s[$i]+=$(i+1); if(n0[$i]++==0) o[++k]=$i}} END{for(j=1;j<=k;j++) printf "%s %.0f  ", o[j], s[o[j]]/n0[o[j]]; print ""}'
rm -f "$f"
done

#!/usr/bin/env bash
# bench/h200_s5f.sh (session 5, call 6): kda step 2 in two independent warp groups (CUDA-core
# tiles straight from Ks, Qs, Γ; tensor-core warps build their own slice operands).
# Correctness first (device tests, conformance, diffs, memcheck subset), then times (auto, the
# timeline probe).
# Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
timeout 120 .dev/bin/cuda_device --test-threads=1 --nocapture > "$OUT/dev.log" 2>&1; echo "device tests rc=$?"
grep -E " ran, |panicked|FAIL" "$OUT/dev.log" | head -12
grep -E "rel|err" "$OUT/dev.log" | grep -i golden | head -12
timeout 60 .dev/bin/conformance --test-threads=1 --nocapture cuda:: > "$OUT/conf.log" 2>&1; echo "conformance cuda:: rc=$?"
grep -E " ran, " "$OUT/conf.log"
for b in cuda cuda:small-bh cuda:chunked; do timeout 40 $B diff --case tests/golden/shared/*.safetensors --backend $b > "$OUT/diff_${b/:/_}.log" 2>&1; echo "diff $b rc=$? $(tail -1 "$OUT/diff_${b/:/_}.log")"; done
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 .dev/bin/cuda_device --test-threads=1 sanitizer_subset > "$OUT/memcheck.log" 2>&1; echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
for pr in 0; do
  echo "-- auto, PROBE=$pr"
  DELTARULE_CUDA_PROBE=$pr timeout 90 $B bench --backend cuda --shape gdn-16/32-1x8192 gdn-4/8-1x8192 kda-32/32-1x8192 kda-64/64-1x8192 gdn-16/32-1x32768 --iters 30 2>&1 | grep -v '^\s*$' | grep -v generating | tail -6
  DELTARULE_CUDA_PROBE=$pr timeout 90 $B bench --backend cuda:chunked cuda:small-bh --shape gdn-16/32-16x1024 gdn-16/32-256x64 --iters 30 2>&1 | grep -v '^\s*$' | grep -v generating | tail -4
done
echo "-- timeline probe (cycles per phase, mean over sampled chunks)"
for spec in "cuda:small-bh gdn-16/32-1x8192" "cuda:small-bh kda-32/32-1x8192" "cuda:chunked gdn-16/32-256x64"; do
  set -- $spec
  f="$OUT/tl_${2//\//_}_${1/:/_}.log"
  DELTARULE_CUDA_PROBE=256 timeout 60 $B bench --backend $1 --shape $2 --warmup 2 --iters 3 --rotate-mib 1 > "$f" 2>&1
  echo "$1 $2 rc=$?"
  grep '^TL ' "$f" | tail -n 40 | awk '{for(i=1;i<=NF;i++) if($i ~ /^(load|cumsum|AP|diag|merge|tprime|step4|step5|total)$/){s[$i]+=$(i+1); if(n0[$i]++==0) o[++k]=$i}} END{for(j=1;j<=k;j++) printf "%s %.0f  ", o[j], s[o[j]]/n0[o[j]]; print ""}'
  grep '^TLF ' "$f" | tail -n 40 | awk '{a+=$(NF-3); b+=$(NF-1); n++} END{if(n) printf "fused: intra %.0f state %.0f cycles per CTA (n=%d)\n", a/n, b/n, n}'
  sed -i '/^TL/!d' "$f"; head -c 20000 "$f" > "$f.x"; mv "$f.x" "$f"
done
echo "-- per-kernel durations and SM clock (ncu)"
for sh in gdn-16/32-1x8192 kda-32/32-1x8192 kda-64/64-1x8192; do
  timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum -k "regex:prefill_(intra|state)" -c 2 $B bench --backend cuda:small-bh --shape $sh --warmup 0 --iters 1 --rotate-mib 1 > "$OUT/ncu_${sh//\//_}.log" 2>&1
  echo "$sh rc=$? $(grep -E "prefill_|gpu__time_duration" "$OUT/ncu_${sh//\//_}.log" | sed 's/  */ /g' | awk '/prefill_/{k=$1} /duration/{printf "%s %s us  ", k, $NF}')"
done

#!/usr/bin/env bash
# bench/h200_s9a.sh: session 9, first H200 call: the T-form gdn small-bh pair (intra kernel
# `gdn_prefill_intrat` writing T_w, T_u, P and per-token factors; wgmma state pass
# `gdn_prefill_statewgt` building W·S and U from the inputs' k, v rows). Correctness first, with
# the T-form forced wherever it applies (DELTARULE_CUDA_STATE_BV=wgt) and through auto; then the
# golden errors of the T-form against the previous wgmma pass (BV=wg); then auto (T-form) against
# BV=wg on the gdn anchor shapes, the same with T_u's lo product left out (PROBE 2048), and ncu
# kernel times. Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
source bench/h200_lib.sh
for bv in wgt auto; do
  if [[ $bv == auto ]]; then unset DELTARULE_CUDA_STATE_BV; else export DELTARULE_CUDA_STATE_BV=$bv; fi
  echo "== BV=$bv"
  timeout 150 .dev/bin/cuda_device --test-threads=1 --nocapture > "$OUT/dev_$bv.log" 2>&1; echo "device tests rc=$?"
  grep -E " ran, |panicked|FAIL|rel" "$OUT/dev_$bv.log" | head -14
  timeout 90 .dev/bin/conformance --test-threads=1 --nocapture cuda:: > "$OUT/conf_$bv.log" 2>&1; echo "conformance cuda:: rc=$?"
  grep -E " ran, |panicked|FAIL" "$OUT/conf_$bv.log" | head -8
done
for bv in wgt wg; do
  export DELTARULE_CUDA_STATE_BV=$bv
  for b in cuda cuda:small-bh; do
    timeout 40 $B diff --case tests/golden/shared/*.safetensors --backend $b > "$OUT/diff_${bv}_${b/:/_}.log" 2>&1
    echo "diff BV=$bv $b rc=$? $(tail -1 "$OUT/diff_${bv}_${b/:/_}.log")"
  done
  grep -E "^###| expected " "$OUT/diff_${bv}_cuda_small-bh.log" | awk '{print $1, $2, $4, $6, $NF}' | head -30
done
echo "== PROBE 2048 (T_u hi only): golden errors"
DELTARULE_CUDA_STATE_BV=wgt DELTARULE_CUDA_PROBE=2048 timeout 60 $B diff --case tests/golden/shared/*.safetensors --backend cuda:small-bh > "$OUT/diff_p2048.log" 2>&1
echo "diff rc=$? $(tail -1 "$OUT/diff_p2048.log")"
grep -E "^###| expected " "$OUT/diff_p2048.log" | awk '{print $1, $2, $4, $6, $NF}' | head -30
echo "== timings"
for bv in wg auto; do
  if [[ $bv == auto ]]; then unset DELTARULE_CUDA_STATE_BV; else export DELTARULE_CUDA_STATE_BV=$bv; fi
  echo "BV=$bv"
  bench_rows --backend cuda --shape gdn-16/32-1x8192 gdn-16/32-1x32768 gdn-16/32-16x1024 gdn-16/32-256x64 --iters 30 | tail -5
done
unset DELTARULE_CUDA_STATE_BV
echo "PROBE=2048"
DELTARULE_CUDA_PROBE=2048 bench_rows --backend cuda --shape gdn-16/32-1x8192 gdn-16/32-16x1024 --iters 30 | tail -3
echo "== ncu (auto = T-form)"
ncu_split gdn-16/32-1x8192 gdn-16/32-16x1024
export DELTARULE_CUDA_STATE_BV=wg
echo "== ncu (BV=wg)"
ncu_split gdn-16/32-1x8192
(cd "$OUT" && tar czf logs_s9a.tgz *.log 2>/dev/null; rm -f *.log)

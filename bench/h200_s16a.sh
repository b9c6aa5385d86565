#!/usr/bin/env bash
# bench/h200_s16a.sh: session 16, first call. Kernel variants selected by DELTARULE_CUDA_MODE bits
# (backends/cuda/src/lib.rs `Modes`): 1 the small-bh T-form intra kernel runs both value heads of
# a GVA group in one CTA (q, k loaded once); 2 the fused T-form does the same per (sequence,
# group); 4 the persistent fused T-form (gdn_prefill_fusedtp); 8 / 16 it prefetches the next
# item's q, k, v / initial states to L2. Correctness of every variant first (golden diffs, the
# device tests that reach them), then the anchors that need them (gdn 16/32 256x64 on chunked,
# 16x1024 on small-bh), two alternating rounds, ncu's kernel split at 16x1024, timelines.
# Predicted: 256x64 0.884 -> ~0.80-0.84 (pairing -3 to -5 %, persistence -3 to -8 %);
# 16x1024 intra kernel -10 %, 0.552 -> ~0.52.
# Carry: .dev/pack (PROBES="256" bash bench/pack_s15.sh) .whl
set -uo pipefail
source bench/h200_env.sh
source bench/h200_lib.sh
B=.dev/bin/deltarule
G="tests/golden/shared/*.safetensors"
echo "== correctness"
for m in 0 2 4 6 14 30; do
  DELTARULE_CUDA_MODE=$m timeout 40 $B diff --case $G --backend cuda:chunked > "$OUT/diff_c$m.log" 2>&1
  echo "mode $m diff cuda:chunked rc=$? $(tail -1 "$OUT/diff_c$m.log") $(grep -E ' expected ' "$OUT/diff_c$m.log" | grep gdn | awk '{printf "%s ", $4}')"
done
for m in 0 1; do
  DELTARULE_CUDA_STATE_BV=wgt DELTARULE_CUDA_MODE=$m timeout 40 $B diff --case $G --backend cuda:small-bh > "$OUT/diff_s$m.log" 2>&1
  echo "mode $m wgt diff cuda:small-bh rc=$? $(tail -1 "$OUT/diff_s$m.log") $(grep -E ' expected ' "$OUT/diff_s$m.log" | grep gdn | awk '{printf "%s ", $4}')"
done
for m in 2 6 30; do
  DELTARULE_CUDA_MODE=$m timeout 60 .dev/bin/cuda_device --test-threads=1 --nocapture chunked_ > "$OUT/dev_c$m.log" 2>&1
  echo "mode $m device chunked_ rc=$?"; grep -E "test result|panicked|sequences on" "$OUT/dev_c$m.log" | head -6
done
DELTARULE_CUDA_STATE_BV=wgt DELTARULE_CUDA_MODE=1 timeout 90 .dev/bin/cuda_device --test-threads=1 --nocapture small_bh > "$OUT/dev_s1.log" 2>&1
echo "mode 1 wgt device small_bh rc=$?"; grep -E "test result|panicked|gva long|errors" "$OUT/dev_s1.log" | head -8
DELTARULE_CUDA_MODE=1 timeout 60 .dev/bin/conformance --test-threads=1 cuda:: > "$OUT/conf1.log" 2>&1
echo "mode 1 conformance cuda:: rc=$? $(grep -E 'test result' "$OUT/conf1.log" | tail -1)"
echo "== timings at ${SECONDS}s"
timeout 60 $B bench --backend cuda:chunked --shape gdn-16/32-256x64 --iters 5 > /dev/null 2>&1
for round in 1 2; do
  for m in 0 2 4 6 12 20 28 14 30; do
    DELTARULE_CUDA_MODE=$m timeout 60 $B bench --backend cuda:chunked --shape gdn-16/32-256x64 --iters 30 2>&1 | grep -E "^gdn" | sed "s/^/r$round m$m /"
  done
  for m in 0 1; do
    DELTARULE_CUDA_MODE=$m timeout 60 $B bench --backend cuda:small-bh --shape gdn-16/32-16x1024 gdn-16/32-64x256 --iters 30 2>&1 | grep -E "^gdn" | sed "s/^/r$round m$m /"
  done
done
echo "== ncu split at ${SECONDS}s"
for m in 0 1; do
  DELTARULE_CUDA_MODE=$m timeout 90 ncu --clock-control none --metrics gpu__time_duration.sum -k "regex:prefill_(intra|state)" -c 4 $B bench --backend cuda:small-bh --shape gdn-16/32-16x1024 --warmup 1 --iters 1 --rotate-mib 1 > "$OUT/ncu$m.log" 2>&1
  echo "mode $m rc=$? $(grep -E "prefill_|gpu__time_duration" "$OUT/ncu$m.log" | sed 's/  */ /g' | awk '/prefill_/{k=$1} /duration/{printf "%s %s us  ", k, $NF}')"
done
echo "== timelines at ${SECONDS}s"
for m in 0 2; do
  DELTARULE_CUDA_MODE=$m DELTARULE_CUDA_PROBE=256 timeout 60 $B bench --backend cuda:chunked --shape gdn-16/32-256x64 --warmup 1 --iters 1 --rotate-mib 1 > "$OUT/tl$m.log" 2>&1
  echo "mode $m rc=$? $(grep -c '^TLT' "$OUT/tl$m.log") lines"
  grep '^TLT' "$OUT/tl$m.log" | awk '{for(i=1;i<=NF;i++) if($i ~ /^(intra|loads|step1|step2|step34)$/){s[$i]+=$(i+1); if(n0[$i]++==0) o[++k]=$i}} END{for(j=1;j<=k;j++) printf "%s %.0f  ", o[j], s[o[j]]/n0[o[j]]; print ""}'
done
for m in 0 1; do
  DELTARULE_CUDA_MODE=$m DELTARULE_CUDA_PROBE=256 timeout 60 $B bench --backend cuda:small-bh --shape gdn-16/32-16x1024 --warmup 1 --iters 1 --rotate-mib 1 > "$OUT/tli$m.log" 2>&1
  echo "mode $m intrat rc=$?"
  grep '^TL ' "$OUT/tli$m.log" | tail -n 60 | awk '{for(i=1;i<=NF;i++) if($i ~ /^(load|cumsum|AP|diag|merge|tprime|step5|total)$/){s[$i]+=$(i+1); if(n0[$i]++==0) o[++k]=$i}} END{for(j=1;j<=k;j++) printf "%s %.0f  ", o[j], s[o[j]]/n0[o[j]]; print ""}'
done
echo "== done at ${SECONDS}s"
(cd "$OUT" && tar czf logs_s16a.tgz *.log 2>/dev/null; rm -f *.log)

#!/usr/bin/env bash
# bench/h200_s16b.sh: session 16, second call. s16a: the intra pairing (mode 1) took 16x1024
# 0.575 -> 0.547 ms (intra kernel 320 -> 289 us); every fused T-form variant was slower (pairing
# 0.936, persistent 0.996 with 136 B of spills, the next-item prefetches 1.09-1.20 against 0.899).
# Now: the fused T-form without pairing (0 B of spills; persistent 8 B), its own prefetches off
# (32: V rows / next chunk, 64: the item's h0), persistent again; the T-form pair with the state
# pass as a programmatic dependent launch (128); the fused T-form's CTA entry/exit on SM 0 (TLS).
# Carry: .dev/pack (PROBES="256" bash bench/pack_s15.sh) .whl
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
G="tests/golden/shared/*.safetensors"
echo "== correctness"
for m in 0 96 4 100; do
  DELTARULE_CUDA_MODE=$m timeout 40 $B diff --case $G --backend cuda:chunked > "$OUT/diff_c$m.log" 2>&1
  echo "mode $m diff cuda:chunked rc=$? $(tail -1 "$OUT/diff_c$m.log") $(grep -E ' expected ' "$OUT/diff_c$m.log" | grep gdn | awk '{printf "%s ", $4}')"
done
DELTARULE_CUDA_STATE_BV=wgt DELTARULE_CUDA_MODE=129 timeout 40 $B diff --case $G --backend cuda:small-bh > "$OUT/diff_s129.log" 2>&1
echo "mode 129 wgt diff cuda:small-bh rc=$? $(tail -1 "$OUT/diff_s129.log") $(grep -E ' expected ' "$OUT/diff_s129.log" | grep gdn | awk '{printf "%s ", $4}')"
for m in 4 96; do
  DELTARULE_CUDA_MODE=$m timeout 60 .dev/bin/cuda_device --test-threads=1 --nocapture chunked_ > "$OUT/dev_c$m.log" 2>&1
  echo "mode $m device chunked_ rc=$?"; grep -E "test result|panicked|sequences on" "$OUT/dev_c$m.log" | head -6
done
DELTARULE_CUDA_STATE_BV=wgt DELTARULE_CUDA_MODE=129 timeout 90 .dev/bin/cuda_device --test-threads=1 --nocapture small_bh > "$OUT/dev_s129.log" 2>&1
echo "mode 129 wgt device small_bh rc=$?"; grep -E "test result|panicked|gva long" "$OUT/dev_s129.log" | head -8
DELTARULE_CUDA_MODE=129 timeout 60 .dev/bin/conformance --test-threads=1 cuda:: > "$OUT/conf129.log" 2>&1
echo "mode 129 conformance cuda:: rc=$? $(grep -E 'test result' "$OUT/conf129.log" | tail -1)"
echo "== timings at ${SECONDS}s"
timeout 60 $B bench --backend cuda:chunked --shape gdn-16/32-256x64 --iters 5 > /dev/null 2>&1
for round in 1 2; do
  for m in 0 32 64 96 4 36 68 100; do
    DELTARULE_CUDA_MODE=$m timeout 60 $B bench --backend cuda:chunked --shape gdn-16/32-256x64 --iters 30 2>&1 | grep -E "^gdn" | sed "s/^/r$round m$m /"
  done
  for m in 0 1 129; do
    DELTARULE_CUDA_MODE=$m timeout 60 $B bench --backend cuda:small-bh --shape gdn-16/32-16x1024 gdn-16/32-64x256 --iters 30 2>&1 | grep -E "^gdn" | sed "s/^/r$round m$m /"
  done
done
echo "== timeline at ${SECONDS}s"
for m in 0 96; do
  DELTARULE_CUDA_MODE=$m DELTARULE_CUDA_PROBE=256 timeout 60 $B bench --backend cuda:chunked --shape gdn-16/32-256x64 --warmup 1 --iters 1 --rotate-mib 1 > "$OUT/tl$m.log" 2>&1
  echo "mode $m rc=$? $(grep -c '^TLT' "$OUT/tl$m.log") TLT $(grep -c '^TLS' "$OUT/tl$m.log") TLS lines"
  grep '^TLT' "$OUT/tl$m.log" | awk '{for(i=1;i<=NF;i++) if($i ~ /^(intra|loads|step1|step2|step34)$/){s[$i]+=$(i+1); if(n0[$i]++==0) o[++k]=$i}} END{for(j=1;j<=k;j++) printf "%s %.0f  ", o[j], s[o[j]]/n0[o[j]]; print ""}'
  # the last launch's CTAs on SM 0 (the log holds the warm-up's too: keep the last 62 lines)
  grep '^TLS' "$OUT/tl$m.log" | tail -n 62 | sed 's/[a-z]*=//g' | awk '{s=$3; e=$4; c=$5; n++; dur+=e-s; cyc+=c; if(n==1||s<mn) mn=s; if(e>mx) mx=e} END{if(n) printf "SM0: %d CTAs, mean %.0f ns = %.0f cycles (%.3f GHz), busy/span %.2f, span %.0f us\n", n, dur/n, cyc/n, cyc/dur, dur/(mx-mn), (mx-mn)/1000}'
done
echo "== done at ${SECONDS}s"
(cd "$OUT" && tar czf logs_s16b.tgz *.log 2>/dev/null; rm -f *.log)

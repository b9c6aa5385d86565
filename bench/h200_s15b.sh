#!/usr/bin/env bash
# bench/h200_s15b.sh: session 15, second call: where the fused T-form's time goes. s15a measured it
# at 1.05 ms on every 16 Ki-token shape from 256x64 to 16x1024 (~30 K SM-cycles a chunk against
# ~9.3 K for the T-form intra stage alone in gdn_prefill_intrat): correctness of the tree (the L2
# prefetch of the chunk's V rows and the next chunk's q, k, v rows added), then the same shapes
# with the state part left out (PROBE 16384), the intra stage left out (PROBE 8192), and the
# clock64 timeline of sampled CTAs (PROBE 256, TLT lines: cycles per phase summed over a CTA's
# chunks and V tiles).
# Carry: .dev/pack (PROBES="256 8192 16384" bash bench/pack_s15.sh) .whl
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
S="gdn-16/32-256x64 gdn-16/32-16x1024"
echo "== correctness"
timeout 60 $B diff --case tests/golden/shared/*.safetensors --backend cuda:chunked > "$OUT/diff.log" 2>&1
echo "diff cuda:chunked rc=$? $(tail -1 "$OUT/diff.log")"
grep -E ' expected ' "$OUT/diff.log" | grep gdn | awk '{print $1, $2, $4, $6, $NF}'
timeout 100 .dev/bin/cuda_device --test-threads=1 --nocapture chunked_long > "$OUT/dev.log" 2>&1
echo "chunked_long rc=$?"; grep -E "sequences on|panicked" "$OUT/dev.log" | head -4
echo "== timings at ${SECONDS}s"
for pr in 0 16384 8192; do
  DELTARULE_CUDA_PROBE=$pr timeout 90 $B bench --backend cuda:chunked --shape $S --iters 30 2>&1 | grep -E "^gdn" | sed "s/^/PROBE=$pr /"
done
timeout 90 $B bench --backend cuda:chunked --shape $S --iters 30 2>&1 | grep -E "^gdn" | sed "s/^/again /"
echo "== timeline at ${SECONDS}s"
for sh in $S; do
  DELTARULE_CUDA_PROBE=256 timeout 60 $B bench --backend cuda:chunked --shape $sh --warmup 1 --iters 1 --rotate-mib 1 > "$OUT/tl.log" 2>&1
  echo "$sh rc=$? $(grep -c '^TLT' "$OUT/tl.log") lines"
  grep '^TLT' "$OUT/tl.log" | awk '{for(i=1;i<=NF;i++) if($i ~ /^(intra|loads|step1|step2|step34)$/){s[$i]+=$(i+1); if(n0[$i]++==0) o[++k]=$i}} END{for(j=1;j<=k;j++) printf "%s %.0f  ", o[j], s[o[j]]/n0[o[j]]; print ""}'
done
(cd "$OUT" && tar czf logs_s15b.tgz *.log 2>/dev/null; rm -f *.log)

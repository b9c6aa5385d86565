#!/usr/bin/env bash
# bench/h200_s15c.sh: session 15, third call: the fused T-form with the S0 tile read once (in the
# accumulator layout, 8-byte accesses in kv; s15b's timeline had ~8 K cycles a tile in step 3-4,
# which read it a second time) and the V tile stored before step 1 (no registers held across
# it: ptxas 20 bytes of spill instead of 48): correctness, then against small-bh on the
# many-pair shapes (two alternating rounds), auto at 256x64, and the timeline.
# Predicted: 256x64 1.04 -> ~0.85-0.95 ms.
# Carry: .dev/pack (PROBES="256" bash bench/pack_s15.sh) .whl
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
echo "== correctness"
timeout 60 $B diff --case tests/golden/shared/*.safetensors --backend cuda:chunked > "$OUT/diff.log" 2>&1
echo "diff cuda:chunked rc=$? $(tail -1 "$OUT/diff.log")"
grep -E ' expected ' "$OUT/diff.log" | grep gdn | awk '{print $1, $2, $4, $6, $NF}'
timeout 150 .dev/bin/cuda_device --test-threads=1 --nocapture chunked_ > "$OUT/dev.log" 2>&1
echo "device tests chunked_ rc=$?"; grep -E " ran, |panicked|sequences on" "$OUT/dev.log" | head -12
echo "== timings at ${SECONDS}s"
S="gdn-16/32-256x64 gdn-16/32-128x128 gdn-16/32-64x256 gdn-16/32-16x1024"
timeout 60 $B bench --backend cuda:chunked --shape gdn-16/32-256x64 --iters 5 > /dev/null 2>&1
for round in 1 2; do
  for b in cuda:chunked cuda:small-bh; do
    timeout 90 $B bench --backend $b --shape $S --iters 30 2>&1 | grep -E "^gdn" | sed "s/^/r$round /"
  done
done
timeout 60 $B bench --backend cuda --shape gdn-16/32-256x64 --iters 30 2>&1 | grep -E "^gdn" | sed "s/^/auto /"
echo "== timeline at ${SECONDS}s"
DELTARULE_CUDA_PROBE=256 timeout 60 $B bench --backend cuda:chunked --shape gdn-16/32-256x64 --warmup 1 --iters 1 --rotate-mib 1 > "$OUT/tl.log" 2>&1
echo "rc=$? $(grep -c '^TLT' "$OUT/tl.log") lines"
grep '^TLT' "$OUT/tl.log" | awk '{for(i=1;i<=NF;i++) if($i ~ /^(intra|loads|step1|step2|step34)$/){s[$i]+=$(i+1); if(n0[$i]++==0) o[++k]=$i}} END{for(j=1;j<=k;j++) printf "%s %.0f  ", o[j], s[o[j]]/n0[o[j]]; print ""}'
(cd "$OUT" && tar czf logs_s15c.tgz *.log 2>/dev/null; rm -f *.log)

#!/usr/bin/env bash
# bench/h200_s9x.sh: session 9: the coop gdn intra stage without the packed Tᵀ its step 4 never
# read (PACK_T false in ws16_gdn.wgsl): golden diffs on wgpu:coop and wgpu, then gdn 16/32 1x8192
# on wgpu:coop (after a throwaway run) with the per-pass split. Carry: .dev/pack .gl
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
for b in wgpu:coop wgpu; do
  timeout 60 $B diff --case tests/golden/shared/*.safetensors --backend $b > "$OUT/diff_${b/:/_}.log" 2>&1
  echo "diff $b rc=$? $(tail -1 "$OUT/diff_${b/:/_}.log")"
done
grep -E ' expected ' "$OUT/diff_wgpu_coop.log" | awk '{print $1, $2, $4, $6, $NF}' | head -4
timeout 40 $B bench --backend wgpu:coop --shape gdn-16/32-1x8192 --iters 10 > /dev/null 2>&1
timeout 60 $B bench --backend wgpu:coop --shape gdn-16/32-1x8192 gdn-16/32-16x1024 --iters 30 --json 2>/dev/null | python3 bench/wgpu_spread.py s9x
timeout 40 $B bench --backend wgpu:coop --shape gdn-16/32-1x8192 --iters 20 2>&1 | grep stages
(cd "$OUT" && tar czf logs_s9x.tgz *.log 2>/dev/null; rm -f *.log)

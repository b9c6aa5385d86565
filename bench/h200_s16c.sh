#!/usr/bin/env bash
# bench/h200_s16c.sh: session 16, third call: gdn 16/32 16x1024 (small-bh, the T-form pair without
# the overlap) with the new variant bits on top of the default 129 (intra pairing, dependent
# launch): 256 the pair's copy wait deferred into the next head, 512 the state pass prefetching a
# later CTA's first inputs to L2, 1024 the state pass walking the sequences last first.
# Correctness of each (golden diffs with the T-form forced, the small-bh device tests), then two
# alternating rounds. Predicted: each -1 to -2 %; 0.544 -> ~0.53 ms together.
# Carry: .dev/pack (bash bench/pack_s15.sh) .whl
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
G="tests/golden/shared/*.safetensors"
echo "== correctness"
for m in 129 385 641 1153 1921; do
  DELTARULE_CUDA_STATE_BV=wgt DELTARULE_CUDA_MODE=$m timeout 40 $B diff --case $G --backend cuda:small-bh > "$OUT/diff_s$m.log" 2>&1
  echo "mode $m wgt diff cuda:small-bh rc=$? $(tail -1 "$OUT/diff_s$m.log") $(grep -E ' expected ' "$OUT/diff_s$m.log" | grep gdn | awk '{printf "%s ", $4}')"
done
DELTARULE_CUDA_STATE_BV=wgt DELTARULE_CUDA_MODE=1921 timeout 90 .dev/bin/cuda_device --test-threads=1 --nocapture small_bh > "$OUT/dev_s.log" 2>&1
echo "mode 1921 wgt device small_bh rc=$?"; grep -E "test result|panicked|gva long" "$OUT/dev_s.log" | head -8
DELTARULE_CUDA_MODE=1921 timeout 60 .dev/bin/conformance --test-threads=1 cuda:: > "$OUT/conf.log" 2>&1
echo "mode 1921 conformance cuda:: rc=$? $(grep -E 'test result' "$OUT/conf.log" | tail -1)"
echo "== timings at ${SECONDS}s"
timeout 60 $B bench --backend cuda:small-bh --shape gdn-16/32-16x1024 --iters 5 > /dev/null 2>&1
for round in 1 2; do
  for m in 1 129 385 641 1153 1921; do
    DELTARULE_CUDA_MODE=$m timeout 60 $B bench --backend cuda:small-bh --shape gdn-16/32-16x1024 gdn-16/32-64x256 --iters 30 2>&1 | grep -E "^gdn" | sed "s/^/r$round m$m /"
  done
done
echo "== done at ${SECONDS}s"
(cd "$OUT" && tar czf logs_s16c.tgz *.log 2>/dev/null; rm -f *.log)

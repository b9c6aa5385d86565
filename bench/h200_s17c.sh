#!/usr/bin/env bash
# bench/h200_s17c.sh: session 17, closing call (the session's device time allows ~450 s of wall
# time, so every part is time-boxed and the results are written to $OUT as they come). Default
# bits 4481 (session 16's 385 + MODE_FT_PIPE: the fused T-form's early first-tile loads, s17b:
# 256x64 0.866 against 0.878 ms for the split products and 0.888 for the fused step 1). Order:
# golden diffs (cuda, cuda:chunked, cuda:small-bh, T-form forced), conformance through auto,
# memcheck of the new fused T-form entry, the anchors through auto, the device-test subsets that
# run the changed kernels, fla 0.6.0 on the same shapes (gdn first, kda last; time-boxed), table.
# (In the call that ran, the interim print of our rows after the anchors was a python -c one-liner
# with a quoting error; mended after the call, the final table was unaffected.)
# Carry: .dev/pack (bash bench/pack_s15.sh) .whl
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
G="tests/golden/shared/*.safetensors"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
echo "== correctness"
for b in cuda cuda:chunked cuda:small-bh; do
  timeout 40 $B diff --case $G --backend $b > "$OUT/diff_${b/:/_}.log" 2>&1
  echo "diff $b rc=$? $(tail -1 "$OUT/diff_${b/:/_}.log")"
done
DELTARULE_CUDA_STATE_BV=wgt timeout 40 $B diff --case $G --backend cuda:small-bh > "$OUT/diff_wgt.log" 2>&1
echo "diff cuda:small-bh with the T-form forced rc=$? $(tail -1 "$OUT/diff_wgt.log")"
grep -E ' expected ' "$OUT/diff_cuda.log" | awk '{print $1, $2, $4, $6, $NF}'
grep -E ' expected ' "$OUT/diff_cuda_chunked.log" | grep gdn | awk '{print "chunked:", $1, $4, $6, $NF}'
timeout 60 .dev/bin/conformance --test-threads=1 --nocapture cuda:: > "$OUT/conf.log" 2>&1
echo "conformance cuda:: rc=$?"; grep -E " ran, |test result" "$OUT/conf.log"
timeout 50 compute-sanitizer --tool memcheck --error-exitcode 9 .dev/bin/cuda_device --test-threads=1 chunked_long > "$OUT/mc1.log" 2>&1
echo "memcheck chunked_long rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/mc1.log" | tail -1)"
echo "== ours at ${SECONDS}s"
timeout 60 $B bench --backend cuda --shape gdn-16/32-1x8192 --iters 5 > /dev/null 2>&1
timeout 100 $B bench --backend cuda --shape anchors --iters 30 --json > "$OUT/ours.jsonl" 2> "$OUT/ours.err"
echo "ours rc=$?"
python3 - "$OUT/ours.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    if l.startswith("{"):
        o = json.loads(l)
        print(f"{o['shape']:<24} {o['rule']:<28} {o['gpu_ms_median']:.4f} ms  host {o['host_us_median']:.1f} us")
PY
echo "== device tests at ${SECONDS}s"
timeout 60 .dev/bin/cuda_device --test-threads=1 --nocapture chunked_ > "$OUT/dev_c.log" 2>&1
echo "cuda_device chunked_ rc=$?"; grep -E "test result|panicked|sequences on" "$OUT/dev_c.log" | head -6
DELTARULE_CUDA_STATE_BV=wgt timeout 60 .dev/bin/cuda_device --test-threads=1 --nocapture small_bh > "$OUT/dev_s.log" 2>&1
echo "cuda_device small_bh (T-form forced) rc=$?"; grep -E "test result|panicked|gva long" "$OUT/dev_s.log" | head -6
echo "== fla at ${SECONDS}s"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
left=$((435 - SECONDS))
PYTHONUNBUFFERED=1 timeout $left python3 bench/fla_bench.py --shapes gdn-16/32-256x64 gdn-16/32-16x1024 gdn-16/32-1x8192 \
  gdn-16/32-1x32768 gdn-4/8-1x8192 gdn-decode-16/32-256x1 kda-32/32-1x8192 kda-64/64-1x8192 > "$OUT/fla.jsonl" 2> "$OUT/fla.err"
echo "fla rc=$? at ${SECONDS}s"; tail -2 "$OUT/fla.err"
python3 bench/anchor_table.py "$OUT/ours.jsonl" "$OUT/fla.jsonl"
echo "== done at ${SECONDS}s"
(cd "$OUT" && tar czf logs_s17c.tgz *.log *.jsonl *.err 2>/dev/null)

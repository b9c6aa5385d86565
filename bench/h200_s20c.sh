#!/usr/bin/env bash
# bench/h200_s20c.sh: session 20, closing call (the final tree; every part time-boxed,
# results written to $OUT as they come): golden diffs (cuda, cuda:chunked, cuda:small-bh, T-form
# forced), conformance through auto, memcheck of the fused T-form and of the many-items state
# pass, racecheck of the fused T-form (gdn golden case), the anchors through auto, fla 0.6.0 on the same shapes (gdn first, kda last), the table,
# then the whole device-test suite while time is left. FlashQLA not run this session (kernels other than the fused T-form and the intra stage unchanged; session 19: h200_s19d.sh).
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
timeout 70 compute-sanitizer --tool memcheck --error-exitcode 9 .dev/bin/cuda_device --test-threads=1 small_bh_many > "$OUT/mc2.log" 2>&1
echo "memcheck small_bh_many rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/mc2.log" | tail -1)"
timeout 80 compute-sanitizer --tool racecheck --error-exitcode 9 $B diff --case tests/golden/shared/gdn_gva_varlen_state.safetensors --backend cuda:chunked > "$OUT/rc1.log" 2>&1
echo "racecheck diff gdn128 cuda:chunked rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/rc1.log" | tail -1)"
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
timeout 60 .dev/bin/cuda_device --test-threads=1 --nocapture small_bh_many > "$OUT/dev_m.log" 2>&1
echo "cuda_device small_bh_many rc=$?"; grep -E "test result|panicked|many items on" "$OUT/dev_m.log" | head -6
echo "== fla at ${SECONDS}s"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
left=$((420 - SECONDS))
PYTHONUNBUFFERED=1 timeout $left python3 bench/fla_bench.py --shapes gdn-16/32-256x64 gdn-16/32-16x1024 gdn-16/32-1x8192 \
  gdn-16/32-1x32768 gdn-4/8-1x8192 gdn-decode-16/32-256x1 kda-32/32-1x8192 kda-64/64-1x8192 > "$OUT/fla.jsonl" 2> "$OUT/fla.err"
echo "fla rc=$? at ${SECONDS}s"; tail -2 "$OUT/fla.err"
python3 bench/anchor_table.py "$OUT/ours.jsonl" "$OUT/fla.jsonl"
left=$((490 - SECONDS))
echo "== the whole device-test suite at ${SECONDS}s (time-boxed: ${left}s)"
if [ $left -gt 30 ]; then
  timeout $left .dev/bin/cuda_device --test-threads=1 --nocapture > "$OUT/dev_all.log" 2>&1
  echo "cuda_device (all) rc=$?"; grep -E "^test |test result|panicked" "$OUT/dev_all.log" | grep -v "^test result: ok. 0" | cut -c1-160 | head -20
fi
echo "== done at ${SECONDS}s"
(cd "$OUT" && tar czf logs_s20c.tgz *.log *.jsonl *.err 2>/dev/null; rm -f *.log *.err)

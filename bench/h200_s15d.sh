#!/usr/bin/env bash
# bench/h200_s15d.sh: session 15, closing call for issue 4 (the tree as committed): correctness
# (the CUDA device tests but the forced-wgmma-pass children, whose small-bh kernels have not
# changed since session 13's checks; conformance through auto; golden diffs on cuda,
# cuda:chunked and cuda:small-bh; compute-sanitizer memcheck of the changed kernels: the fused
# T-form's long/short-sequence test and the golden diffs on cuda:chunked), then every anchor
# through auto and fla 0.6.0 on the same shapes in the same call, and the table.
# Carry: .dev/pack (bash bench/pack_s15.sh) .whl
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== correctness"
timeout 170 .dev/bin/cuda_device --test-threads=1 --nocapture --skip small_bh_conformance_with_each_wgmma_state_pass > "$OUT/dev.log" 2>&1
echo "cuda_device rc=$?"; grep -E " ran, |test result|panicked|sequences on|overlap errors|gva long" "$OUT/dev.log" | head -24
timeout 70 .dev/bin/conformance --test-threads=1 --nocapture cuda:: > "$OUT/conf.log" 2>&1
echo "conformance cuda:: rc=$?"; grep -E " ran, |test result" "$OUT/conf.log"
for b in cuda cuda:chunked cuda:small-bh; do
  timeout 40 $B diff --case tests/golden/shared/*.safetensors --backend $b > "$OUT/diff_${b/:/_}.log" 2>&1
  echo "diff $b rc=$? $(tail -1 "$OUT/diff_${b/:/_}.log")"
done
grep -E ' expected ' "$OUT/diff_cuda.log" | awk '{print $1, $2, $4, $6, $NF}'
echo "== memcheck at ${SECONDS}s"
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 .dev/bin/cuda_device --test-threads=1 chunked_long > "$OUT/mc1.log" 2>&1
echo "memcheck chunked_long rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/mc1.log" | tail -1)"
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 $B diff --case tests/golden/shared/*.safetensors --backend cuda:chunked > "$OUT/mc2.log" 2>&1
echo "memcheck diff cuda:chunked rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/mc2.log" | tail -1)"
echo "== ours at ${SECONDS}s"
timeout 60 $B bench --backend cuda --shape gdn-16/32-1x8192 --iters 5 > /dev/null 2>&1
timeout 100 $B bench --backend cuda --shape anchors --iters 30 --json > "$OUT/ours.jsonl" 2> "$OUT/ours.err"
echo "ours rc=$?"
echo "== fla at ${SECONDS}s"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
left=$((585 - SECONDS))
PYTHONUNBUFFERED=1 timeout $left python3 bench/fla_bench.py > "$OUT/fla.jsonl" 2> "$OUT/fla.err"
echo "fla rc=$? at ${SECONDS}s"; tail -2 "$OUT/fla.err"
python3 - "$OUT/ours.jsonl" "$OUT/fla.jsonl" <<'PY'
import json, sys
def rows(p):
    try: return {j["shape"]: j for j in (json.loads(l) for l in open(p) if l.startswith("{"))}
    except FileNotFoundError: return {}
ours = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
fla = rows(sys.argv[2])
print(f"{'shape':<24} {'rule':<28} {'ours ms':>8} {'host us':>8} {'fla ms':>8} {'fla/ours':>8} {'x floor':>7}")
for o in ours:
    f = fla.get(o["shape"], {}).get("fla_ms")
    r = f"{f / o['gpu_ms_median']:.2f}" if f else "-"
    fs = f"{f:.4f}" if f else "-"
    print(f"{o['shape']:<24} {o['rule']:<28} {o['gpu_ms_median']:>8.4f} {o['host_us_median']:>8.1f} {fs:>8} {r:>8} {o['x_floor']:>7.1f}")
PY
(cd "$OUT" && tar czf logs_s15d.tgz *.log *.jsonl *.err 2>/dev/null; rm -f *.log)

#!/usr/bin/env bash
# bench/h200_s3e.sh (session 3): the wgpu `coop` state pass built through SPIR-V passthrough
# with the GLSL450 memory model (src/coop.rs): golden diffs (probe 0 = coop products, 96 = scalar
# products), conformance through wgpu (auto picks coop where its rows accept the case), and
# timings with the spread of the whole-call times. Carry: .dev/pack .gl
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule

for pr in 0 96; do
  DELTARULE_WGPU_PROBE=$pr timeout 60 $B diff --case tests/golden/shared/*.safetensors --backend wgpu:coop > "$OUT/diff_coop_$pr.log" 2>&1
  echo "probe $pr: rc=$? $(tail -1 "$OUT/diff_coop_$pr.log")"
  grep -E 'FAIL|PASS' "$OUT/diff_coop_$pr.log" | awk '{print $1, $4, $6, $NF}' | head -12
done
export DELTARULE_REQUIRE_WGPU=1
timeout 150 .dev/bin/conformance --test-threads=1 --nocapture wgpu > "$OUT/conf_wgpu.log" 2>&1; echo "conformance wgpu (coop on) rc=$?"
grep -E " ran, " "$OUT/conf_wgpu.log" | head -20
timeout 200 $B bench --backend wgpu:chunked wgpu:coop --shape gdn-16/32-1x8192 kda-32/32-1x8192 --iters 30 --json 2>"$OUT/bench.err" > "$OUT/bench.jsonl"
python3 - "$OUT/bench.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    if not l.startswith("{"): continue
    j = json.loads(l)
    print(f"{j['shape']:<18} {j['backend']:<13} median {j['gpu_ms_median']:.3f} min {j['gpu_ms_min']:.3f} p10 {j['gpu_ms_p10']:.3f} p90 {j['gpu_ms_p90']:.3f} max {j['gpu_ms_max']:.3f} host {j['host_us_median']:.0f} us sets {j['input_sets']} stages {j['stages_ms']}")
PY

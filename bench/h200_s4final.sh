#!/usr/bin/env bash
# bench/h200_s4final.sh: session 4's closing H200 call. First bench/h200_cuda.sh all (CUDA device
# tests, conformance through auto, golden diffs, memcheck, the anchor shapes on every CUDA kernel
# next to flash-linear-attention 0.6.0 in the same call), then the wgpu backend through NVIDIA's
# Vulkan driver (the cooperative-matrix probes, golden diffs on auto = coop and on the f32 chunked
# kernel, conformance, the WGSL target shapes with the spread of the whole-call times).
# Carry: .dev/pack .whl .gl
set -uo pipefail
source bench/h200_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
B=.dev/bin/deltarule
echo "== cuda"
TEST_TIMEOUT=200 SAN_TIMEOUT=150 timeout 420 bash bench/h200_cuda.sh all; echo "h200_cuda.sh rc=$?"
echo "== wgpu (NVIDIA Vulkan)"
$B backends 2>&1 | grep wgpu
DELTARULE_REQUIRE_COOP=1 timeout 60 .dev/bin/wgpu_coop --test-threads=1 > "$OUT/coop_probe.log" 2>&1; echo "coop probes rc=$? $(grep 'test result' "$OUT/coop_probe.log")"
for b in wgpu wgpu:chunked; do timeout 60 $B diff --case tests/golden/shared/*.safetensors --backend $b > "$OUT/diff_${b/:/_}.log" 2>&1; echo "diff $b rc=$? $(tail -1 "$OUT/diff_${b/:/_}.log")"; done
DELTARULE_REQUIRE_WGPU=1 timeout 150 .dev/bin/conformance --test-threads=1 --nocapture wgpu > "$OUT/conf_wgpu.log" 2>&1; echo "conformance wgpu rc=$?"
grep -E " ran, " "$OUT/conf_wgpu.log"
timeout 200 $B bench --backend wgpu:chunked wgpu:coop --shape gdn-16/32-1x8192 kda-32/32-1x8192 gdn-16/32-16x1024 --iters 30 --json 2>"$OUT/wgpu_bench.err" > "$OUT/wgpu_bench.jsonl"; echo "wgpu bench rc=$?"
python3 - "$OUT/wgpu_bench.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    if not l.startswith("{"): continue
    j = json.loads(l); s = j["stages_ms"]
    print(f"{j['shape']:<18} {j['backend']:<13} median {j['gpu_ms_median']:.3f} p10 {j['gpu_ms_p10']:.3f} p90 {j['gpu_ms_p90']:.3f} max {j['gpu_ms_max']:.3f} host {j['host_us_median']:.0f} us | intra {s.get('prefill intra', 0):.3f} state {s.get('prefill state', 0):.3f} output {s.get('prefill output', 0):.3f}")
PY

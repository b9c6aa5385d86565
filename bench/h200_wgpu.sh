for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig;
# h200_wgpu.sh: the wgpu backend on the H200 through NVIDIA's Vulkan driver (issue 3).
#
# Usage, from the repository root on the GPU machine (no cargo there), with the release binary
# built on the development machine and carried along with .gl/ (the Vulkan loader debs):
#     bash bench/h200_wgpu.sh            # adapter info, golden diff, bench, summary table
#     ITERS=100 bash bench/h200_wgpu.sh  # more timed calls
# Prints: `deltarule backends`, the golden-file diff on wgpu, the benchmark of the two target
# shapes with unchecked modules (production), with the 16-column state pass
# (DELTARULE_WGPU_STATE_BV=16, a tuning knob) and with wgpu's bounds checks
# (DELTARULE_WGPU_CHECKED=1), then a short table against the targets (3x fla Triton).
set -uo pipefail

if [ -z "${VK_DRIVER_FILES:-}" ]; then
  for icd in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json \
             /usr/share/vulkan/icd.d/nvidia_icd.json /etc/vulkan/icd.d/nvidia_icd.json; do
    if [ -f "$icd" ]; then export VK_DRIVER_FILES="$icd"; break; fi
  done
fi
echo "VK_DRIVER_FILES=${VK_DRIVER_FILES:-(unset: default loader search)}"
export WGPU_BACKEND=vulkan
# the NVIDIA adapter or nothing: a missing ICD must fail fast, not fall back to llvmpipe
export DELTARULE_WGPU_ADAPTER=${DELTARULE_WGPU_ADAPTER:-NVIDIA}
# never the validation layers (false errors for naga 30's SPIR-V on Debian's layers)
unset WGPU_VALIDATION VK_INSTANCE_LAYERS
BIN=${BIN:-./target/release/deltarule}
ITERS=${ITERS:-50}
SHAPES=${SHAPES:-"gdn-16/32-1x8192 kda-32/32-1x8192"}

echo "== backends"
$BIN backends
echo "== golden diff on wgpu"
$BIN diff --case tests/golden/shared/*.safetensors --backend wgpu
diff_rc=$?

OUT=$(mktemp -d)
echo "== bench (unchecked modules: production)"
$BIN bench --backend wgpu --shape $SHAPES --iters "$ITERS" --json | tee "$OUT/fast.jsonl"
echo "== bench (16-column state pass, DELTARULE_WGPU_STATE_BV=16: twice the sequential workgroups)"
DELTARULE_WGPU_STATE_BV=16 $BIN bench --backend wgpu --shape $SHAPES --iters "$ITERS" --json \
  | tee "$OUT/bv16.jsonl"
echo "== bench (checked modules, DELTARULE_WGPU_CHECKED=1, for comparison)"
DELTARULE_WGPU_CHECKED=1 $BIN bench --backend wgpu --shape $SHAPES --iters "$ITERS" --json \
  | tee "$OUT/checked.jsonl"

echo "== summary (targets: gdn <= 1.75 ms, kda <= 3.0 ms; fla Triton 0.58 / 1.01 ms)"
if command -v python3 >/dev/null; then
  python3 - "$OUT/fast.jsonl" "$OUT/checked.jsonl" "$diff_rc" "$OUT/bv16.jsonl" <<'PY'
import json, sys
def load(p):
    rows = {}
    for line in open(p):
        line = line.strip()
        if line.startswith("{"):
            r = json.loads(line)
            rows[r["shape"]] = r
    return rows
fast, checked, bv16 = load(sys.argv[1]), load(sys.argv[2]), load(sys.argv[4])
target = {"gdn-16/32-1x8192": (1.75, 0.58), "kda-32/32-1x8192": (3.0, 1.01)}
print(f"{'shape':<18} {'gpu ms':>8} {'bv16':>8} {'checked':>8} {'host us':>8} {'TFLOP/s':>8} {'target':>7} {'x fla':>6}  device")
for s, (t, fla) in target.items():
    r = fast.get(s)
    if r is None:
        print(f"{s:<18} (no result)")
        continue
    c = checked.get(s, {}).get("gpu_ms_median", float("nan"))
    b16 = bv16.get(s, {}).get("gpu_ms_median", float("nan"))
    ms = r["gpu_ms_median"]
    print(f"{s:<18} {ms:8.3f} {b16:8.3f} {c:8.3f} {r['host_us_median']:8.1f} {r['tflops']:8.1f} "
          f"{t:7.2f} {ms / fla:6.2f}  {r['device']}")
print("golden diff:", "pass" if sys.argv[3] == "0" else f"FAIL (exit {sys.argv[3]})")
PY
else
  grep -h '"gpu_ms_median"' "$OUT/fast.jsonl"
fi

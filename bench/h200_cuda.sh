#!/usr/bin/env bash
# bench/h200_cuda.sh: the CUDA backend on the H200 in one call (device tool `run`):
#   1. environment (GPU, driver, libcuda/libnvrtc),
#   2. correctness: the CUDA test binaries with DELTARULE_REQUIRE_CUDA=1 and `deltarule diff` on the
#      golden files,
#   3. compute-sanitizer memcheck on a representative subset,
#   4. timings: `deltarule bench` on the anchor shapes (cuda:chunked, cuda:small-bh, auto), then
#      flash-linear-attention 0.6.0 and FlashQLA 0.1.3 (when .fq/fqsite.tar.xz is carried: the
#      unpacked wheels of flash_qla, tilelang 0.1.15, apache-tvm-ffi 0.1.12, torch-c-dlpack-ext,
#      z3-solver 4.15.4, cloudpickle, psutil) on the same shapes, and a table of all three.
# Binaries are built on the development machine and carried in .dev/ (no cargo on the GPU machine):
#   .dev/bin/deltarule, .dev/bin/cuda_device (backends/cuda/tests/device.rs),
#   .dev/bin/conformance (tests/tests/conformance.rs), .dev/cubin (CUBIN cache), .whl (fla wheel).
# Build them from the repository root, all from the same tree (the CUBIN cache file names hash
# the kernel sources embedded in the binaries: a cache from another commit is silently unused and
# every module is compiled by NVRTC on the GPU machine instead):
#   T=${CARGO_TARGET_DIR:-target}; mkdir -p .dev/bin .dev/cubin && rm -f .dev/cubin/*.cubin
#   cargo build --release -p deltarule-cli && cp $T/release/deltarule .dev/bin/
#   cp "$(cargo test --release -p deltarule-cuda --test device --no-run 2>&1 \
#        | sed -n 's/.*Executable .*(\(.*\))$/\1/p')" .dev/bin/cuda_device
#   cp "$(cargo test --release -p deltarule-tests --test conformance --no-run 2>&1 \
#        | sed -n 's/.*Executable .*(\(.*\))$/\1/p')" .dev/bin/conformance
#   LD_LIBRARY_PATH=<dir of libnvrtc.so.13> DELTARULE_PRECOMPILE=$PWD/.dev/cubin \
#     cargo test --release -p deltarule-cuda --test kernels precompile -- --nocapture
# Carry: .dev (and .whl for fla); run: bash bench/h200_cuda.sh all.
# Usage: bash bench/h200_cuda.sh [all|test|sanitize|bench] ; logs under $OUT (or /tmp/out).
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
what=${1:-all}
BIN=.dev/bin
export DELTARULE_CUDA_CACHE=$PWD/.dev/cubin-run
mkdir -p "$DELTARULE_CUDA_CACHE" && cp -n .dev/cubin/*.cubin "$DELTARULE_CUDA_CACHE"/ 2>/dev/null
if ! ldconfig -p | grep -q libnvrtc.so; then
  NV=$(python3 -c 'import nvidia.cu13, os; print(os.path.join(list(nvidia.cu13.__path__)[0], "lib"))' 2>/dev/null \
       || python3 -c 'import nvidia.cuda_nvrtc, os; print(os.path.join(list(nvidia.cuda_nvrtc.__path__)[0], "lib"))' 2>/dev/null)
  export LD_LIBRARY_PATH=${NV:-}:${LD_LIBRARY_PATH:-}
fi
echo "== env"; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
ldconfig -p | grep -E 'libcuda.so|libnvrtc' | head -4; echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
export DELTARULE_REQUIRE_CUDA=1
export DELTARULE_GOLDEN=$PWD/tests/golden/shared
status=0
if [[ $what == all || $what == test ]]; then
  echo "== tests"
  timeout ${TEST_TIMEOUT:-300} $BIN/cuda_device --test-threads=1 --nocapture > "$OUT/cuda_device.log" 2>&1; rc=$?
  grep -E "ran,|test result|FAILED|panicked" "$OUT/cuda_device.log" | head -30; echo "cuda_device rc=$rc"; [[ $rc == 0 ]] || status=1
  timeout ${TEST_TIMEOUT:-300} $BIN/conformance --test-threads=1 --nocapture cuda:: > "$OUT/conformance.log" 2>&1; rc=$?
  grep -E "ran,|test result|FAILED|panicked" "$OUT/conformance.log" | head -20; echo "conformance cuda:: rc=$rc"; [[ $rc == 0 ]] || status=1
  for b in cuda cuda:chunked cuda:small-bh; do
    echo "### diff --backend $b" >> "$OUT/diff.log"
    $BIN/deltarule diff --case tests/golden/shared/*.safetensors --backend $b >> "$OUT/diff.log" 2>&1; rc=$?
    echo "diff --backend $b rc=$rc"; [[ $rc == 0 ]] || status=1
  done
fi
if [[ $what == all || $what == sanitize ]]; then
  echo "== compute-sanitizer memcheck (representative subset)"
  timeout ${SAN_TIMEOUT:-200} compute-sanitizer --tool memcheck --error-exitcode 9 $BIN/cuda_device --test-threads=1 sanitizer_subset > "$OUT/memcheck.log" 2>&1; rc=$?
  grep -E "ERROR SUMMARY|test result" "$OUT/memcheck.log" | tail -3; echo "memcheck rc=$rc"; [[ $rc == 0 ]] || status=1
fi
if [[ $what == all || $what == bench ]]; then
  echo "== bench"
  $BIN/deltarule bench --shape anchors --backend ${OURS_BACKENDS:-cuda:chunked cuda:small-bh cuda} --json > "$OUT/ours.jsonl" 2> "$OUT/ours.err"
  tail -3 "$OUT/ours.err"
  if [[ ${FLA:-1} == 1 ]] && [[ -d .whl ]] && ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
    PYTHONUNBUFFERED=1 timeout ${FLA_TIMEOUT:-600} python3 bench/fla_bench.py ${FLA_ARGS:-} --save-o /tmp/peer_o > "$OUT/fla.jsonl" 2> "$OUT/fla.err"; tail -2 "$OUT/fla.err"
  fi
  # FlashQLA 0.1.3 (TileLang) and its dependencies, unpacked wheels carried as one archive (the
  # wheels are 82 MB, over a call's carry; see bench/NOTES.md "FlashQLA"), in a process of its
  # own: fla would dispatch to it if it could import it
  if [[ ${FQLA:-1} == 1 ]] && [[ -f .fq/fqsite.tar.xz ]]; then
    mkdir -p /tmp/fqsite && xz -dc .fq/fqsite.tar.xz | tar -C /tmp/fqsite -xf -
    FQ_SHAPES=$(python3 -c "import json,sys; print(' '.join(j['shape'] for j in map(json.loads, open(sys.argv[1])) if j['shape'].startswith('gdn-') and 'decode' not in j['shape']))" "$OUT/ours.jsonl" | tr ' ' '\n' | sort -u | tr '\n' ' ')
    PYTHONPATH=/tmp/fqsite LD_LIBRARY_PATH=/tmp/fqsite/z3/lib:${LD_LIBRARY_PATH:-} PYTHONUNBUFFERED=1 \
      timeout ${FQLA_TIMEOUT:-400} python3 bench/fla_bench.py --impl flashqla --graph --save-o /tmp/peer_o --shapes $FQ_SHAPES > "$OUT/fqla.jsonl" 2> "$OUT/fqla.err"
    echo "flashqla rc=$? $(tail -1 "$OUT/fqla.err")"
    python3 bench/fla_bench.py --compare-o /tmp/peer_o --shapes $FQ_SHAPES
  fi
  python3 - "$OUT/ours.jsonl" "$OUT/fla.jsonl" "$OUT/fqla.jsonl" <<'PY'
import json, sys
def rows(p):
    try: return {j["shape"]: j for j in (json.loads(l) for l in open(p) if l.startswith("{"))}
    except FileNotFoundError: return {}
ours = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
fla, fq = rows(sys.argv[2]), rows(sys.argv[3])
def ms(x): return f"{x:.4f}" if x else "-"
print(f"{'shape':<24} {'backend':<14} {'rule':<28} {'ours ms':>8} {'fla ms':>8} {'fla/ours':>8} {'fqla ms':>8} {'fqla gr':>8} {'fqla/ours':>9} {'host us':>8} {'x floor':>7}")
for o in ours:
    f = fla.get(o["shape"], {}).get("fla_ms")
    q = fq.get(o["shape"], {}).get("flashqla_ms")
    qg = fq.get(o["shape"], {}).get("flashqla_graph_ms")
    r = f"{f / o['gpu_ms_median']:.2f}" if f else "-"
    rq = f"{q / o['gpu_ms_median']:.2f}" if q else "-"
    print(f"{o['shape']:<24} {o['backend']:<14} {o['rule']:<28} {o['gpu_ms_median']:>8.4f} {ms(f):>8} {r:>8} {ms(q):>8} {ms(qg):>8} {rq:>9} {o['host_us_median']:>8.1f} {o['x_floor']:>7.1f}")
PY
fi
exit $status

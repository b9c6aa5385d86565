#!/usr/bin/env bash
# bench/gpu_check.sh: on a machine with an NVIDIA GPU, checks deltarule's CUDA backend, then times
# it beside the installed peers (fla, FlashQLA, FlashInfer) on the same named shapes in the same
# run, and prints one table (bench/table.py). Needs bash and python3; the peers need PyTorch.
#
#   bash bench/gpu_check.sh [options]            (from the repository root)
#
# Options (each has an environment variable of the same meaning):
#   --deltarule PATH     the CLI (DELTARULE; default target/release/deltarule)
#   --pack FILE          a tarball of bench/pack.sh: its CLI, test binaries and CUBIN cache are used
#                        (PACK); the options below still override its binaries
#   --device-tests PATH  the CUDA device-test binary, run whole with DELTARULE_REQUIRE_CUDA=1
#                        (DEVICE_TESTS; skipped when not given)
#   --conformance PATH   the conformance test binary, its `cuda::` tests (CONFORMANCE)
#   --wheels DIR         wheels installed (pip, no index, no dependencies) into OUT/site and put on
#                        PYTHONPATH before the peers run, e.g. fla-core and its needs (WHEELS)
#   --shapes "A B ..."   named shapes, op[-decode]-H/HV-NxL, `anchors` or `prefill` (SHAPES; default
#                        anchors)
#   --iters N            timed calls per shape, deltarule and peers alike (ITERS; default 30)
#   --peers "..."        among fla flashqla flashinfer deltarule (the Python wrappers) (PEERS;
#                        default "fla flashqla flashinfer"); one not importable is skipped
#   --graph              the peers also time CUDA-graph replays of a call (GRAPH=1); the table's
#                        ratio then takes a peer's better of eager and graph
#   --backends "..."     CUDA backends the golden diffs run (DIFF_BACKENDS; default
#                        "cuda cuda:chunked cuda:small-bh cuda:recurrent")
#   --out DIR            logs, JSON lines and table.md (OUT; default /tmp/deltarule-gpu-check)
#   --no-check           timings only        --no-bench      checks only
#   --no-sanitizer       no compute-sanitizer memcheck (run when compute-sanitizer is found)
#   --peer-timeout S     seconds a peer's process may take (PEER_TIMEOUT; default 900: fla's KDA
#                        kernels autotune for up to a minute per shape)
# Exit status: 0 all checks passed and deltarule's timings ran, 1 a check failed, 2 a usage error,
# 3 `deltarule bench` failed.
set -uo pipefail

DELTARULE=${DELTARULE:-}
PACK=${PACK:-}
DEVICE_TESTS=${DEVICE_TESTS:-}
CONFORMANCE=${CONFORMANCE:-}
WHEELS=${WHEELS:-}
SHAPES=${SHAPES:-anchors}
ITERS=${ITERS:-30}
PEERS=${PEERS:-fla flashqla flashinfer}
DIFF_BACKENDS=${DIFF_BACKENDS:-cuda cuda:chunked cuda:small-bh cuda:recurrent}
OUT=${OUT:-/tmp/deltarule-gpu-check}
PEER_TIMEOUT=${PEER_TIMEOUT:-900}
GRAPH=${GRAPH:-0}
CHECK=1 BENCH=1 SANITIZER=1

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --deltarule) DELTARULE=$2; shift ;;
    --pack) PACK=$2; shift ;;
    --device-tests) DEVICE_TESTS=$2; shift ;;
    --conformance) CONFORMANCE=$2; shift ;;
    --wheels) WHEELS=$2; shift ;;
    --shapes) SHAPES=$2; shift ;;
    --iters) ITERS=$2; shift ;;
    --peers) PEERS=$2; shift ;;
    --backends) DIFF_BACKENDS=$2; shift ;;
    --out) OUT=$2; shift ;;
    --peer-timeout) PEER_TIMEOUT=$2; shift ;;
    --graph) GRAPH=1 ;;
    --no-check) CHECK=0 ;;
    --no-bench) BENCH=0 ;;
    --no-sanitizer) SANITIZER=0 ;;
    -h|--help) usage 0 ;;
    *) echo "gpu_check.sh: unknown option $1" >&2; usage 2 ;;
  esac
  shift
done

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
failed=0
say() { echo "== $* (${SECONDS}s)"; }
result() {  # name rc [detail]: one line per check, counted as failed unless rc is 0
  local status=ok
  [ "$2" = 0 ] || { status="FAILED (rc $2)"; failed=1; }
  echo "$1: $status${3:+  $3}"
}

# The packed binaries and CUBIN cache (bench/pack.sh), unpacked under OUT/pack.
if [ -n "$PACK" ]; then
  [ -f "$PACK" ] || { echo "gpu_check.sh: no pack at $PACK" >&2; exit 2; }
  rm -rf "$OUT/pack" && mkdir -p "$OUT/pack"
  python3 -c 'import sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    try:
        t.extractall(sys.argv[2], filter="data")
    except TypeError:  # a Python without extraction filters
        t.extractall(sys.argv[2])' "$PACK" "$OUT/pack" || exit 2
  DELTARULE=${DELTARULE:-$OUT/pack/bin/deltarule}
  DEVICE_TESTS=${DEVICE_TESTS:-$OUT/pack/bin/cuda_device}
  CONFORMANCE=${CONFORMANCE:-$OUT/pack/bin/conformance}
fi
DELTARULE=${DELTARULE:-$ROOT/target/release/deltarule}
[ -x "$DELTARULE" ] || { echo "gpu_check.sh: no deltarule CLI at $DELTARULE (cargo build --release -p deltarule-cli, or --pack)" >&2; exit 2; }
for t in "$DEVICE_TESTS" "$CONFORMANCE"; do
  [ -z "$t" ] || [ -x "$t" ] || { echo "gpu_check.sh: no test binary at $t" >&2; exit 2; }
done

# NVRTC: the loader's, else the pip wheel's (nvidia-cuda-nvrtc: nvidia/cu13/lib or
# nvidia/cuda_nvrtc/lib), else a CUDA toolkit's under /usr/local.
if ! ldconfig -p 2>/dev/null | grep -q 'libnvrtc\.so'; then
  NV=$(python3 -c 'import importlib, os
for m in ("nvidia.cu13", "nvidia.cuda_nvrtc"):
    try:
        print(os.path.join(list(importlib.import_module(m).__path__)[0], "lib")); break
    except ImportError:
        pass' 2>/dev/null)
  for d in /usr/local/cuda/lib64 /usr/local/cuda-*/lib64 /usr/local/cuda/targets/*/lib; do
    [ -z "$NV" ] && compgen -G "$d/libnvrtc.so*" > /dev/null && NV=$d
  done
  [ -n "$NV" ] && export LD_LIBRARY_PATH=$NV${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
# The on-disk CUBIN cache: kept between runs under OUT, seeded from the pack.
export DELTARULE_CUDA_CACHE=${DELTARULE_CUDA_CACHE:-$OUT/cubin}
mkdir -p "$DELTARULE_CUDA_CACHE"
[ -d "$OUT/pack/cubin" ] && [ -n "$PACK" ] && cp "$OUT/pack/cubin/"* "$DELTARULE_CUDA_CACHE/" 2>/dev/null
export DELTARULE_REQUIRE_CUDA=1 DELTARULE_GOLDEN=$ROOT/tests/golden/shared

say "device"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv,noheader 2>/dev/null \
  || echo "nvidia-smi not found"
"$DELTARULE" backends 2>&1 | grep -E '^cuda' || echo "deltarule backends: no cuda line"
commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
device=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)

if [ "$CHECK" = 1 ]; then
  say "correctness"
  if [ -n "$DEVICE_TESTS" ]; then
    "$DEVICE_TESTS" --test-threads=1 > "$OUT/device_tests.log" 2>&1
    result "device tests" $? "$(grep -E '^test result' "$OUT/device_tests.log" | tail -1)"
  else
    echo "device tests: skipped (no --device-tests)"
  fi
  if [ -n "$CONFORMANCE" ]; then
    "$CONFORMANCE" --test-threads=1 cuda:: > "$OUT/conformance.log" 2>&1
    result "conformance (cuda)" $? "$(grep -E '^test result' "$OUT/conformance.log" | tail -1)"
  fi
  cases=("$ROOT"/tests/golden/shared/*.safetensors)
  for b in $DIFF_BACKENDS; do
    log="$OUT/diff_${b//:/_}.log"
    "$DELTARULE" diff --case "${cases[@]}" --backend "$b" > "$log" 2>&1
    result "diff $b (${#cases[@]} golden cases)" $? "$(tail -1 "$log")"
  done
  san=$(command -v compute-sanitizer)
  for f in /usr/local/cuda*/bin/compute-sanitizer; do [ -z "$san" ] && [ -x "$f" ] && san=$f; done
  if [ "$SANITIZER" = 1 ] && [ -n "$san" ]; then
    if [ -n "$DEVICE_TESTS" ]; then
      "$san" --tool memcheck --error-exitcode 9 "$DEVICE_TESTS" --test-threads=1 sanitizer_subset > "$OUT/memcheck.log" 2>&1
    else
      "$san" --tool memcheck --error-exitcode 9 "$DELTARULE" diff --case "${cases[@]}" --backend cuda > "$OUT/memcheck.log" 2>&1
    fi
    result "compute-sanitizer memcheck" $? "$(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
  elif [ "$SANITIZER" = 1 ]; then
    echo "compute-sanitizer: not found, memcheck skipped"
  fi
fi

[ "$BENCH" = 1 ] || { say "done"; exit "$failed"; }

say "deltarule bench --backend cuda --shape $SHAPES"
# shellcheck disable=SC2086  # SHAPES is a list
"$DELTARULE" bench --backend cuda --shape $SHAPES --iters "$ITERS" --json > "$OUT/deltarule.jsonl" 2> "$OUT/deltarule.err"
rc=$?
[ $rc = 0 ] || { tail -5 "$OUT/deltarule.err"; echo "deltarule bench: FAILED (rc $rc)"; exit 3; }

if [ -n "$WHEELS" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$OUT/site" "$WHEELS"/*.whl || echo "pip install from $WHEELS failed: peers may be missing"
  export PYTHONPATH=$OUT/site${PYTHONPATH:+:$PYTHONPATH}
  # (z3-solver, which FlashQLA's TileLang loads, keeps its library beside the package)
  if [ -d "$OUT/site/z3/lib" ]; then export LD_LIBRARY_PATH=$OUT/site/z3/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}; fi
fi
peer_files=()
for impl in $PEERS; do
  case $impl in
    fla) mod=fla ;; flashqla) mod=flash_qla ;; flashinfer) mod=flashinfer ;; deltarule) mod=deltarule ;;
    *) echo "gpu_check.sh: unknown peer $impl (fla, flashqla, flashinfer, deltarule)"; continue ;;
  esac
  if ! python3 -c "import torch, $mod" > /dev/null 2>&1; then
    echo "$impl: not importable with torch, skipped"
    continue
  fi
  say "$impl"
  graph=()
  [ "$GRAPH" = 1 ] && graph=(--graph)
  # one process per peer; peers.py hides flash_qla from fla
  # shellcheck disable=SC2086
  PYTHONUNBUFFERED=1 timeout "$PEER_TIMEOUT" python3 "$HERE/peers.py" --impl "$impl" --shapes $SHAPES \
    --iters "$ITERS" ${graph[@]+"${graph[@]}"} > "$OUT/$impl.jsonl" 2> "$OUT/$impl.err"
  rc=$?
  [ $rc = 0 ] || echo "$impl: rc $rc (rows before it stay): $(tail -1 "$OUT/$impl.err")"
  peer_files+=("$OUT/$impl.jsonl")
done

say "table"
python3 "$HERE/table.py" "$OUT/deltarule.jsonl" ${peer_files[@]+"${peer_files[@]}"} \
  --title "deltarule $commit${device:+ on $device}, medians of $ITERS calls" | tee "$OUT/table.md"
if [ "$CHECK" = 1 ]; then
  if [ "$failed" = 0 ]; then echo "checks: all passed"; else echo "checks: SOME FAILED (logs in $OUT)"; fi
fi
exit "$failed"

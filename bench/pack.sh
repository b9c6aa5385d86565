#!/usr/bin/env bash
# bench/pack.sh: builds here (cargo, no GPU needed) what bench/gpu_check.sh runs on a GPU machine
# that has no Rust toolchain, and packs it into one tarball:
#   bin/deltarule     the CLI (release)
#   bin/cuda_device   the CUDA device tests (backends/cuda/tests/device.rs, release)
#   bin/conformance   the conformance suite (tests/tests/conformance.rs, release)
#   cubin/            the CUBIN cache of the builds the tests and the anchors use on Hopper (sm_90a),
#                     compiled here by NVRTC, so the GPU machine spends no time compiling
#
#   bash bench/pack.sh [FILE]        (default target/gpu-pack.tar.xz; from any folder)
#   bash bench/gpu_check.sh --pack target/gpu-pack.tar.xz      (on the GPU machine)
#
# NVRTC_LIB: the folder holding libnvrtc.so (default: the system's when the loader finds it, else
# the pip wheel nvidia-cuda-nvrtc's, else a CUDA toolkit's under /usr/local). Without NVRTC the pack has no CUBIN cache and the GPU machine
# compiles each module on its first use. The cache's file names hash the kernel sources: binaries
# and cache come from the same tree, and a cache from another commit is simply not used.
set -euo pipefail
case "${1:-}" in
  -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
esac
cd "$(dirname "$0")/.."
FILE=${1:-target/gpu-pack.tar.xz}
TARGET=${CARGO_TARGET_DIR:-target}

test_exe() {  # the release test executable of crate $1, test target $2
  cargo test --release -p "$1" --test "$2" --no-run --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == sys.argv[1]:
        print(m["executable"])' "$2" | tail -1
}

if [ -z "${NVRTC_LIB:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libnvrtc\.so'; then
  NVRTC_LIB=$(python3 -c 'import importlib, os
for m in ("nvidia.cu13", "nvidia.cuda_nvrtc"):
    try:
        print(os.path.join(list(importlib.import_module(m).__path__)[0], "lib")); break
    except ImportError:
        pass' 2>/dev/null || true)
  for d in /usr/local/cuda/lib64 /usr/local/cuda-*/lib64; do
    if [ -z "$NVRTC_LIB" ] && compgen -G "$d/libnvrtc.so*" > /dev/null; then NVRTC_LIB=$d; fi
  done
fi

S=$(mktemp -d)
trap 'rm -rf "$S"' EXIT
mkdir -p "$S/bin" "$S/cubin"
echo "== building the CLI and the test binaries (release)"
cargo build --release -p deltarule-cli
cp "$TARGET/release/deltarule" "$S/bin/deltarule"
for pair in "deltarule-cuda device cuda_device" "deltarule-tests conformance conformance"; do
  read -r crate target name <<< "$pair"
  exe=$(test_exe "$crate" "$target")
  [ -n "$exe" ] || { echo "pack.sh: no test executable for $crate --test $target" >&2; exit 1; }
  cp "$exe" "$S/bin/$name"
done
command -v strip > /dev/null && strip "$S"/bin/*

echo "== the CUBIN cache (NVRTC: ${NVRTC_LIB:-the loader path})"
if LD_LIBRARY_PATH=${NVRTC_LIB:+$NVRTC_LIB:}${LD_LIBRARY_PATH:-} DELTARULE_PRECOMPILE=$S/cubin \
  cargo test --release -p deltarule-cuda --test kernels precompile -- --nocapture \
  | grep -E '^precompiled'; then
  :
else
  echo "pack.sh: no CUBIN cache (is NVRTC installed? set NVRTC_LIB): the GPU machine compiles instead"
fi
cubins=$(find "$S/cubin" -name '*.cubin' | wc -l)

mkdir -p "$(dirname "$FILE")"
python3 -c 'import sys, tarfile
with tarfile.open(sys.argv[1], "w:xz") as t:
    for name in ("bin", "cubin"):
        t.add(sys.argv[2] + "/" + name, arcname=name)' "$FILE" "$S"
echo "== $FILE: $(du -h "$FILE" | cut -f1) ($cubins CUBINs)"

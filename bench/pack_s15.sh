#!/usr/bin/env bash
# bench/pack_s15.sh: builds here (no GPU needed) what the session-15 CUDA device scripts carry:
# this tree's deltarule, the CUDA device-test binary (cuda_device), the conformance binary and the
# CUBIN cache of the Hopper builds (so device time is not spent in NVRTC; the cache file names hash
# the kernel sources, so a cache from another tree is silently unused), stripped and packed as
# .dev/pack/dev.tar.xz; fla 0.6.0's wheel in .whl. Carry: .dev/pack .whl
# Usage: [PROBES="256 8192"] bash bench/pack_s15.sh   (from the repository root; needs the NVRTC wheel: set NVRTC_LIB
# to its nvidia/cu13/lib, default the pyenv path of the development machine)
set -euo pipefail
cd "$(dirname "$0")/.."
NVRTC_LIB=${NVRTC_LIB:-/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/nvidia/cu13/lib}
exe() {  # the test executable of crate $1, test target $2
  cargo test --release -p "$1" --test "$2" --no-run --message-format=json 2>/dev/null \
    | python3 -c 'import sys, json
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == sys.argv[1]:
        print(m["executable"])' "$2"
}
cargo build --release -p deltarule-cli
S=$(mktemp -d); mkdir -p "$S/bin" "$S/cubin" .dev/pack .whl
cp target/release/deltarule "$S/bin/deltarule"
cp "$(exe deltarule-tests conformance)" "$S/bin/conformance"
cp "$(exe deltarule-cuda device)" "$S/bin/cuda_device"
strip "$S"/bin/*
LD_LIBRARY_PATH="$NVRTC_LIB" DELTARULE_PRECOMPILE="$S/cubin" \
  cargo test --release -p deltarule-cuda --test kernels precompile -- --nocapture | grep precompiled
# probe builds of gdn K = V = 128 (PROBES="256 8192": DELTARULE_CUDA_PROBE values a script sets)
for pr in ${PROBES:-}; do
  LD_LIBRARY_PATH="$NVRTC_LIB" DELTARULE_PRECOMPILE="$S/cubin" DELTARULE_CUDA_PROBE=$pr \
    DELTARULE_PRECOMPILE_ONLY=gdn_prefill:128:128 \
    cargo test --release -p deltarule-cuda --test kernels precompile -- --nocapture | grep precompiled
done
tar -C "$S" -cf - bin cubin | xz -T2 > .dev/pack/dev.tar.xz
rm -rf "$S"
if ! ls .whl/fla_core-0.6.0-py3-none-any.whl > /dev/null 2>&1; then
  (cd .whl && pip download -q --no-deps fla-core==0.6.0)
fi
du -ch .dev/pack .whl | tail -1

#!/usr/bin/env bash
# bench/fq_pack.sh: builds .fq/fqsite.tar.xz, FlashQLA 0.1.3 and its dependencies for the H200's
# Python 3.12 as one archive of unpacked wheels (bench/h200_cuda.sh extracts it to /tmp/fqsite and
# runs bench/fla_bench.py --impl flashqla with it). The wheels are 82 MB, over a device call's
# 64 MiB carry; unpacked, with z3's duplicate copies of libz3 (the .data/bin one and libz3.so)
# dropped and the rest xz-compressed, 36 MB. Runs here (PyPI reachable), ~4 minutes on 2 cores.
# Carry .fq in the call (add /.fq/ to .git/info/exclude).
set -euo pipefail
cd "$(dirname "$0")/.."
W=$(mktemp -d); S=$(mktemp -d)
for p in flash-qla==0.1.3 tilelang==0.1.15 apache-tvm-ffi==0.1.12 torch-c-dlpack-ext==0.1.5 \
         z3-solver==4.15.4.0 cloudpickle psutil; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$W" "$p"
done
for w in "$W"/*.whl; do unzip -q -o "$w" -d "$S"; done
rm -rf "$S"/z3_solver-*.data
if cmp -s "$S/z3/lib/libz3.so" "$S/z3/lib/libz3.so.4.15"; then
  rm "$S/z3/lib/libz3.so" && ln -s libz3.so.4.15 "$S/z3/lib/libz3.so"
fi
mkdir -p .fq
tar -C "$S" -cf - . | xz -T2 -9 > .fq/fqsite.tar.xz
rm -rf "$W" "$S"
ls -la .fq/fqsite.tar.xz

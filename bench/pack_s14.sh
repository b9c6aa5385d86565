#!/usr/bin/env bash
# bench/pack_s14.sh: builds here (no GPU needed) what the session-14 device scripts carry: this
# tree's deltarule and conformance test binary, a previous deltarule for same-call comparisons
# (argument 1, default: none), stripped and packed as .dev/pack/dev.tar.xz; fla 0.6.0's wheel in
# .whl; the Vulkan loader packages in .gl (the device README's list). Carry: .dev/pack .gl .whl
# Usage: bash bench/pack_s14.sh [PREV_DELTARULE]   (from the repository root)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p deltarule-cli
CONF=$(cargo test --release -p deltarule-tests --test conformance --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import sys, json
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "conformance":
        print(m["executable"])')
S=$(mktemp -d); mkdir -p "$S/bin" .dev/pack .whl
cp target/release/deltarule "$S/bin/deltarule"
cp "$CONF" "$S/bin/conformance"
if [ -n "${1:-}" ]; then cp "$1" "$S/bin/deltarule_prev"; fi
strip "$S"/bin/*
tar -C "$S" -cf - bin | xz -T2 > .dev/pack/dev.tar.xz
rm -rf "$S"
if ! ls .whl/fla_core-0.6.0-py3-none-any.whl > /dev/null 2>&1; then
  (cd .whl && pip download -q --no-deps fla-core==0.6.0)
fi
if ! ls .gl/*.deb > /dev/null 2>&1; then
  mkdir -p .gl /tmp/amd64/partial
  o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
  # shellcheck disable=SC2086
  apt-get $o update -qq
  # shellcheck disable=SC2086
  (cd .gl && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
fi
du -ch .dev/pack .gl .whl | tail -1

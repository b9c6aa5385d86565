#!/usr/bin/env bash
# bench/pack_s12w.sh: builds here (no GPU needed) everything bench/h200_s12w.sh carries to the H200:
#   .dev/pack/dev.tar.xz  this tree's deltarule and conformance binaries and session 11's deltarule
#                         (fc8828b, built in a worktree under /tmp), stripped;
#   .gl/*.deb             the Vulkan loader packages (the device README's list);
#   .whl/                 the fla_core 0.6.0 wheel.
# Then call the device tool: run `bash bench/h200_s12w.sh` with carry [".dev/pack", ".gl", ".whl"].
# Usage: bash bench/pack_s12w.sh   (from the repository root; ~3 minutes with warm target dirs)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
T=${CARGO_TARGET_DIR:-target}
mkdir -p .dev/bin .dev/pack
cargo build --release -p deltarule-cli
cp "$T/release/deltarule" .dev/bin/
conf=$(cargo test --release -p deltarule-tests --test conformance --no-run 2>&1 \
  | sed -n 's/.*Executable .*(\(.*\))$/\1/p')
[ -n "$conf" ] || { echo "no conformance test binary" >&2; exit 1; }
cp "$conf" .dev/bin/conformance
OLD=/tmp/deltarule-s11
if [ ! -d "$OLD" ]; then git worktree add -f "$OLD" fc8828b; fi
(cd "$OLD" && CARGO_TARGET_DIR="$OLD/target" cargo build --release -p deltarule-cli)
cp "$OLD/target/release/deltarule" .dev/bin/deltarule_s11
strip .dev/bin/deltarule .dev/bin/deltarule_s11 .dev/bin/conformance
tar -C .dev -cf - bin | xz -T2 > .dev/pack/dev.tar.xz
if ! ls .gl/*.deb > /dev/null 2>&1; then
  mkdir -p .gl /tmp/amd64/partial
  o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
  # shellcheck disable=SC2086
  apt-get $o update -qq
  # shellcheck disable=SC2086
  (cd .gl && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
fi
if ! ls .whl/fla_core-0.6.0-*.whl > /dev/null 2>&1; then
  python3 -m pip download -q --no-deps -d .whl fla-core==0.6.0
fi
du -ch .dev/pack .gl .whl | tail -1
echo "ready: device run 'bash bench/h200_s12w.sh' with carry .dev/pack .gl .whl (from $ROOT)"

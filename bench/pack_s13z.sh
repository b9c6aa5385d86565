#!/usr/bin/env bash
# bench/pack_s13z.sh: builds here (no GPU needed) what bench/h200_s13z.sh carries to the H200: this
# tree's deltarule with bench/patches/s13z-state-late.patch applied (in a worktree under /tmp, so
# the checkout stays clean), stripped and packed as .dev/pack/dev.tar.xz, and the Vulkan loader
# packages in .gl (the device README's list). Then: device run `bash bench/h200_s13z.sh` with
# carry [".dev/pack", ".gl"].
# Usage: bash bench/pack_s13z.sh   (from the repository root; only at commits before 62fb240,
# which applied the patch to the tree and removed it: the call ran in session 14, see NOTES)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
W=/tmp/deltarule-s13z
rm -rf "$W" && git worktree prune && git worktree add -f --detach "$W" HEAD
(cd "$W" && git apply "$ROOT/bench/patches/s13z-state-late.patch" \
  && CARGO_TARGET_DIR="$ROOT/target/s13z" cargo build --release -p deltarule-cli)
S=$(mktemp -d); mkdir -p "$S/bin" .dev/pack
cp "$ROOT/target/s13z/release/deltarule" "$S/bin/" && strip "$S/bin/deltarule"
tar -C "$S" -cf - bin | xz -T2 > .dev/pack/dev.tar.xz
rm -rf "$S"; git worktree remove --force "$W"
if ! ls .gl/*.deb > /dev/null 2>&1; then
  mkdir -p .gl /tmp/amd64/partial
  o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
  # shellcheck disable=SC2086
  apt-get $o update -qq
  # shellcheck disable=SC2086
  (cd .gl && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
fi
du -ch .dev/pack .gl | tail -1
echo "ready: device run 'bash bench/h200_s13z.sh' with carry .dev/pack .gl"

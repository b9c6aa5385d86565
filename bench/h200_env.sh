# bench/h200_env.sh: sourced by the bench/h200_*.sh scripts on the H200 machine (device tool `run`):
# the output folder, the Vulkan loader (when .gl is carried), NVRTC on the loader path (the system
# one, else the pip wheel's), the carried CUBIN cache (.dev/cubin, so device time is not spent in
# NVRTC), the test switches and the wgpu adapter (NVIDIA's Vulkan driver).
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
# the binaries and CUBINs packed on the development machine (stripped, xz: a seventh of the
# carry), e.g. tar -C .dev -cf - bin cubin | xz -T2 > .dev/pack/dev.tar.xz
if [ -f .dev/pack/dev.tar.xz ]; then
  xz -dc .dev/pack/dev.tar.xz | tar -C .dev -xf -
fi
if ls .gl/*.deb > /dev/null 2>&1; then
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
if ! ldconfig -p | grep -q libnvrtc.so; then
  NV=$(python3 -c 'import nvidia.cu13, os; print(os.path.join(list(nvidia.cu13.__path__)[0], "lib"))' 2>/dev/null)
  export LD_LIBRARY_PATH=${NV:-}:${LD_LIBRARY_PATH:-}
fi
export DELTARULE_CUDA_CACHE=/tmp/deltarule-cubin
mkdir -p "$DELTARULE_CUDA_CACHE" && cp .dev/cubin/*.cubin "$DELTARULE_CUDA_CACHE"/ 2> /dev/null
export DELTARULE_REQUIRE_CUDA=1 DELTARULE_GOLDEN=$PWD/tests/golden/shared
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json WGPU_BACKEND=vulkan DELTARULE_WGPU_ADAPTER=NVIDIA

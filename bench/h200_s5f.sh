#!/usr/bin/env bash
# bench/h200_s5f.sh (session 5, call 6): kda step 2 in two independent warp groups (CUDA-core
# tiles straight from Ks, Qs, Γ; tensor-core warps build their own slice operands).
# Correctness first (device tests, conformance, diffs, memcheck subset), then times (auto, the
# timeline probe).
# Carry: .dev/pack
# (the same commands as bench/h200_s5e.sh, on this call's kernel build)
exec bash bench/h200_s5e.sh

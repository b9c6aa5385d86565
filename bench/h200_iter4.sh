#!/usr/bin/env bash
# bench/h200_iter4.sh: CUDA device tests with both state-pass widths, the 16- vs 32-column state
# pass on few-pair shapes, per-kernel durations (ncu) of small-bh gdn 16/32 1x8192, and the WGSL
# whole-call vs per-pass gap (single input set, longer warm-up).
# Carry: target/release/deltarule, .dev/bin, .dev/cubin, .gl.
set -uo pipefail
source bench/h200_env.sh
B=./target/release/deltarule
for bv in auto 32 16; do
  if [[ $bv == auto ]]; then unset DELTARULE_CUDA_STATE_BV; else export DELTARULE_CUDA_STATE_BV=$bv; fi
  timeout 200 .dev/bin/cuda_device --test-threads=1 --nocapture > $OUT/dev_$bv.log 2>&1; echo "device tests (state bv $bv) rc=$?"
  grep -E " ran, |panicked|FAIL" $OUT/dev_$bv.log | grep -v "0 failed" | head; grep "test result" $OUT/dev_$bv.log
  $B diff --case tests/golden/shared/*.safetensors --backend cuda:small-bh > $OUT/diffsb_$bv.log 2>&1; echo "diff small-bh rc=$? $(grep comparisons $OUT/diffsb_$bv.log)"
done
unset DELTARULE_CUDA_STATE_BV
for bv in 16 32; do echo "-- state bv $bv"; DELTARULE_CUDA_STATE_BV=$bv $B bench --backend cuda:small-bh --shape gdn-4/8-1x8192 gdn-16/32-1x8192 kda-32/32-1x8192 --iters 20 2>/dev/null | tail -3; done
timeout 100 ncu --clock-control none -k "regex:gdn_prefill_(intra|state)" -c 2 --section SpeedOfLight $B bench --backend cuda:small-bh --shape gdn-16/32-1x8192 --warmup 0 --iters 1 --rotate-mib 1 2>&1 | grep -E "gdn_prefill|Duration"
timeout 100 ncu --clock-control none -k "regex:kda_prefill_(intra|state)" -c 2 --section SpeedOfLight $B bench --backend cuda:small-bh --shape kda-32/32-1x8192 --warmup 0 --iters 1 --rotate-mib 1 2>&1 | grep -E "kda_prefill|Duration"
echo "-- wgpu gdn: default, one input set, warm-up 30"
$B bench --backend wgpu --shape gdn-16/32-1x8192 --iters 10 2>/dev/null | tail -2
$B bench --backend wgpu --shape gdn-16/32-1x8192 --iters 10 --rotate-mib 0 2>/dev/null | tail -2
$B bench --backend wgpu --shape gdn-16/32-1x8192 --iters 10 --warmup 30 2>/dev/null | tail -2
$B bench --backend wgpu --shape gdn-16/32-1x8192 --iters 10 --json 2>/dev/null | head -3 | cut -c1-600
echo "-- wgpu state pass variants (gdn, kda)"
$B bench --backend wgpu --shape kda-32/32-1x8192 --iters 10 2>/dev/null | tail -2
DELTARULE_WGPU_STATE_WS=0 $B bench --backend wgpu --shape gdn-16/32-1x8192 --iters 10 2>/dev/null | tail -1
DELTARULE_WGPU_STATE_BV=16 $B bench --backend wgpu --shape gdn-16/32-1x8192 --iters 10 2>/dev/null | tail -1
$B diff --case tests/golden/shared/*.safetensors --backend wgpu > $OUT/diff_wgpu.log 2>&1; echo "diff wgpu rc=$? $(grep comparisons $OUT/diff_wgpu.log)"

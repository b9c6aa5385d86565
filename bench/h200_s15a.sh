#!/usr/bin/env bash
# bench/h200_s15a.sh: session 15, first call: the fused T-form (`gdn_prefill_fusedt`, the
# `chunked` kernel for gdn with a dense f32 final state) checked, then timed against the classic
# fused kernel (DELTARULE_CUDA_FUSED=classic) and small-bh (auto's pick there) on the many-pair
# shapes, two alternating rounds.
# Why: at 256x64 the T-form pair moves ~2.9 GB (intra block out and back, k, q, v twice) and runs
# its state pass one CTA an SM; the fused T-form reads q, k, v, g, β and h0 once and writes o and
# the final state (~1.6 GB, ~0.4 ms of DRAM), two CTAs an SM (128 registers, ~113 KB shared).
# Predicted: 256x64 1.155 -> ~0.6-0.8 ms; 16x1024 (16 serial chunks a CTA, 512 CTAs on 264
# slots) ~0.5-0.7 ms; golden errors like the T-form pair's (o 2.3e-3 to 3.4e-3).
# Carry: .dev/pack (bench/pack_s15.sh) .whl
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
echo "== correctness"
for f in "" classic; do
  DELTARULE_CUDA_FUSED=$f timeout 60 $B diff --case tests/golden/shared/*.safetensors --backend cuda:chunked > "$OUT/diff_chunked_$f.log" 2>&1
  echo "diff cuda:chunked FUSED=${f:-t} rc=$? $(tail -1 "$OUT/diff_chunked_$f.log")"
done
grep -E ' expected ' "$OUT/diff_chunked_.log" | awk '{print $1, $2, $4, $6, $NF}'
timeout 200 .dev/bin/cuda_device --test-threads=1 --nocapture chunked_ > "$OUT/dev.log" 2>&1
echo "device tests chunked_ rc=$?"; grep -E " ran, |panicked|FAIL|sequences on|error" "$OUT/dev.log" | head -16
echo "== timings at ${SECONDS}s"
S="gdn-16/32-256x64 gdn-16/32-128x128 gdn-16/32-64x256 gdn-16/32-32x512 gdn-16/32-16x1024"
timeout 60 $B bench --backend cuda:chunked --shape gdn-16/32-256x64 --iters 5 > /dev/null 2>&1
for round in 1 2; do
  echo "-- round $round: fused T-form (cuda:chunked)"
  timeout 90 $B bench --backend cuda:chunked --shape $S --iters 30 2>&1 | grep -E "^(gdn|shape)"
  echo "-- round $round: classic fused"
  DELTARULE_CUDA_FUSED=classic timeout 90 $B bench --backend cuda:chunked --shape $S --iters 30 2>&1 | grep -E "^gdn"
  echo "-- round $round: small-bh"
  timeout 90 $B bench --backend cuda:small-bh --shape $S --iters 30 2>&1 | grep -E "^gdn"
  [[ $SECONDS -gt 420 ]] && break
done
echo "== ncu fused T-form 256x64 at ${SECONDS}s"
timeout 90 ncu --clock-control none -k regex:fusedt -c 1 --metrics gpu__time_duration.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem,launch__registers_per_thread,dram__bytes.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active $B bench --backend cuda:chunked --shape gdn-16/32-256x64 --warmup 0 --iters 1 --rotate-mib 1 > "$OUT/ncu.log" 2>&1
echo "ncu rc=$?"; grep -E "^\s+(gpu__|sm__|launch__|dram__)" "$OUT/ncu.log" | sed 's/  */ /g'
(cd "$OUT" && tar czf logs_s15a.tgz *.log 2>/dev/null; rm -f *.log)

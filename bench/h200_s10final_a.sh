#!/usr/bin/env bash
# bench/h200_s10final_a.sh: session 10's closing H200 call, part 1 (correctness of the tree as
# committed, the overlapped T-form pair in it): the CUDA device tests, conformance through auto
# and golden diffs on cuda, cuda:chunked and cuda:small-bh (bench/h200_cuda.sh test); the small-bh
# suite with each wgmma pass forced (the T-form one overlapped: the test problems have few state
# CTAs); generated gdn 16/32 problems at 1x8192 and 1x32768 through auto (overlapped) against
# float64, with the overlap on and off; compute-sanitizer memcheck with the T-form forced (so
# overlapped). Part 2 (h200_s10final_b.sh) times. Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
echo "== cuda test (auto)"
TEST_TIMEOUT=150 timeout 300 bash bench/h200_cuda.sh test 2>&1 | tail -14
echo "== small-bh suite, each wgmma pass forced"
timeout 150 .dev/bin/cuda_device --test-threads=1 --nocapture small_bh_conformance_with_each_wgmma_state_pass > "$OUT/t.log" 2>&1; echo "rc=$?"
grep -E "STATE_BV|test result" "$OUT/t.log" | head -8
echo "== generated problems through auto, overlap on / off (relative L2 against float64)"
P1="--op gdn --tokens 8192 --seqs 1 --heads 16 --v-heads 32 --l2norm --initial-state dense --checkpoint-every 1024 --seed 3"
P2="--op gdn --tokens 32768 --seqs 1 --heads 16 --v-heads 32 --seed 4"
for ov in auto off; do
  i=0
  for P in "$P1" "$P2"; do
    i=$((i+1))
    DELTARULE_CUDA_OVERLAP=$ov timeout 150 $B diff $P --backend cuda > "$OUT/g_${ov}_$i.log" 2>&1
    echo "ov=$ov P$i rc=$? $(grep -E 'small-bh (o|final_state|checkpoints) ' "$OUT/g_${ov}_$i.log" | awk '{print $4, $6, $NF}' | tr '\n' ' ')"
  done
done
echo "== memcheck, T-form forced (overlapped)"
DELTARULE_CUDA_STATE_BV=wgt SAN_TIMEOUT=170 timeout 190 bash bench/h200_cuda.sh sanitize 2>&1 | tail -3
echo "== golden errors through auto (relative L2 against float64)"
grep -E "^###| expected " "$OUT/diff.log" | awk '{print $1, $2, $4, $6, $NF}' | head -30
(cd "$OUT" && tar czf logs_a.tgz *.log 2>/dev/null; rm -f *.log)

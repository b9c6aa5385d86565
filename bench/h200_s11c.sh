#!/usr/bin/env bash
# bench/h200_s11c.sh: session 11, call 4: the 16-column mma.sync state pass gave wrong o (final
# state right) on generated gdn 4/8 problems in s11b. Which passes fail on the same problem, does
# the error move between runs (a race), does it depend on the heads, and racecheck on one
# sequence with the 16-column pass forced. Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
B=.dev/bin/deltarule
P2="--op gdn --seqlens 0,64,700,1,0,129,3000 --heads 4 --v-heads 8 --initial-state dense --seed 8"
P3="--op gdn --seqlens 3000 --heads 4 --v-heads 8 --seed 8"
P4="--op gdn --seqlens 3000 --heads 8 --v-heads 8 --seed 8"
P5="--op gdn --seqlens 3000 --heads 4 --v-heads 8 --seed 8 --dtype f16"
P6="--op kda --seqlens 3000 --heads 4 --v-heads 4 --seed 8"
run() {  # name, env, problem
  env $2 timeout 60 $B diff $3 --backend cuda:small-bh > "$OUT/$1.log" 2>&1
  echo "$1 [$2] rc=$? $(grep -E ' (o|final_state) +f64' "$OUT/$1.log" | awk '{print $4, $6}' | tr '\n' ' ')"
}
for bv in 16 16 32 64 wg wgt; do run "p2_$bv" DELTARULE_CUDA_STATE_BV=$bv "$P2"; done
for P in P3 P4 P5 P6; do run "${P}_16" DELTARULE_CUDA_STATE_BV=16 "${!P}"; done
run "P3_32" DELTARULE_CUDA_STATE_BV=32 "$P3"
grep -m3 -E "worst|FAIL" "$OUT/p2_16.log" | cut -c1-260
echo "== racecheck, 16-column pass, one sequence of 3000 tokens"
DELTARULE_CUDA_STATE_BV=16 timeout 200 compute-sanitizer --tool racecheck --racecheck-report hazard --print-limit 20 $B diff $P3 --backend cuda:small-bh > "$OUT/race.log" 2>&1
echo "racecheck rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard|Race|at 0x|in .*prefill" "$OUT/race.log" | head -30
(cd "$OUT" && tar czf logs_c.tgz *.log 2>/dev/null; rm -f *.log)

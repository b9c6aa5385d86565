#!/usr/bin/env bash
# bench/h200_s11f.sh: for the next session (not run in session 11: device budget spent): the wgmma W/U pass's stages released by every
# warpgroup thread (was: lane 0 of each warp after __syncwarp; racecheck flagged WAR hazards on
# the e^Γlast reads, s11e). Racecheck of that pass forced (kda and gdn), the small-bh tests with
# it forced, kda anchors timed (s11d's same-tree times: 0.626 / 1.125 ms). Carry: .dev/pack
# (Needs the kernel change of bench/NOTES.md, session 11: every warpgroup thread arrives on the
# stage's empty barrier in smallbh_state_wg. It is bench/patches/s11f-wg-release.patch: `git apply`
# it here, build .dev/pack as bench/h200_cuda.sh's header says, run this, then commit the change
# or revert it. Session 12 checked it with ptxas -v through NVRTC, sm_90a, K = V = 128: spills
# unchanged, kda_prefill_statewg 292 bytes and gdn_prefill_statewg 320 bytes before and after.)
set -uo pipefail
source bench/h200_env.sh
source bench/h200_lib.sh  # (rc: racecheck)
RC_TIMEOUT=40
rc kda_wg DELTARULE_CUDA_STATE_BV=wg cuda:small-bh "--op kda --seqlens 0,300,1,700 --heads 4 --v-heads 4 --initial-state dense --seed 9"
rc gdn_wg DELTARULE_CUDA_STATE_BV=wg cuda:small-bh "--op gdn --seqlens 0,300,1,700 --heads 4 --v-heads 8 --initial-state dense --checkpoint-every 128 --seed 9"
DELTARULE_CUDA_STATE_BV=wg timeout 60 .dev/bin/cuda_device --test-threads=1 --nocapture small_bh_ > "$OUT/t.log" 2>&1; echo "small-bh tests, wg forced: rc=$?"
grep -E " ran, |gva long" "$OUT/t.log" | head -6
timeout 60 $B bench --backend cuda --shape kda-32/32-1x8192 kda-64/64-1x8192 --iters 30 2>&1 | grep -E "^kda" | awk '{print "ours", $1, $4, $5}'
(cd "$OUT" && tar czf logs_f.tgz *.log 2>/dev/null; rm -f *.log)

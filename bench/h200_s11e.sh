#!/usr/bin/env bash
# bench/h200_s11e.sh: session 11, racecheck sweep (shared-memory hazards) of the other prefill
# kernel families on problems longer than the suite's, after s11c found one in the gdn W/U intra
# kernel: kda small-bh (auto) and chunked, the overlapped gdn T-form pair (auto at 4/8), the gdn
# T-form pair without overlap, the kda wgmma pass. Carry: .dev/pack
set -uo pipefail
source bench/h200_env.sh
source bench/h200_lib.sh  # (rc: racecheck; the helper moved there after this call ran)
K1="--op kda --seqlens 0,700,1,2000 --heads 4 --v-heads 4 --initial-state dense --seed 9"
G1="--op gdn --seqlens 0,700,1,2000 --heads 4 --v-heads 8 --initial-state dense --checkpoint-every 128 --seed 9"
G2="--op gdn --seqlens 1000,900 --heads 16 --v-heads 32 --initial-state dense --seed 9"
K2="--op kda --seqlens 1000 --heads 64 --v-heads 64 --seed 9"
rc kda_sbh X=1 cuda:small-bh "$K1"
rc kda_chunked X=1 cuda:chunked "$K1"
rc gdn_ovpair X=1 cuda "$G1"
rc gdn_tform X=1 cuda "$G2"
rc kda_wg X=1 cuda "$K2"
(cd "$OUT" && tar czf logs_e.tgz *.log 2>/dev/null; rm -f *.log)

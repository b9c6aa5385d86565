#!/usr/bin/env bash
# bench/h200_s12w.sh: for the next session (written in session 12, which had no device time: 79 s
# were left, under the 4 minutes a machine needs to start). Issue 3's WGSL changes of session 12
# against the last tree measured on the H200, in one call, fla 0.6.0 in the same call:
#   - the T solve by doubling (intra.wgsl, every intra stage, gdn and kda, coop or not),
#   - kda's intra step 2 through 16-token reference points (kda_prefill_intra.wgsl v4; the old
#     per-element form stays behind DELTARULE_WGPU_KDA_STEP2=0 for this comparison),
#   - the coop state pass loading every A operand of a chunk at its top (prefill_state_coop v3),
#   - kda's coop kernel on the coop output pass (f16 qdecᵀ, Pᵀ, h, V_new in ws16, as gdn's).
# Binaries: .dev/bin/deltarule (this tree) and .dev/bin/deltarule_s11 (fc8828b, session 11's tree,
# whose WGSL was last timed in session 9: gdn wgpu:coop 2.527 ms, kda 4.361 ms), .dev/bin/conformance
# (this tree). `bash bench/pack_s12w.sh` builds all of it here (checked in session 12: 1m49, a
# 3.3 MB pack, 4.6 MB with .gl and .whl); by hand, from the repository root:
#   T=${CARGO_TARGET_DIR:-target}; mkdir -p .dev/bin
#   cargo build --release -p deltarule-cli && cp $T/release/deltarule .dev/bin/
#   cp "$(cargo test --release -p deltarule-tests --test conformance --no-run 2>&1 \
#        | sed -n 's/.*Executable .*(\(.*\))$/\1/p')" .dev/bin/conformance
#   git worktree add /tmp/s11 fc8828b && (cd /tmp/s11 && cargo build --release -p deltarule-cli) \
#     && cp /tmp/s11/target/release/deltarule .dev/bin/deltarule_s11
#   strip .dev/bin/*; mkdir -p .dev/pack; tar -C .dev -cf - bin | xz -T2 > .dev/pack/dev.tar.xz
# plus .gl (the Vulkan loader packages, the device README) and .whl (fla_core-0.6.0 wheel).
# Carry: .dev/pack .gl .whl
# Predictions (bench/NOTES.md, session 12): gdn 16/32 1x8192 wgpu:coop intra 1.27 -> ~1.0-1.1 ms
# (the solve was ~0.5 ms of the f32 intra in session 2's probes), state 0.885 -> ~0.5-0.6 ms;
# kda 32/32 intra 3.07 -> ~2.3 ms, state 0.833 -> ~0.5 ms, output (now the coop output pass)
# 0.469 -> ~0.38 ms. The per-pass lines separate them.
set -uo pipefail
source bench/h200_env.sh
NEW=.dev/bin/deltarule
OLD=.dev/bin/deltarule_s11
S="gdn-16/32-1x8192 kda-32/32-1x8192"
echo "== correctness (this tree)"
for b in wgpu wgpu:coop; do
  timeout 60 $NEW diff --case tests/golden/shared/*.safetensors --backend $b > "$OUT/diff_${b/:/_}.log" 2>&1
  echo "diff $b rc=$? $(tail -1 "$OUT/diff_${b/:/_}.log")"
done
DELTARULE_WGPU_KDA_STEP2=0 timeout 60 $NEW diff --case tests/golden/shared/kda*.safetensors --backend wgpu:coop > "$OUT/diff_coop_step2_0.log" 2>&1
echo "diff wgpu:coop kda, step 2 per element rc=$? $(tail -1 "$OUT/diff_coop_step2_0.log")"
grep -E ' expected ' "$OUT/diff_wgpu_coop.log" | awk '{print $1, $2, $4, $6, $NF}' | head -12
DELTARULE_REQUIRE_WGPU=1 timeout 150 .dev/bin/conformance --test-threads=1 --nocapture wgpu > "$OUT/conf_wgpu.log" 2>&1
echo "conformance wgpu, wgpu_coop rc=$?"; grep -E " ran, " "$OUT/conf_wgpu.log"
echo "== timings (a throwaway run each, then alternating rounds)"
timeout 40 $OLD bench --backend wgpu:coop --shape gdn-16/32-1x8192 --iters 10 > /dev/null 2>&1
timeout 40 $NEW bench --backend wgpu:coop --shape gdn-16/32-1x8192 --iters 10 > /dev/null 2>&1
for round in 1 2; do
  timeout 90 $OLD bench --backend wgpu:coop --shape $S --iters 30 --json 2>/dev/null | python3 bench/wgpu_spread.py "r$round s11"
  timeout 90 $NEW bench --backend wgpu:coop --shape $S --iters 30 --json 2>/dev/null | python3 bench/wgpu_spread.py "r$round new"
  DELTARULE_WGPU_KDA_STEP2=0 timeout 60 $NEW bench --backend wgpu:coop --shape kda-32/32-1x8192 --iters 30 --json 2>/dev/null \
    | python3 bench/wgpu_spread.py "r$round new,step2=0"
done
echo "-- per pass (each timed alone)"
timeout 60 $OLD bench --backend wgpu:coop --shape $S --iters 20 2>&1 | grep stages | sed 's/^/s11 /'
timeout 60 $NEW bench --backend wgpu:coop --shape $S --iters 20 2>&1 | grep stages | sed 's/^/new /'
DELTARULE_WGPU_KDA_STEP2=0 timeout 40 $NEW bench --backend wgpu:coop --shape kda-32/32-1x8192 --iters 20 2>&1 | grep stages | sed 's/^/new,step2=0 /'
echo "== fla 0.6.0, same call"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/fla_core-0.6.0-py3-none-any.whl && export PYTHONPATH=/tmp/site
PYTHONUNBUFFERED=1 timeout 200 python3 bench/fla_bench.py --shapes $S 2> "$OUT/fla.err"
tail -3 "$OUT/fla.err"
(cd "$OUT" && tar czf logs_s12w.tgz *.log *.err 2>/dev/null; rm -f *.log *.err)

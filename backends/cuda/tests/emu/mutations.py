"""Checks that the emulated decode tests (backends/cuda/tests/emulated.rs) can fail: applies each
mutation below to kernels/decode.cuh in turn (one small protocol or indexing error each, of the
persistent form or of the block-per-item kernel), runs `cargo test -p deltarule-cuda --test emulated`, prints how it failed,
and restores the file (also on Ctrl-C). Every mutation must make the tests fail; the script exits
1 if one does not. About 40 s a mutation on 2 cores. `--check` only checks that each mutation's
text is in the kernel exactly once (no build, no test run).
Usage (repository root): python3 backends/cuda/tests/emu/mutations.py [--check] [NAME ...]"""
import subprocess
import sys

MUTATIONS = {
    "no_wait": ("                cp_async_wait_group<2>();\n", ""),
    "no_row_wait": ("            cp_async_wait_group<1>();\n", ""),
    "stage_swap": ("ring[(k + 1) & 1]);", "ring[k & 1]);"),
    "empty_item_preload": (
        "if (c.bos >= c.eos && n1_tokens) load_token<KDA>(p, sm.d, n1.bos, cur,",
        "if (c.bos >= c.eos && n1_tokens) load_token<KDA>(p, sm.d, n1.bos, cur ^ 1,",
    ),
    "extra_bar": (
        "                cur ^= 1;\n                if (more) __syncthreads();",
        "                cur ^= 1;\n                __syncthreads();",
    ),
    "next_into_cur": (
        "load_token<KDA>(p, sm.d, tn, cur ^ 1, hvn / p.group, hvn, v0n);",
        "load_token<KDA>(p, sm.d, tn, cur, hvn / p.group, hvn, v0n);",
    ),
    "slot_early": (
        "            if (lane == 0) sm.item[(k + 1) & 1] = n1;",
        "            if (lane == 0) sm.item[k & 1] = n1;",
    ),
    "no_first_slot": ("        if (lane == 0) sm.item[0] = c;\n", ""),
    # the block-per-item kernel: no barrier between tokens, the next token over the current one
    "block_no_token_bar": ("        if (t + 1 < eos) __syncthreads();\n    }\n", "    }\n"),
    "block_next_into_b": (
        "load_token<KDA>(p, sm, t + 1, b ^ 1, h, hv, v0);",
        "load_token<KDA>(p, sm, t + 1, b, h, hv, v0);",
    ),
    "copy_oob": (
        "cp_async_16(stage + (i * DTH + tid) * 16, src + i * unit_stride<L>());",
        "cp_async_16(stage + (i * DTH + tid) * 16, src + (i + 1) * unit_stride<L>());",
    ),
}

PATH = "kernels/decode.cuh"
orig = open(PATH).read()
check_only = "--check" in sys.argv[1:]
names = [a for a in sys.argv[1:] if a != "--check"] or list(MUTATIONS)
missing = [n for n in names if orig.count(MUTATIONS[n][0]) != 1]
if missing:
    sys.exit(f"the text to mutate is not in {PATH} exactly once: {', '.join(missing)}; update this script")
if check_only:
    print(f"all {len(names)} mutation texts found once in {PATH}")
    sys.exit(0)
survived = []
try:
    for name in names:
        old, new = MUTATIONS[name]
        with open(PATH, "w") as f:
            f.write(orig.replace(old, new))
        r = subprocess.run(
            ["cargo", "test", "-q", "-p", "deltarule-cuda", "--test", "emulated"],
            capture_output=True,
            text=True,
        )
        why = [l for l in (r.stdout + r.stderr).splitlines() if "emulator:" in l or "rel_l2" in l or "differs" in l]
        print(f"{name}: {'FAILED (caught)' if r.returncode else 'PASSED (not caught)'}")
        for line in why[:2]:
            print("   ", line.strip()[:200])
        if r.returncode == 0:
            survived.append(name)
finally:
    with open(PATH, "w") as f:
        f.write(orig)
if survived:
    sys.exit(f"mutations the tests did not catch: {', '.join(survived)}")
print(f"all {len(names)} mutations caught")

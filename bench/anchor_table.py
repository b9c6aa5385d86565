#!/usr/bin/env python3
"""The closing table of the CUDA device scripts (bench/h200_s16d.sh onwards): `deltarule bench
--json` rows (ours) beside bench/fla_bench.py's rows (fla) from the same call, with the ratio and
the multiple of the roofline floor. Usage: anchor_table.py OURS.jsonl FLA.jsonl (a missing fla
file or shape prints '-')."""
import json
import sys


def rows(path):
    try:
        return {j["shape"]: j for j in (json.loads(l) for l in open(path) if l.startswith("{"))}
    except FileNotFoundError:
        return {}


ours = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
fla = rows(sys.argv[2])
print(f"{'shape':<24} {'rule':<28} {'ours ms':>8} {'host us':>8} {'fla ms':>8} {'fla/ours':>8} {'x floor':>7}")
for o in ours:
    f = fla.get(o["shape"], {}).get("fla_ms")
    r = f"{f / o['gpu_ms_median']:.2f}" if f else "-"
    fs = f"{f:.4f}" if f else "-"
    print(f"{o['shape']:<24} {o['rule']:<28} {o['gpu_ms_median']:>8.4f} {o['host_us_median']:>8.1f} {fs:>8} {r:>8} {o['x_floor']:>7.1f}")

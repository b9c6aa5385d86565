#!/usr/bin/env python3
"""Summarises an `ncu --page source --print-source sass --csv` export (bench/ncu.sh --source).

Splits the kernel's SASS at its block barriers (BAR.SYNC / BAR.RED / BAR.ARV) and exits into
regions and prints, per region, the warp-stall samples (all and not issued), the instructions
executed and the opcode mix, then the instructions with the most samples and their top stall
reasons. A region is the code between two barriers, so its share of the samples says which stage
of the kernel the warps wait in. Usage: python3 bench/sass_regions.py FILE.csv [TOP]
"""
import argparse
import csv
import re
from collections import Counter


def num(s):
    try:
        return float(s.replace(",", ""))
    except (ValueError, AttributeError):
        return 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="ncu --page source --print-source sass --csv output")
    ap.add_argument("top", nargs="?", type=int, default=25, help="instructions listed (25)")
    args = ap.parse_args()
    path, top = args.csv, args.top
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    hi = next(i for i, r in enumerate(rows) if "Source" in r and "Address" in r)
    head = rows[hi]
    body = [r for r in rows[hi + 1:] if len(r) == len(head)]
    col = {h: i for i, h in enumerate(head)}
    src = col["Source"]
    samp = next((i for h, i in col.items() if h.startswith("Warp Stall Sampling (All")), None)
    nis = next((i for h, i in col.items() if h.startswith("Warp Stall Sampling (Not")), None)
    exe = next((i for h, i in col.items() if h == "Instructions Executed"), None)
    stall_cols = [(h, i) for h, i in col.items() if h.startswith("stall_") or h.startswith("Stall")]
    print("columns:", "; ".join(head)[:600])
    total = sum(num(r[samp]) for r in body) or 1.0
    regions = []
    cur = {"first": None, "s": 0.0, "n": 0.0, "x": 0.0, "ops": Counter(), "lines": 0}
    for r in body:
        op = r[src].strip()
        opc = re.sub(r"^@!?U?P\w+\s+", "", op).split(" ")[0]
        if cur["first"] is None:
            cur["first"] = r[col["Address"]]
        cur["s"] += num(r[samp])
        cur["n"] += num(r[nis]) if nis is not None else 0.0
        cur["x"] += num(r[exe]) if exe is not None else 0.0
        cur["ops"][opc.split(".")[0]] += num(r[exe]) if exe is not None else 1
        cur["lines"] += 1
        if opc.startswith("BAR") or opc.startswith("EXIT"):
            regions.append(cur)
            cur = {"first": None, "s": 0.0, "n": 0.0, "x": 0.0, "ops": Counter(), "lines": 0}
    if cur["lines"]:
        regions.append(cur)
    print(f"total samples {total:.0f}; regions split at barriers ({len(regions)})")
    print("reg  addr     samples%  notissued%  inst_exec  top opcodes (executed)")
    for k, g in enumerate(regions):
        if g["s"] / total < 0.005:
            continue
        ops = ", ".join(f"{o} {c:.0f}" for o, c in g["ops"].most_common(6))
        print(f"{k:3d}  {g['first']:>7}  {100*g['s']/total:7.1f}  {100*g['n']/total:9.1f}  {g['x']:10.0f}  {ops}")
    print(f"top {top} instructions by samples:")
    ranked = sorted(body, key=lambda r: -num(r[samp]))[:top]
    for r in ranked:
        reasons = sorted(((num(r[i]), h) for h, i in stall_cols), reverse=True)[:3]
        rs = ", ".join(f"{h.replace('stall_', '')} {v:.0f}" for v, h in reasons if v > 0)
        print(f"{r[col['Address']]:>7} {100*num(r[samp])/total:5.1f}%  {r[src].strip()[:60]:60s} {rs}")


if __name__ == "__main__":
    main()

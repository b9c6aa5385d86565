"""A shape x variant table of median GPU ms from `deltarule bench --json` files, one file per
variant (the median over the file's rows of a shape, e.g. several rounds), and each variant's
ratio to the first. Usage: python3 bench/bench_table.py NAME=FILE.jsonl [NAME=FILE.jsonl ...]
(bench/s29a.sh)."""
import statistics
import sys

from bench_rows import rows

cols = []
for arg in sys.argv[1:]:
    name, path = arg.split("=", 1)
    times = {}
    for j in rows(path):
        times.setdefault(j["shape"], []).append(j["gpu_ms_median"])
    cols.append((name, {s: statistics.median(t) for s, t in times.items()}))
shapes = []
for _, t in cols:
    shapes += [s for s in t if s not in shapes]
print("| shape | " + " | ".join(n for n, _ in cols) + " | best |")
print("| --- " * (len(cols) + 2) + "|")
for s in shapes:
    base = cols[0][1].get(s)
    cells, best = [], None
    for n, t in cols:
        v = t.get(s)
        if v is None:
            cells.append("-")
            continue
        r = f" ({v / base:.3f})" if base and n != cols[0][0] else ""
        cells.append(f"{v:.4f}{r}")
        if best is None or v < best[1]:
            best = (n, v)
    print(f"| {s} | " + " | ".join(cells) + f" | {best[0] if best else '-'} |")

#!/usr/bin/env python3
"""One markdown table from `deltarule bench --json` rows and bench/peers.py rows of the same run.

    python3 bench/table.py DELTARULE.jsonl [PEER.jsonl ...] [--title TEXT]

Per shape (and backend, when the deltarule file holds several): the rule `auto` chose, deltarule's
median GPU ms, its host us per call, its multiple of the roofline floor, then per peer its median
GPU ms, its CUDA-graph replay's where peers.py ran with --graph, and the ratio peer / deltarule
(above 1: deltarule is faster), taken with the peer's better of eager and graph where it has both.
A file may hold several rounds of the same shapes: each cell is the median over its rows. Lines
that are not JSON objects are skipped, so logs with progress lines can be passed as they are; a
missing file is reported and skipped. The peers' versions and the device come from their `meta`
lines.
"""
import argparse
import json
import statistics
import sys

LABELS = {"fla": "fla", "flashqla": "FlashQLA", "flashinfer": "FlashInfer",
          "deltarule": "deltarule (Python)"}


def read_rows(path):
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as e:
        print(f"table.py: skipping {path}: {e.strerror}", file=sys.stderr)
        return []
    rows = []
    for line in lines:
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def median_or_none(xs):
    xs = [x for x in xs if isinstance(x, (int, float))]
    return statistics.median(xs) if xs else None


def fmt_ms(x):
    return "-" if x is None else (f"{x:.4f}" if x < 10 else f"{x:.2f}")


def build(ours_rows, peer_rows):
    """Returns (header, rows, notes) of the table."""
    ours = {}  # (shape, backend) -> list of rows, in first-seen order
    for r in ours_rows:
        if "gpu_ms_median" in r and "shape" in r:
            ours.setdefault((r["shape"], r.get("backend", "")), []).append(r)
    impls, peers, notes = [], {}, []
    for r in peer_rows:
        if "meta" in r:
            m = r["meta"]
            ver = f" {m['version']}" if m.get("version") else ""
            notes.append(f"{LABELS.get(m.get('impl'), m.get('impl'))}{ver} on {m.get('device', '?')}")
            continue
        impl = r.get("impl")
        if impl is None or "shape" not in r:
            continue
        if impl not in impls:
            impls.append(impl)
        cell = peers.setdefault((impl, r["shape"]), {"ms": [], "graph": [], "note": None})
        cell["ms"].append(r.get("ms"))
        cell["graph"].append(r.get("graph_ms"))
        if r.get("ms") is None and r.get("note"):
            cell["note"] = r["note"]
    graphed = [i for i in impls if any(c["graph"] != [None] * len(c["graph"])
                                       for (j, _), c in peers.items() if j == i)]
    several = len({b for _, b in ours}) > 1
    header = ["shape"] + (["backend"] if several else []) + ["rule", "deltarule ms", "host us",
                                                             "x floor"]
    for impl in impls:
        label = LABELS.get(impl, impl)
        header += [f"{label} ms"] + ([f"{label} graph ms"] if impl in graphed else [])
        header += [f"{label} {'best ' if impl in graphed else ''}/ deltarule"]
    rows, missing = [], {}  # missing: (impl, note) -> shapes
    for (shape, backend), rs in ours.items():
        ms = median_or_none([r["gpu_ms_median"] for r in rs])
        host = median_or_none([r.get("host_us_median") for r in rs])
        floor = median_or_none([r.get("x_floor") for r in rs])
        row = [shape] + ([backend] if several else []) + [
            rs[0].get("rule", "?"), fmt_ms(ms), "-" if host is None else f"{host:.1f}",
            "-" if floor is None else f"{floor:.2f}"]
        for impl in impls:
            cell = peers.get((impl, shape))
            p = median_or_none(cell["ms"]) if cell else None
            row += [fmt_ms(p)]
            best = p
            if impl in graphed:
                g = median_or_none(cell["graph"]) if cell else None
                row += [fmt_ms(g)]
                best = min((x for x in (p, g) if x is not None), default=None)
            row += [f"{best / ms:.2f}" if best and ms else "-"]
            if cell and p is None and cell["note"]:
                missing.setdefault((impl, cell["note"]), []).append(shape)
        rows.append(row)
    for (impl, note), shapes in missing.items():
        notes.append(f"{LABELS.get(impl, impl)}, no time on {', '.join(shapes)}: {note}")
    devices = {r.get("device") for rs in ours.values() for r in rs if r.get("device")}
    if devices:
        notes.insert(0, "deltarule on " + ", ".join(sorted(devices)))
    return header, rows, notes


def render(header, rows):
    widths = [max(len(str(r[c])) for r in [header] + rows) for c in range(len(header))]
    right = [c for c, h in enumerate(header) if h not in ("shape", "backend", "rule")]

    def line(cells):
        out = [str(x).rjust(w) if c in right else str(x).ljust(w)
               for c, (x, w) in enumerate(zip(cells, widths))]
        return "| " + " | ".join(out) + " |"

    sep = ["-" * (w - 1) + ":" if c in right else "-" * w for c, w in enumerate(widths)]
    return "\n".join([line(header), "| " + " | ".join(sep) + " |"] + [line(r) for r in rows])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("deltarule", help="`deltarule bench --json` output")
    ap.add_argument("peers", nargs="*", help="bench/peers.py outputs")
    ap.add_argument("--title", help="a line printed above the table")
    args = ap.parse_args()
    peer_rows = [r for p in args.peers for r in read_rows(p)]
    header, rows, notes = build(read_rows(args.deltarule), peer_rows)
    if not rows:
        print(f"table.py: no `deltarule bench --json` rows in {args.deltarule}", file=sys.stderr)
        return 1
    if args.title:
        print(args.title + "\n")
    print(render(header, rows))
    if notes:
        print()
        for n in notes:
            print(f"- {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The practical floor of a state-bound shape on this GPU: the time PyTorch takes to move the same
bytes as the shape's f32 states, measured beside it.

A decode step reads and writes every sequence's state once: the decode anchor (gdn-decode-16/32-
256x1, K = V = 128) moves 256 states of 32 x 128 x 128 f32, 1.07 GB, against a few MB of tokens.
Its time cannot go below a copy of those bytes. This times, with CUDA events (median of --iters
after 5 warm-ups), `b.copy_(a)` (read a, write b: dense initial and final states) and
`a.mul_(s)` (read and write in place: a state pool), and prints the ms and the bandwidth counted
as read + write. `deltarule bench` prints the same shape's `x floor` against the rated peak.

    python3 bench/copy_floor.py [--shape gdn-decode-16/32-256x1] [--iters 50]
"""
import argparse
import statistics

from peers import HEAD_DIM, parse_shape


def timed(fn, iters, warm=5):
    import torch

    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ms = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ms.append(a.elapsed_time(b))
    return statistics.median(ms)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="gdn-decode-16/32-256x1",
                    help="op[-decode]-H/HV-NxL: its N states of HV x 128 x 128 f32")
    ap.add_argument("--iters", type=int, default=50)
    args = ap.parse_args()
    try:
        _, _, _, hv, n, _ = parse_shape(args.shape)
    except ValueError as e:
        ap.error(str(e))
    import torch

    a = torch.randn(n * hv * HEAD_DIM * HEAD_DIM, device="cuda")
    b = torch.empty_like(a)
    moved = 2 * a.numel() * a.element_size()
    print(f"{torch.cuda.get_device_name()}: {args.shape}, {n} states of {hv} x {HEAD_DIM} x "
          f"{HEAD_DIM} f32, {moved / 1e9:.3f} GB read + written")
    for name, fn in (("copy a -> b", lambda: b.copy_(a)),
                     ("in place a *= s", lambda: a.mul_(1.0000001))):
        ms = timed(fn, args.iters)
        print(f"copy floor {name}: {ms:.4f} ms, {moved / ms / 1e6:.0f} GB/s")


if __name__ == "__main__":
    main()

"""bench/copy_floor.py: the practical floor of the decode anchor on this GPU, measured beside it.
The decode anchor (gdn 16/32, 256 sequences x 1 token, f32 state 32 x 128 x 128) reads and writes
256 states of 2 MiB: 1.07 GB. Times, with CUDA events (median of 50 after 5 warm-ups), the two
copies of that many bytes PyTorch issues: `b.copy_(a)` (read a, write b, like dense initial and
final states) and `a.mul_(s)` (read and write in place, like a state pool), and prints the ms and
the bandwidth counted as read + write."""
import statistics

import torch

STATE = 32 * 128 * 128  # f32 elements of one (sequence) state
N = 256


def timed(fn, iters=50, warm=5):
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
    a = torch.randn(N * STATE, device="cuda")
    b = torch.empty_like(a)
    moved = 2 * a.numel() * 4
    for name, fn in (("copy a -> b", lambda: b.copy_(a)),
                     ("in place a *= s", lambda: a.mul_(1.0000001))):
        ms = timed(fn)
        print(f"copy floor {name}: {ms:.4f} ms for {moved / 1e9:.3f} GB = "
              f"{moved / ms / 1e6:.0f} GB/s (read + write)")


main()

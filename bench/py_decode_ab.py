"""bench/py_decode_ab.py: the decode anchor (gdn 16/32, 256 sequences x 1 token, K = V = 128, f32
state in a pool of 256 rows, every row used, kv layout, bf16 q/k/v and o) through the public
wrapper `deltarule.gdn_decode`, with the GPU's copy floor and (--fla) fla 0.6.0's
fused_recurrent_gated_delta_rule on the same inputs, in one process so that the figures share a
GPU state. DELTARULE_CUDA_MODE (read once per process) picks the kernel variant, so a script runs
this once per variant.

GPU time: CUDA events around one call queued behind a GPU spin, median of --iters after 10
warm-ups. Host time: the
wall-clock time of issuing one call (no synchronisation inside), median. The state (537 MB) is
larger than L2 (60 MB on the H200), so nothing is rotated. Every timed call updates the pool in
place; the script checks that the pool stays finite and prints its relative L2 change against a
float64 step of the first sequence (one token, recomputed here) as a correctness sanity check."""
import argparse
import os
import statistics
import time

import torch
import torch.nn.functional as F

N, H, HV, K = 256, 16, 32, 128


def timed(fn, iters, warm=10):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    gpu, host = [], []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        # a GPU spin (~1 ms) ahead of the first event, so that the call is queued before the
        # timed stretch starts (else its host time counts as GPU time: session 26)
        torch.cuda._sleep(2_000_000)
        a.record()
        t0 = time.perf_counter()
        fn()
        host.append((time.perf_counter() - t0) * 1e6)
        b.record()
        b.synchronize()
        gpu.append(a.elapsed_time(b))
    return statistics.median(gpu), statistics.median(host)


def reference_step(q, k, v, g, beta, s0):
    """One token of one sequence (all value heads) in float64: o [HV, V], s1 [HV, K, V]."""
    qd, kd = q.double(), k.double()  # used as given (l2norm off)
    grp = HV // H
    kk = kd.repeat_interleave(grp, dim=0)  # [HV, K]
    qq = qd.repeat_interleave(grp, dim=0)
    s = s0.double() * torch.exp(g.double())[:, None, None]
    u = beta.double()[:, None] * (v.double() - torch.einsum("hk,hkv->hv", kk, s))
    s1 = s + kk[:, :, None] * u[:, None, :]
    o = torch.einsum("hk,hkv->hv", qq, s1) / K ** 0.5
    return o, s1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--label", default=os.environ.get("DELTARULE_CUDA_MODE", "default"))
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--fla", action="store_true")
    ap.add_argument("--copy", action="store_true")
    args = ap.parse_args()
    import deltarule

    dev = "cuda"
    gen = torch.Generator(device=dev).manual_seed(0)
    q = torch.randn(N, H, K, device=dev, generator=gen).bfloat16()
    k = F.normalize(torch.randn(N, H, K, device=dev, generator=gen), dim=-1).bfloat16()
    v = torch.randn(N, HV, K, device=dev, generator=gen).bfloat16()
    g = F.logsigmoid(3.0 + 1.5 * torch.randn(N, HV, device=dev, generator=gen)).float()
    beta = torch.sigmoid(torch.randn(N, HV, device=dev, generator=gen)).float()
    cu = torch.arange(0, N + 1, dtype=torch.int32, device=dev)
    pool = 0.1 * torch.randn(N, HV, K, K, device=dev, generator=gen)
    idx = torch.arange(N, dtype=torch.int32, device=dev)
    o = torch.full((N, HV, K), float("nan"), dtype=torch.bfloat16, device=dev)

    def ours():
        deltarule.gdn_decode(q, k, v, g, beta, cu, state_pool=pool, state_indices=idx, out=o,
                             state_layout="kv", max_seqlen=1)

    # correctness of one call against float64, on a copy of sequence 0's and 255's state
    s0 = pool[[0, N - 1]].clone()
    ours()
    torch.cuda.synchronize()
    errs = []
    for j, n in enumerate((0, N - 1)):
        ro, rs = reference_step(q[n], k[n], v[n], g[n], beta[n], s0[j])
        errs.append(((o[n].double() - ro).norm() / ro.norm()).item())
        errs.append(((pool[n].double() - rs).norm() / rs.norm()).item())
    moved = 2 * pool.numel() * 4
    ms, host = timed(ours, args.iters)
    fin = bool(torch.isfinite(pool).all().item()) and bool(torch.isfinite(o.float()).all().item())
    print(f"ours[{args.label}] {ms:.4f} ms ({moved / ms / 1e6:.0f} GB/s) host {host:.1f} us; "
          f"o/state rel L2 vs f64 (seq 0, 255): {' '.join(f'{e:.1e}' for e in errs)}; finite {fin}")
    if args.copy:
        a = torch.randn(N * HV * K * K, device=dev)
        b = torch.empty_like(a)
        cms, _ = timed(lambda: b.copy_(a), 50)
        ims, _ = timed(lambda: a.mul_(1.0000001), 50)
        print(f"copy floor: copy {cms:.4f} ms ({moved / cms / 1e6:.0f} GB/s), in place "
              f"{ims:.4f} ms ({moved / ims / 1e6:.0f} GB/s); ours / copy {ms / cms:.3f}")
        del a, b
    if args.fla:
        from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule
        h0 = pool.clone()
        cu64 = cu.long()
        fn = lambda: fused_recurrent_gated_delta_rule(
            q[None], k[None], v[None], g=g[None], beta=beta[None], initial_state=h0,
            output_final_state=True, cu_seqlens=cu64)
        fms, fhost = timed(fn, args.iters)
        print(f"fla fused_recurrent {fms:.4f} ms host {fhost:.1f} us; fla / ours {fms / ms:.3f}")


main()

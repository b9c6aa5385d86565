#!/usr/bin/env python3
"""Context-parallel prefill across the GPUs of one host: deltarule.distributed beside fla's KCP.

For each GPU count P (1, 2, 4, 8: those the host has), P processes, one a GPU, joined by NCCL,
run one sequence of T tokens split evenly over the ranks (64-token multiples), for the shapes
GDN 16/32 and KDA 32/32 (K = V = 128) and T = 128k, 512k, 1M tokens:

  deltarule      deltarule.distributed.{gdn,kda}_prefill, no initial or final state (as KCP)
  deltarule+st   the same with a dense initial state and output_final_state=True
  fla            fla 0.6.0: chunk_gated_delta_rule / chunk_kda, with cp_context from
                 fla.ops.cp.build_cp_context when P > 1 (KCP takes no initial or final state)

P = 1 is the plain single-GPU call of each (deltarule.gdn_prefill, fla without cp_context): the
baseline of the scaling efficiency t_1 / (P t_P). Time per call: CUDA events around each call
on every rank after a warm-up, the ranks aligned by a barrier before each call; the median over
--iters calls on each rank, the slowest rank's median reported. Bytes: what one rank sends in
the call's collective (it receives P times as many, its own included).

Correctness: the P = 1 run stores the single-GPU outputs on windows around every possible rank
boundary (j T / 8 +- 256 tokens) and the final state; each P > 1 run compares its outputs on
those windows and the final state (relative L2 over all ranks), for deltarule+st against the
single-GPU deltarule call with the same initial state, and for fla against fla's own
single-GPU call.

Inputs as bench/peers.py builds them: bf16 q, k, v (k L2-normalised), f32 log-space gates
logsigmoid(3 + 1.5 z), bf16 beta = sigmoid(z); generated in blocks of 64k tokens from per-block
seeds, so each rank builds its own range only and every P sees the same tokens.

The rank summaries: --summary engine (the default) takes a rank's affine map from two passes of
the engine's prefill kernels (the identity as initial state with zero values, then a zero state);
--summary torch computes it in torch's f32 batched matmuls (chunk maps and a tree of K x K
products), which costs about 10 ms per 128k tokens of GDN 16/32 on an H100's f32 units: too slow
for GPU use. The fast building block is one pass of the chunked state kernel over [v | 0] values
from the [0 | I] initial state, giving both parts of the map (docs/distributed.md).

NVLink multicast stays off: NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and
NVSHMEM_DISABLE_NVLS=1 are set before anything starts.

    python3 bench/cp_multi_gpu.py                           # every P the host has, the table
    python3 bench/cp_multi_gpu.py --gpus 1,8 --tokens 1m    # the 1M-token row only
    python3 bench/cp_multi_gpu.py --dry-run                 # CPU, gloo, tiny: the plumbing

fla comes from its wheel: python3 -m pip install --no-deps .whl/fla_core-0.6.0-py3-none-any.whl
(the fla columns say why they are empty when it does not import). A case that runs out of GPU
memory prints "oom" in its cell.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import traceback

# before torch, NCCL or NVSHMEM read them (the spawned ranks inherit them)
os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
os.environ["NVSHMEM_DISABLE_NVLS"] = "1"
os.environ["FLA_FLASH_QLA"] = "0"  # fla's own kernels, not a FlashQLA dispatch

SHAPES = {"gdn-16/32": ("gdn", 16, 32), "kda-32/32": ("kda", 32, 32)}
TOKENS = {"128k": 128 << 10, "512k": 512 << 10, "1m": 1 << 20}
BLOCK = 64 << 10
WIN = 256


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", default="1,2,4,8", help="GPU counts to run (those present)")
    ap.add_argument("--shapes", default=",".join(SHAPES), help=f"of {list(SHAPES)}")
    ap.add_argument("--tokens", default=",".join(TOKENS), help=f"of {list(TOKENS)} or ints")
    ap.add_argument("--impls", default="deltarule,deltarule+st,fla")
    ap.add_argument("--summary", default="engine", choices=("engine", "torch"),
                    help="how deltarule computes a rank's affine map (engine: the prefill "
                         "kernels from the identity state; torch: the chunked WY form in torch)")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "deltarule-cp"))
    ap.add_argument("--dry-run", action="store_true",
                    help="CPU tensors, gloo, the reference runner, 4k tokens, head dim 32")
    a = ap.parse_args(argv)
    if a.dry_run:
        a.tokens = "4096" if a.tokens == ",".join(TOKENS) else a.tokens
        a.head_dim = 32 if a.head_dim == 128 else a.head_dim
        a.iters, a.warmup = min(a.iters, 2), min(a.warmup, 1)
        a.gpus = "1,2,4" if a.gpus == "1,2,4,8" else a.gpus
    a.gpus = [int(x) for x in a.gpus.split(",")]
    a.shapes = a.shapes.split(",")
    for s in a.shapes:
        if s not in SHAPES:
            ap.error(f"--shapes: {s!r} is not one of {list(SHAPES)}")
    a.tokens = [TOKENS[t.lower()] if t.lower() in TOKENS else int(t) for t in a.tokens.split(",")]
    a.impls = a.impls.split(",")
    return a


# ---- inputs ----

def make_local(op, H, HV, K, T, a, b, device, seed=0):
    """Tokens [a, b) of the global problem: generated per 64k-token block from the block's own
    seed, so every rank count sees the same tokens."""
    import torch
    import torch.nn.functional as F

    parts = {n: [] for n in ("q", "k", "v", "g", "beta")}
    for blk in range(a // BLOCK, (b - 1) // BLOCK + 1 if b > a else a // BLOCK):
        t0, t1 = blk * BLOCK, min((blk + 1) * BLOCK, T)
        gen = torch.Generator(device=device).manual_seed(seed * 100003 + blk)
        n = t1 - t0
        x = dict(
            q=torch.randn(n, H, K, device=device, generator=gen),
            k=F.normalize(torch.randn(n, H, K, device=device, generator=gen), dim=-1),
            v=torch.randn(n, HV, K, device=device, generator=gen),
            g=F.logsigmoid(3.0 + 1.5 * torch.randn((n, HV, K) if op == "kda" else (n, HV),
                                                   device=device, generator=gen)),
            beta=torch.sigmoid(torch.randn(n, HV, device=device, generator=gen)),
        )
        lo, hi = max(a, t0) - t0, min(b, t1) - t0
        for name, t in x.items():
            parts[name].append(t[lo:hi])
    dt = torch.bfloat16 if device.type == "cuda" else torch.float32
    empty = dict(q=(0, H, K), k=(0, H, K), v=(0, HV, K), g=(0, HV, K) if op == "kda" else (0, HV),
                 beta=(0, HV))
    out = {}
    for name, ts in parts.items():
        t = torch.cat(ts) if ts else torch.empty(empty[name], device=device)
        out[name] = t.float().contiguous() if name == "g" else t.to(dt).contiguous()
    return out


def initial_state(HV, K, device, seed=1):
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    return 0.1 * torch.randn(1, HV, K, K, device=device, generator=gen)


def windows(T):
    """Token windows around every boundary j T / 8 (and the two ends), merged."""
    spans = [(0, WIN), (T - WIN, T)] + [(j * T // 8 - WIN, j * T // 8 + WIN) for j in range(1, 8)]
    idx = sorted({t for lo, hi in spans for t in range(max(lo, 0), min(hi, T))})
    return idx


# ---- one rank ----

def timed(fn, iters, warmup, device):
    import torch
    import torch.distributed as dist

    for _ in range(warmup):
        fn()
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
    ms = []
    for _ in range(iters):
        dist.barrier()
        if cuda:
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            ms.append(a.elapsed_time(b))
        else:
            t0 = time.perf_counter()
            fn()
            ms.append((time.perf_counter() - t0) * 1e3)
    med = torch.tensor([statistics.median(ms)], dtype=torch.float64, device=device)
    dist.all_reduce(med, op=dist.ReduceOp.MAX)
    return float(med)


def rel_sums(x, ref):
    d = x.double() - ref.double()
    return [float((d * d).sum()), float((ref.double() ** 2).sum())]


def reduce_rel(sums, device):
    import torch
    import torch.distributed as dist

    t = torch.tensor(sums, dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return float(t[0].sqrt() / t[1].sqrt().clamp_min(1e-300))


def run_impl(impl, op, H, HV, K, T, P, rank, x, a, b, h0, args, device, refdir, tag):
    """Times one implementation on one case; returns the row's fields (rank 0's are kept)."""
    import torch
    import torch.distributed as dist

    import deltarule
    from deltarule import distributed as cp

    row = {"impl": impl, "op": op, "H": H, "HV": HV, "T": T, "P": P}
    cu_list = [0, T]
    with_states = impl == "deltarule+st"
    if impl.startswith("deltarule"):
        dry = device.type != "cuda"
        kw = dict(state_layout="kv")
        if dry:
            kw.update(backend="cpu:chunked")
        if P == 1:
            o = torch.empty_like(x["v"])
            fin = torch.empty((1, HV, K, K), dtype=torch.float32, device=device)
            f = getattr(deltarule, f"{op}_prefill")
            st = dict(initial_state=h0, final_state=fin) if with_states else {}
            cu = torch.tensor(cu_list, dtype=torch.int32, device=device)
            if dry:
                def call():
                    r = deltarule.reference(op, x["q"], x["k"], x["v"], x["g"], x["beta"], cu,
                                            initial_state=h0 if with_states else None, **kw)
                    o.copy_(r["o"])
                    fin.copy_(r["final_state"])
            else:
                def call():
                    f(x["q"], x["k"], x["v"], x["g"], x["beta"], cu, out=o, max_seqlen=T,
                      **st, **kw)
            row["bytes"] = 0
        else:
            st = dict(initial_state=h0, output_final_state=True) if with_states else {}
            holder = {}

            def call():
                holder["res"] = cp.prefill(op, x["q"], x["k"], x["v"], x["g"], x["beta"],
                                           cu_list, token_offset=a, summary=args.summary,
                                           **st, **kw)
    elif impl == "fla":
        try:
            from fla.ops.gated_delta_rule import chunk_gated_delta_rule
            from fla.ops.kda import chunk_kda
            from fla.ops.cp import build_cp_context
        except Exception as e:  # noqa: BLE001 - the cell says why
            row["note"] = f"fla does not import: {type(e).__name__}: {e}"
            return row
        if device.type != "cuda":
            row["note"] = "fla runs on CUDA only"
            return row
        fn = chunk_gated_delta_rule if op == "gdn" else chunk_kda
        q, k, v, g, beta = (x[n][None] for n in ("q", "k", "v", "g", "beta"))
        cu_g = torch.tensor(cu_list, dtype=torch.long, device=device)
        ctx = None
        if P > 1:
            ctx = build_cp_context(cu_g, group=dist.group.WORLD,
                                   cu_seqlens_cpu=torch.tensor(cu_list, dtype=torch.long))
        holder = {}

        def call():
            if ctx is None:
                holder["o"] = fn(q, k, v, g, beta, cu_seqlens=cu_g)[0]
            else:
                holder["o"] = fn(q, k, v, g, beta, cp_context=ctx)[0]
        # fla's KCP all-gathers one [HV, K, V + K] f32 summary per rank (fla/ops/cp/chunk_delta_h)
        row["bytes"] = HV * K * 2 * K * 4 if P > 1 else 0
    else:
        row["note"] = f"unknown impl {impl}"
        return row

    try:
        call()  # the correctness run (also the first warm-up)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        # correctness against the single-GPU run's windows
        win = windows(T)
        mine = [t for t in win if a <= t < b]
        path = os.path.join(refdir, f"{tag}-{impl}.pt")
        if impl.startswith("deltarule"):
            o_loc = o if P == 1 else holder["res"].o
        else:
            o_loc = holder["o"][0]
        o_win = o_loc[[t - a for t in mine]].float().cpu() if mine else None
        if P == 1:
            ref = {"o": o_win, "idx": mine}
            if with_states:
                ref["final"] = fin.cpu()
            torch.save(ref, path)
        elif os.path.exists(path):
            ref = torch.load(path)
            pos = {t: i for i, t in enumerate(ref["idx"])}
            sums = [0.0, 0.0]
            if mine:
                sums = rel_sums(o_win, ref["o"][[pos[t] for t in mine]])
            row["rel_o"] = reduce_rel(sums, device)
            if with_states:
                res = holder["res"]
                fs = [0.0, 0.0]
                if res.final_rows == [0]:
                    fs = rel_sums(res.final_state.cpu(), ref["final"])
                row["rel_final"] = reduce_rel(fs, device)
        else:
            row["note"] = "no single-GPU reference (run P = 1 first)"
        row["ms"] = timed(call, args.iters, max(args.warmup - 1, 0), device)
        if impl.startswith("deltarule") and P > 1:
            row["bytes"] = holder["res"].exchanged_bytes
    except torch.cuda.OutOfMemoryError:
        row["note"] = "oom"
    except Exception as e:  # noqa: BLE001 - one failing cell does not stop the table
        row["note"] = f"{type(e).__name__}: {e}"
        if rank == 0:
            traceback.print_exc()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return row


def worker(rank, P, args, rdzv, out_path):
    import torch
    import torch.distributed as dist

    from deltarule import distributed as cp

    if args.dry_run:
        device = torch.device("cpu")
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=f"file://{rdzv}", rank=rank, world_size=P)
    else:
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", init_method=f"file://{rdzv}", rank=rank, world_size=P,
                                device_id=device)
    rows = []
    K = args.head_dim
    for shape in args.shapes:
        op, H, HV = SHAPES[shape]
        for T in args.tokens:
            a, b = cp.token_range(T, P, rank, multiple=64)
            tag = f"{op}-{H}-{HV}-{T}-{K}"
            try:
                x = make_local(op, H, HV, K, T, a, b, device)
            except torch.cuda.OutOfMemoryError:
                x = None
            ok = torch.tensor([1 if x is not None else 0], device=device)
            dist.all_reduce(ok, op=dist.ReduceOp.MIN)
            if not int(ok):
                rows += [dict(impl=i, op=op, H=H, HV=HV, T=T, P=P, note="oom (inputs)")
                         for i in args.impls]
                continue
            h0 = initial_state(HV, K, device)
            for impl in args.impls:
                row = run_impl(impl, op, H, HV, K, T, P, rank, x, a, b, h0, args, device,
                               args.out, tag)
                row["device"] = (torch.cuda.get_device_name(device) if device.type == "cuda"
                                 else "cpu (dry run)")
                rows.append(row)
                if rank == 0:
                    print(json.dumps(row), flush=True)
            del x
            if device.type == "cuda":
                torch.cuda.empty_cache()
    if rank == 0:
        with open(out_path, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    dist.barrier()
    dist.destroy_process_group()


# ---- the table ----

def table(rows, gpus):
    def cell(r):
        if r is None:
            return "-"
        if "ms" not in r:
            return r.get("note", "-")[:40]
        return f"{r['ms']:.2f}"

    key = {}
    for r in rows:
        key[(r["impl"], r["op"], r["H"], r["HV"], r["T"], r["P"])] = r
    cases = sorted({(r["op"], r["H"], r["HV"], r["T"]) for r in rows})
    impls = []
    for r in rows:
        if r["impl"] not in impls:
            impls.append(r["impl"])
    head = (["shape", "tokens", "impl"] + [f"{p} GPU ms" for p in gpus]
            + [f"eff {p}" for p in gpus if p > 1] + [f"bytes/rank {max(gpus)}", "max rel L2"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for op, H, HV, T in cases:
        for impl in impls:
            rs = [key.get((impl, op, H, HV, T, p)) for p in gpus]
            t1 = rs[0]["ms"] if rs and rs[0] and "ms" in rs[0] and gpus[0] == 1 else None
            effs = []
            for p, r in zip(gpus, rs):
                if p == 1:
                    continue
                effs.append(f"{t1 / (p * r['ms']):.2f}" if t1 and r and "ms" in r else "-")
            last = rs[-1] or {}
            rel = [r[k] for r in rs if r for k in ("rel_o", "rel_final")
                   if r.get(k) is not None]
            lines.append("| " + " | ".join(
                [f"{op} {H}/{HV}", f"{T // 1024}k", impl] + [cell(r) for r in rs] + effs
                + [f"{last.get('bytes', 0) / 2**20:.2f} MiB" if last.get("bytes") else "-",
                   f"{max(rel):.1e}" if rel else "-"]) + " |")
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    import torch
    import torch.multiprocessing as mp

    if not args.dry_run:
        if not torch.cuda.is_available():
            sys.exit("cp_multi_gpu.py: no CUDA device (use --dry-run to check the plumbing)")
        have = torch.cuda.device_count()
        gpus = [p for p in args.gpus if p <= have]
        skipped = [p for p in args.gpus if p > have]
        if skipped:
            print(f"# {have} GPUs here: not run for P = {skipped}", flush=True)
        print(f"# {torch.cuda.get_device_name(0)} x {have}, torch {torch.__version__}, "
              f"NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}, "
              f"NCCL_NVLS_ENABLE={os.environ['NCCL_NVLS_ENABLE']}", flush=True)
    else:
        gpus = args.gpus
    if 1 not in gpus:
        print("# no P = 1 run: no scaling efficiency and no single-GPU reference", flush=True)
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for P in sorted(gpus):
        rdzv = os.path.join(args.out, f"rdzv-{P}-{os.getpid()}")
        if os.path.exists(rdzv):
            os.remove(rdzv)
        out_path = os.path.join(args.out, f"rows-{P}.jsonl")
        print(f"# P = {P}", flush=True)
        mp.start_processes(worker, args=(P, args, rdzv, out_path), nprocs=P, join=True,
                           start_method="spawn")
        with open(out_path) as f:
            rows += [json.loads(line) for line in f]
    md = table(rows, sorted(gpus))
    goal = [r for r in rows if r["op"] == "gdn" and r["T"] == 1 << 20 and r["P"] == 8
            and "ms" in r]
    if goal:
        md += "\n\n1M tokens of GDN 16/32 on 8 GPUs: " + ", ".join(
            f"{r['impl']} {r['ms']:.2f} ms" for r in goal) + " (FlashQLA publishes 4.96 ms on " \
            "8 x H200, fla's KCP 17.75 ms)"
    print(md)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(md + "\n")
    with open(os.path.join(args.out, "rows.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Times one implementation of the gated delta rule on named shapes, one JSON object per line.

Implementations (`--impl`), each best run in a process of its own:
  fla         flash-linear-attention (Triton): chunk_gated_delta_rule, chunk_kda, and for decode
              fused_recurrent_gated_delta_rule / fused_recurrent_kda. fla dispatches its gdn
              prefill to FlashQLA when `flash_qla` is importable, so this process hides
              `flash_qla` (and sets FLA_FLASH_QLA=0) before it imports fla.
  flashqla    FlashQLA (TileLang): chunk_gated_delta_rule, gdn prefill only.
  flashinfer  FlashInfer: flashinfer.gdn_prefill.chunk_gated_delta_rule, gdn prefill only
              (SM90 and later; its gate is the linear decay exp(g), its state [N, HV, V, K]).
  deltarule   this project's PyTorch wrappers (deltarule.gdn_prefill, ...), to compare with the
              `deltarule bench` rows of the CLI (the difference is the Python call's cost).

Shapes use the grammar of `deltarule bench --shape`: op[-decode]-H/HV-NxL (op gdn or kda, H query
and key heads, HV value heads, N sequences of L tokens, K = V = 128; a mixed batch as
gdn-16/32-1x30000+4x500), or `anchors` / `prefill` for the sets of `deltarule bench --shape`. Inputs as `deltarule bench` builds them: bf16 q/k/v (k L2
normalised), f32 log-space gate (one per token and value head for gdn, per key channel for kda),
bf16 beta (f32 where the implementation asks for it), f32 initial and final states, packed
variable-length batches (cu_seqlens). Decode moves every sequence's state once per call.

Timing: CUDA events around each call, a 256 MiB buffer cleared between calls so that no input
stays in L2, calls queued behind a short GPU spin (the host runs ahead), the median of --iters
calls after a warm-up (fla's KDA kernels autotune for up to a minute on a shape's first call).
`host_us` is the median wall time of issuing one call. `--graph` also times one CUDA-graph
replay of the call (`graph_ms`).

    python3 bench/peers.py --impl fla --shapes anchors > fla.jsonl
    python3 bench/peers.py --impl flashqla --shapes gdn-16/32-1x8192 gdn-4/8-1x8192 --graph
    python3 bench/peers.py --impl fla --shapes anchors --save-o /tmp/o   # then, after others:
    python3 bench/peers.py --compare-o /tmp/o --shapes anchors           # rel. L2 between impls

A shape an implementation cannot run prints `"ms": null` with a `note`.
"""
import argparse
import json
import os
import statistics
import sys
import time

IMPLS = ("fla", "flashqla", "flashinfer", "deltarule")
ANCHORS = (
    "gdn-16/32-1x8192",
    "gdn-16/32-1x32768",
    "gdn-16/32-16x1024",
    "gdn-16/32-256x64",
    "gdn-4/8-1x8192",
    "kda-32/32-1x8192",
    "kda-64/64-1x8192",
    "gdn-decode-16/32-256x1",
)
PREFILL = (  # the prefill shapes of the performance table (`deltarule bench --shape prefill`)
    "gdn-16/32-1x8192",
    "gdn-16/32-1x32768",
    "gdn-16/32-16x1024",
    "gdn-16/32-256x64",
    "gdn-4/8-1x8192",
    "gdn-16/32-4x8192",
    "gdn-16/64-1x8192",
    "gdn-16/32-1x30000+4x500",
    "kda-32/32-1x8192",
    "kda-64/64-1x8192",
    "kda-32/32-16x1024",
    "kda-32/32-256x64",
)
HEAD_DIM = 128
FLUSH_BYTES = 256 << 20


def parse_shape(name):
    """op[-decode]-H/HV-NxL, or a mixed batch NxL+MxJ+..., -> (op, mode, H, HV, lengths);
    ValueError when it does not parse."""
    bad = ValueError(f"shape {name!r}: expected op[-decode]-H/HV-NxL such as gdn-16/32-1x8192 "
                     "or gdn-16/32-1x30000+4x500")
    parts = name.split("-")
    if len(parts) == 4 and parts[1] == "decode":
        op, mode, heads, seqs = parts[0], "decode", parts[2], parts[3]
    elif len(parts) == 3:
        op, mode, heads, seqs = parts[0], "prefill", parts[1], parts[2]
    else:
        raise bad
    if op not in ("gdn", "kda") or "/" not in heads or "x" not in seqs:
        raise bad
    try:
        h, hv = (int(x) for x in heads.split("/", 1))
        groups = [tuple(int(x) for x in grp.split("x", 1)) for grp in seqs.split("+")]
        if any(len(grp) != 2 for grp in groups):
            raise bad
    except ValueError:
        raise bad from None
    if min(h, hv, *(c for grp in groups for c in grp)) < 1 or hv % h != 0:
        raise ValueError(f"shape {name!r}: every count must be positive and HV a multiple of H")
    return op, mode, h, hv, [length for n, length in groups for _ in range(n)]


def expand(shapes):
    """`anchors`, `prefill` -> those lists; other names kept, in order, without repeats."""
    out = []
    for s in shapes:
        for x in {"anchors": ANCHORS, "prefill": PREFILL}.get(s, (s,)):
            if x not in out:
                out.append(x)
    return out


def make_inputs(op, mode, h, hv, lengths, seed=0):
    """The common inputs, unbatched: q, k [T, H, K]; v [T, HV, V]; g [T, HV] (gdn) or
    [T, HV, K] (kda), log space; beta [T, HV]; h0 [N, HV, K, V]; cu [N + 1] (int64)."""
    import torch
    import torch.nn.functional as F

    dev, K, V, T, n = "cuda", HEAD_DIM, HEAD_DIM, sum(lengths), len(lengths)
    gen = torch.Generator(device=dev).manual_seed(seed)
    q = torch.randn(T, h, K, device=dev, generator=gen).bfloat16()
    k = F.normalize(torch.randn(T, h, K, device=dev, generator=gen), dim=-1).bfloat16()
    v = torch.randn(T, hv, V, device=dev, generator=gen).bfloat16()
    gshape = (T, hv, K) if op == "kda" else (T, hv)
    g = F.logsigmoid(3.0 + 1.5 * torch.randn(gshape, device=dev, generator=gen)).float()
    beta = torch.sigmoid(torch.randn(T, hv, device=dev, generator=gen)).bfloat16()
    h0 = 0.1 * torch.randn(n, hv, K, V, device=dev, generator=gen)
    cu = torch.tensor([0] + lengths, device=dev, dtype=torch.long).cumsum(0)
    return dict(q=q, k=k, v=v, g=g, beta=beta, h0=h0, cu=cu, n=n, length=max(lengths))


def unsupported(why):
    raise NotImplementedError(why)


def call_fla(op, mode, x):
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule
    from fla.ops.kda import chunk_kda

    q, k, v, g, beta = (x[t][None] for t in ("q", "k", "v", "g", "beta"))
    kw = dict(initial_state=x["h0"], output_final_state=True, cu_seqlens=x["cu"])
    if mode == "prefill" and op == "gdn":
        return lambda: chunk_gated_delta_rule(q, k, v, g, beta, **kw)
    if mode == "prefill":
        return lambda: chunk_kda(q, k, v, g, beta, **kw)
    if op == "gdn":
        return lambda: fused_recurrent_gated_delta_rule(q, k, v, g=g, beta=beta, **kw)
    from fla.ops.kda import fused_recurrent_kda

    return lambda: fused_recurrent_kda(q, k, v, g=g, beta=beta, **kw)


def call_flashqla(op, mode, x):
    if op != "gdn" or mode != "prefill":
        unsupported("FlashQLA times gdn prefill only")
    from flash_qla import chunk_gated_delta_rule

    q, k, v, g, beta = (x[t][None] for t in ("q", "k", "v", "g", "beta"))
    return lambda: chunk_gated_delta_rule(q, k, v, g, beta, initial_state=x["h0"],
                                          output_final_state=True, cu_seqlens=x["cu"])


def call_flashinfer(op, mode, x):
    if op != "gdn" or mode != "prefill":
        unsupported("FlashInfer's chunk_gated_delta_rule is gdn prefill only")
    import torch
    from flashinfer.gdn_prefill import chunk_gated_delta_rule

    q, k, v = x["q"], x["k"], x["v"]
    alpha = x["g"].exp()  # FlashInfer takes the decay itself, f32
    beta = x["beta"].float()
    h0 = x["h0"].transpose(-1, -2).contiguous()  # its state layout is [N, HV, V, K]
    o = q.new_empty(v.shape)
    state = torch.empty_like(h0)
    return lambda: chunk_gated_delta_rule(q, k, v, alpha, beta, None, h0, True, x["cu"],
                                          output=o, output_state=state)


def call_deltarule(op, mode, x):
    import deltarule
    import torch

    q, k, v, g, beta = x["q"], x["k"], x["v"], x["g"], x["beta"]
    cu = x["cu"].int()
    o = torch.empty_like(v)
    f = getattr(deltarule, f"{op}_{mode}")
    kw = dict(out=o, state_layout="kv", max_seqlen=x["length"])
    if mode == "decode":
        # the pool in place, one row per sequence, every row named (as `deltarule bench`)
        kw.update(state_pool=x["h0"].clone(),
                  state_indices=torch.arange(x["n"], dtype=torch.int32, device=v.device))
    else:
        kw.update(initial_state=x["h0"], final_state=torch.empty_like(x["h0"]))
    return lambda: f(q, k, v, g, beta, cu, **kw)


CALLS = {"fla": call_fla, "flashqla": call_flashqla, "flashinfer": call_flashinfer,
         "deltarule": call_deltarule}


def timed(fn, iters, warmup):
    """Median GPU ms per call (CUDA events, L2 cleared between calls) and median host us."""
    import torch

    flush = torch.empty(FLUSH_BYTES, dtype=torch.int8, device="cuda")
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(iters)]
    host = []
    if hasattr(torch.cuda, "_sleep"):
        torch.cuda._sleep(2_000_000)  # about 1 ms: the host queues ahead of the GPU
    for a, b in events:
        flush.zero_()
        a.record()
        t0 = time.perf_counter()
        fn()
        host.append((time.perf_counter() - t0) * 1e6)
        b.record()
    torch.cuda.synchronize()
    ms = sorted(a.elapsed_time(b) for a, b in events)
    pick = lambda p: ms[round((len(ms) - 1) * p)]  # noqa: E731
    return statistics.median(ms), pick(0.1), pick(0.9), statistics.median(host)


def graph_ms(fn, iters):
    """Median GPU ms of replaying a CUDA graph that holds one call."""
    import torch

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    torch.cuda.synchronize()
    return timed(graph.replay, iters, 3)[0]


def hide_flash_qla():
    """fla dispatches gdn prefill to FlashQLA when it can import it: make sure it cannot."""
    import importlib.util

    os.environ["FLA_FLASH_QLA"] = "0"
    sys.modules["flash_qla"] = None  # import flash_qla now raises ImportError
    if importlib.util.find_spec("flash_qla") is not None:
        sys.exit("peers.py: flash_qla is still importable; run --impl fla without it on the path")


def version(impl):
    from importlib import metadata

    for dist in {"fla": ("fla-core", "flash-linear-attention"), "flashqla": ("flash-qla",),
                 "flashinfer": ("flashinfer-python", "flashinfer"),
                 "deltarule": ("deltarule",)}[impl]:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def run(args):
    if args.impl == "fla":
        hide_flash_qla()
    import torch

    meta = {"impl": args.impl, "version": version(args.impl),
            "device": torch.cuda.get_device_name(), "torch": torch.__version__}
    print(json.dumps({"meta": meta}), flush=True)
    for name in args.shapes:
        op, mode, h, hv, lengths = parse_shape(name)
        rec = {"shape": name, "impl": args.impl}
        x = make_inputs(op, mode, h, hv, lengths)
        try:
            fn = CALLS[args.impl](op, mode, x)
            out = fn()  # the first call compiles or autotunes
            torch.cuda.synchronize()
            save_o(args, name, out)
            med, p10, p90, host = timed(fn, args.iters, args.warmup)
            rec.update(ms=med, ms_p10=p10, ms_p90=p90, host_us=host)
            if args.graph:
                try:
                    rec["graph_ms"] = graph_ms(fn, args.iters)
                except Exception as e:  # a call that cannot be captured still has its eager time
                    rec["graph_note"] = f"{type(e).__name__}: {e}"[:200]
        except NotImplementedError as e:
            rec.update(ms=None, note=str(e))
        except Exception as e:  # report and go on with the other shapes
            rec.update(ms=None, note=f"{type(e).__name__}: {e}"[:300])
        print(json.dumps(rec), flush=True)
        del x
        torch.cuda.empty_cache()


def o_path(d, impl, name):
    return os.path.join(d, f"{impl}_{name.replace('/', '_')}.pt")


def save_o(args, name, out):
    """With --save-o DIR, the output o of the first call as DIR/{impl}_{shape}.pt (bf16, [T, HV, V])."""
    if not args.save_o:
        return
    import torch

    o = out[0] if isinstance(out, (tuple, list)) else out
    os.makedirs(args.save_o, exist_ok=True)
    o = o.detach().reshape(-1, *o.shape[-2:]).to(torch.bfloat16).cpu()
    torch.save(o, o_path(args.save_o, args.impl, name))


def compare(d, shapes):
    """Relative L2 distance of every pair of saved outputs of a shape (the same seeded inputs)."""
    import torch

    for name in shapes:
        have = [i for i in IMPLS if os.path.exists(o_path(d, i, name))]
        for i, a in enumerate(have):
            for b in have[i + 1:]:
                x = torch.load(o_path(d, a, name)).float()
                y = torch.load(o_path(d, b, name)).float()
                rel = ((x - y).norm() / x.norm()).item() if x.shape == y.shape else None
                print(json.dumps({"shape": name, "pair": f"{a}/{b}", "o_rel_l2": rel}), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--impl", choices=IMPLS, default="fla")
    ap.add_argument("--shapes", nargs="+", default=["anchors"],
                    help="op[-decode]-H/HV-NxL names, `anchors` (default) or `prefill`")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--graph", action="store_true", help="also time CUDA-graph replays")
    ap.add_argument("--save-o", metavar="DIR", help="save each shape's o as DIR/{impl}_{shape}.pt")
    ap.add_argument("--compare-o", metavar="DIR", help="compare the outputs saved in DIR, then exit")
    ap.add_argument("--list", action="store_true", help="print the shapes as parsed, then exit")
    args = ap.parse_args()
    try:
        args.shapes = expand(args.shapes)
        parsed = [(s, parse_shape(s)) for s in args.shapes]
    except ValueError as e:
        ap.error(str(e))
    if args.list:
        for s, p in parsed:
            print(s, *p)
        return 0
    if args.compare_o:
        return compare(args.compare_o, args.shapes)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""flash-linear-attention (Triton) and FlashQLA timings on the anchor shapes of the CUDA issue, for
comparison with `deltarule bench` in the same call (bench/h200_cuda.sh).

`--impl fla` (default) times fla 0.6.0's Triton kernels; `--impl flashqla` times FlashQLA 0.1.3
(TileLang; gdn shapes only) in eager launches and, with `--graph`, as CUDA-graph replays. Run them
in separate processes: fla 0.6.0 dispatches its gdn prefill to FlashQLA when flash_qla is
importable, so the fla process must not see it. `--save-o DIR` writes each shape's o (bf16) and
`--compare-o DIR` prints the relative L2 distance between the two implementations' saved outputs
(the same seeded inputs), a check that FlashQLA computed the same operator.

Inputs as the anchors were measured: bf16 q/k/v (k L2-normalised), f32 log-space g, bf16 beta,
f32 initial and final state, packed varlen (B = 1, cu_seqlens). Times are
`triton.testing.do_bench` medians (eager launches) after a warm-up call (fla's KDA kernels autotune
for up to 80 s on the first call of a shape). Prints one JSON object per shape.
"""
import argparse
import json
import sys

import torch
import torch.nn.functional as F
import triton

SHAPES = {
    "gdn-16/32-1x8192": ("gdn", 16, 32, 1, 8192),
    "gdn-16/32-1x32768": ("gdn", 16, 32, 1, 32768),
    "gdn-16/32-16x1024": ("gdn", 16, 32, 16, 1024),
    "gdn-16/32-256x64": ("gdn", 16, 32, 256, 64),
    "gdn-4/8-1x8192": ("gdn", 4, 8, 1, 8192),
    "kda-32/32-1x8192": ("kda", 32, 32, 1, 8192),
    "kda-64/64-1x8192": ("kda", 64, 64, 1, 8192),
    "gdn-decode-16/32-256x1": ("gdn-decode", 16, 32, 256, 1),
}


def make(op, h, hv, n, l, dev, K=128, V=128):
    T = n * l
    g = torch.Generator(device=dev).manual_seed(0)
    q = torch.randn(1, T, h, K, device=dev, generator=g).bfloat16()
    k = F.normalize(torch.randn(1, T, h, K, device=dev, generator=g), dim=-1).bfloat16()
    v = torch.randn(1, T, hv, V, device=dev, generator=g).bfloat16()
    gshape = (1, T, hv, K) if op == "kda" else (1, T, hv)
    gate = F.logsigmoid(3.0 + 1.5 * torch.randn(gshape, device=dev, generator=g)).float()
    beta = torch.sigmoid(torch.randn(1, T, hv, device=dev, generator=g)).bfloat16()
    h0 = 0.1 * torch.randn(n, hv, K, V, device=dev, generator=g)
    cu = torch.arange(0, T + 1, l, device=dev, dtype=torch.long)
    return q, k, v, gate, beta, h0, cu


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", nargs="*", default=list(SHAPES))
    ap.add_argument("--skip-kda", action="store_true", help="skip fla's KDA (autotune costs ~1 min a shape)")
    ap.add_argument("--impl", choices=["fla", "flashqla"], default="fla")
    ap.add_argument("--graph", action="store_true", help="also time CUDA-graph replays")
    ap.add_argument("--save-o", metavar="DIR", help="save each shape's o as DIR/{impl}_{shape}.pt")
    ap.add_argument("--compare-o", metavar="DIR", help="compare saved fla and flashqla outputs, then exit")
    args = ap.parse_args()
    if args.compare_o:
        return compare(args.compare_o, args.shapes)
    if args.impl == "flashqla":
        return run_flashqla(args)
    dev = "cuda"
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule
    from fla.ops.kda import chunk_kda
    import importlib.util
    if importlib.util.find_spec("flash_qla") is not None:
        print("fla_bench: flash_qla is importable, so fla would dispatch to it; run --impl fla "
              "without it on the path", file=sys.stderr)
        return 2

    for name in args.shapes:
        op, h, hv, n, l = SHAPES[name]
        if op == "kda" and args.skip_kda:
            print(json.dumps({"shape": name, "fla_ms": None, "note": "skipped (autotune time)"}), flush=True)
            continue
        q, k, v, gate, beta, h0, cu = make(op, h, hv, n, l, dev)
        if op == "gdn":
            fn = lambda: chunk_gated_delta_rule(q, k, v, gate, beta, initial_state=h0,
                                                output_final_state=True, cu_seqlens=cu)
        elif op == "kda":
            fn = lambda: chunk_kda(q, k, v, gate, beta, initial_state=h0, output_final_state=True,
                                   cu_seqlens=cu)
        else:
            fn = lambda: fused_recurrent_gated_delta_rule(q, k, v, g=gate, beta=beta, initial_state=h0,
                                                          output_final_state=True, cu_seqlens=cu)
        try:
            out = fn()
            torch.cuda.synchronize()
            save_o(args, name, out)
            ms = triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")
            print(json.dumps({"shape": name, "fla_ms": ms}), flush=True)
        except Exception as e:  # report and go on with the other shapes
            print(json.dumps({"shape": name, "fla_ms": None, "note": f"{type(e).__name__}: {e}"[:300]}), flush=True)
        del q, k, v, gate, beta, h0, cu
        torch.cuda.empty_cache()


def save_o(args, name, out):
    if args.save_o and isinstance(out, tuple):
        import os
        os.makedirs(args.save_o, exist_ok=True)
        torch.save(out[0].detach().to(torch.bfloat16).cpu(),
                   f"{args.save_o}/{args.impl}_{name.replace('/', '_')}.pt")


def graph_ms(fn):
    """Median time of a CUDA-graph replay of fn (None when fn cannot be captured)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    g.replay()
    torch.cuda.synchronize()
    return triton.testing.do_bench(g.replay, warmup=25, rep=200, return_mode="median")


def run_flashqla(args):
    dev = "cuda"
    from flash_qla import chunk_gated_delta_rule
    import flash_qla
    print(f"flash_qla {flash_qla.__version__}", file=sys.stderr)
    for name in args.shapes:
        op, h, hv, n, l = SHAPES[name]
        if op != "gdn":
            print(json.dumps({"shape": name, "flashqla_ms": None, "note": "gdn prefill only"}), flush=True)
            continue
        q, k, v, gate, beta, h0, cu = make(op, h, hv, n, l, dev)
        fn = lambda: chunk_gated_delta_rule(q, k, v, gate, beta, initial_state=h0,
                                            output_final_state=True, cu_seqlens=cu)
        rec = {"shape": name}
        try:
            # the first call of a shape compiles its kernels (20 to 45 s)
            out = fn()
            torch.cuda.synchronize()
            save_o(args, name, out)
            rec["flashqla_ms"] = triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")
            if args.graph:
                try:
                    rec["flashqla_graph_ms"] = graph_ms(fn)
                except Exception as e:
                    rec["graph_note"] = f"{type(e).__name__}: {e}"[:200]
        except Exception as e:
            rec["flashqla_ms"] = None
            rec["note"] = f"{type(e).__name__}: {e}"[:300]
        print(json.dumps(rec), flush=True)
        del q, k, v, gate, beta, h0, cu
        torch.cuda.empty_cache()


def compare(d, shapes):
    import os
    for name in shapes:
        a, b = (f"{d}/{impl}_{name.replace('/', '_')}.pt" for impl in ("fla", "flashqla"))
        if not (os.path.exists(a) and os.path.exists(b)):
            continue
        x, y = torch.load(a).float(), torch.load(b).float()
        rel = ((x - y).norm() / x.norm()).item()
        print(json.dumps({"shape": name, "o_rel_l2_fla_vs_flashqla": rel}), flush=True)


if __name__ == "__main__":
    sys.exit(main())

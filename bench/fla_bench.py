#!/usr/bin/env python3
"""flash-linear-attention (Triton) timings on the anchor shapes of the CUDA issue, for comparison
with `deltarule bench` in the same call (bench/h200_cuda.sh).

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
    args = ap.parse_args()
    dev = "cuda"
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule
    from fla.ops.kda import chunk_kda

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
            fn()
            torch.cuda.synchronize()
            ms = triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")
            print(json.dumps({"shape": name, "fla_ms": ms}), flush=True)
        except Exception as e:  # report and go on with the other shapes
            print(json.dumps({"shape": name, "fla_ms": None, "note": f"{type(e).__name__}: {e}"[:300]}), flush=True)
        del q, k, v, gate, beta, h0, cu
        torch.cuda.empty_cache()


if __name__ == "__main__":
    sys.exit(main())

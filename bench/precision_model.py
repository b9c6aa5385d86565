#!/usr/bin/env python3
"""A float64 model of the chunked prefill's operand roundings: what each operand precision of a
tensor-core kernel costs in accuracy, on random data and on near-collinear keys.

    python3 bench/precision_model.py [--tokens N] [--seed S]

Each design runs the chunked algorithm of docs/spec.md (section 5, gdn, chunks of 64, K = V = 128)
in float64 with its roundings applied where the tensor cores read operands (accumulation exact),
and the table gives the relative L2 error of o and of the final state against the float64 token
recurrence on the same bf16 inputs, per data set. Designs:

- `bf16, T_u hi+lo`: the CUDA T-form pair's roundings: the state as a bf16 operand (K S, Q S),
  Y = K S rounded to bf16, T_w, P and V_new (o and the update) in bf16, T_u as bf16 hi + lo;
- `bf16, T_u hi`: the same with T_u in one bf16 part;
- `f16, T_u single`: every operand in f16 (11-bit significand, largest finite 65504);
- `W, U in bf16`: the split form that stores W and U in bf16 (fla's chunk kernels), the state,
  V_new and P as bf16 operands.

Data sets: `random` (normal q, v, normalised normal k, beta uniform in (0, 1), log decays
logsigmoid(3 + 1.5 z), as the test generator draws them), `correlated` (keys 1 + 0.4 z per channel
before normalising), `collinear` (1 + 0.1 z, beta = 1, no decay: the conformance suite's
collinear-keys case) and `collinear 0.05` (1 + 0.05 z). Needs numpy; takes a few seconds.
"""
import argparse

import numpy as np


def bf16(x):
    """Round to the nearest bf16 (ties to even), returned as float64."""
    b = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    return r.view(np.float32).astype(np.float64)


def f16(x):
    return np.asarray(x, dtype=np.float16).astype(np.float64)


def recurrence(q, k, v, g, beta):
    """The float64 token recurrence: o_t = scale S_t^T q_t, S_t = e^g_t S + beta k (v - k S)."""
    kd = k.shape[1]
    s = np.zeros((kd, v.shape[1]))
    o = np.zeros_like(v)
    for t in range(len(g)):
        s = np.exp(g[t]) * s
        s = s + np.outer(beta[t] * k[t], v[t] - k[t] @ s)
        o[t] = kd ** -0.5 * (q[t] @ s)
    return o, s


def chunked(q, k, v, g, beta, design, chunk=64):
    """The chunked algorithm with `design`'s operand roundings."""
    kd = k.shape[1]
    sc = kd ** -0.5
    s = np.zeros((kd, v.shape[1]))
    o = np.zeros_like(v)
    r = f16 if design.startswith("f16") else bf16
    for c0 in range(0, len(g), chunk):
        sl = slice(c0, c0 + chunk)
        qc, kc, vc, b = q[sl], k[sl], v[sl], beta[sl]
        gam = np.cumsum(g[sl])
        n = len(gam)
        d = np.subtract.outer(gam, gam)
        dec = np.where(np.tril(np.ones((n, n))) > 0, np.exp(np.minimum(d, 0)), 0.0)
        a = (b[:, None] * (kc @ kc.T)) * np.tril(dec, -1)
        t = np.linalg.inv(np.eye(n) + a)
        p = sc * np.tril(qc @ kc.T) * dec
        if design == "W, U in bf16":
            w = bf16(t @ ((b * np.exp(gam))[:, None] * kc))
            u = bf16(t @ (b[:, None] * vc))
            vn = bf16(u - w @ bf16(s))
            o[sl] = sc * np.exp(gam)[:, None] * (qc @ bf16(s)) + bf16(p) @ vn
            s = np.exp(gam[-1]) * s + kc.T @ bf16(np.exp(gam[-1] - gam)[:, None] * vn)
            continue
        tu = t * b[None, :]
        tu = r(tu) + (r(tu - r(tu)) if design == "bf16, T_u hi+lo" else 0.0)
        tw = r(t * (b * np.exp(gam))[None, :])
        sb = r(s)
        vn = tu @ r(vc) - tw @ r(kc @ sb)
        o[sl] = sc * np.exp(gam)[:, None] * (r(qc) @ sb) + r(p) @ r(vn)
        s = np.exp(gam[-1]) * s + r(kc).T @ r(np.exp(gam[-1] - gam)[:, None] * vn)
    return o, s


DESIGNS = ["bf16, T_u hi+lo", "bf16, T_u hi", "f16, T_u single", "W, U in bf16"]


def data(name, tokens, kd, rng):
    q = bf16(rng.standard_normal((tokens, kd)))
    v = bf16(rng.standard_normal((tokens, kd)))
    spread = {"random": None, "correlated": 0.4, "collinear": 0.1, "collinear 0.05": 0.05}[name]
    if spread is None:
        k = rng.standard_normal((tokens, kd))
    else:
        k = 1.0 + spread * rng.standard_normal((tokens, kd))
    k = bf16(k / np.linalg.norm(k, axis=1, keepdims=True))
    if name.startswith("collinear"):
        g = np.zeros(tokens)
        beta = np.ones(tokens)
    else:
        z = 3.0 + 1.5 * rng.standard_normal(tokens)
        g = -np.log1p(np.exp(-z))  # logsigmoid
        beta = bf16(rng.uniform(0.0, 1.0, tokens))
    return q, k, v, g, beta


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=1024, help="tokens of the one sequence (1024)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    sets = ["random", "correlated", "collinear", "collinear 0.05"]
    cells = {}
    for name in sets:
        q, k, v, g, beta = data(name, args.tokens, 128, rng)
        o0, s0 = recurrence(q, k, v, g, beta)
        for design in DESIGNS:
            o, s = chunked(q, k, v, g, beta, design)
            eo = np.linalg.norm(o - o0) / np.linalg.norm(o0)
            es = np.linalg.norm(s - s0) / np.linalg.norm(s0)
            cells[(design, name)] = f"{eo:.1e} / {es:.1e}"
    print(f"relative L2 error of o / final state against the float64 recurrence "
          f"(gdn, one sequence of {args.tokens} tokens, K = V = 128, seed {args.seed})\n")
    print("| design | " + " | ".join(sets) + " |")
    print("| --- | " + " | ".join("---" for _ in sets) + " |")
    for design in DESIGNS:
        print(f"| {design} | " + " | ".join(cells[(design, n)] for n in sets) + " |")


if __name__ == "__main__":
    main()

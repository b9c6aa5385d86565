"""deltarule.fla on CPU tensors (the CPU backend): every function against an independent float64
recurrence written from fla's kernels (and vLLM's pooled semantics) for every option
combination, the refusals, save_case, capture() and the case files they write (replayed with the
deltarule CLI when it is built). The mapping without torch: test_fla_mapping.py."""

import itertools
import math
import sys
import types

import pytest

from deltarule import fla as F

# ---------------------------------------------------------------------------------------------
# torch on the CPU

torch = pytest.importorskip("torch")

import deltarule  # noqa: E402


def _l2(x):
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def naive(q, k, v, g, beta, *, h0=None, scale=None, l2norm=False, gate="log", A_log=None,
          dt_bias=None, lower_bound=None, beta_mode="prob", kda=False, v_first=False):
    """fla's recurrence in float64 for one sequence: q, k [T, H, K], v [T, HV, V], g [T, HV] or
    [T, HV, K], beta [T, HV]; h0 [HV, K, V] ([HV, V, K] with v_first). Returns o and every
    state after each token [T, HV, K, V] (in the kv layout)."""
    d = torch.float64
    q, k, v, g, beta = (x.to(d) for x in (q, k, v, g, beta))
    T, H, K = q.shape
    HV, V = v.shape[1:]
    if l2norm:
        q, k = _l2(q), _l2(k)
    q = q.repeat_interleave(HV // H, 1)
    k = k.repeat_interleave(HV // H, 1)
    scale = K ** -0.5 if scale is None else scale
    if gate == "softplus":
        x = g + (0 if dt_bias is None else dt_bias.to(d).view((HV,) if not kda else (HV, K)))
        a = A_log.to(d).exp().view((HV,) if not kda else (HV, 1))
        g = -a * torch.nn.functional.softplus(x, 1.0, 20.0)
    elif gate == "lower_bound":
        x = g + (0 if dt_bias is None else dt_bias.to(d).view(HV, K))
        if A_log is not None:
            x = A_log.to(d).exp().view(HV, 1) * x
        g = lower_bound * torch.sigmoid(x)
    if beta_mode == "logit":
        beta = torch.sigmoid(beta)
    elif beta_mode == "logit2":
        beta = 2 * torch.sigmoid(beta)
    S = torch.zeros(HV, K, V, dtype=d) if h0 is None else h0.to(d).clone()
    if v_first and h0 is not None:
        S = S.transpose(-1, -2).clone()
    o = torch.zeros(T, HV, V, dtype=d)
    states = []
    for t in range(T):
        decay = g[t].exp()
        S = S * (decay[:, None, None] if not kda else decay[:, :, None])
        u = beta[t][:, None] * (v[t] - torch.einsum("hkv,hk->hv", S, k[t]))
        S = S + torch.einsum("hk,hv->hkv", k[t], u)
        o[t] = scale * torch.einsum("hkv,hk->hv", S, q[t])
        states.append(S.clone())
    return o, torch.stack(states) if states else torch.zeros(0, HV, K, V, dtype=d)


def rel(a, b):
    a, b = a.double(), b.double()
    n = b.norm()
    return float((a - b).norm() / (n if n > 0 else 1.0))


def inputs(op, B, T, H, HV, K, V, dtype=torch.float32, seed=0, gate="log", beta_mode="prob"):
    gen = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=gen)  # noqa: E731
    q = r(B, T, H, K).to(dtype)
    k = _l2(r(B, T, H, K)).to(dtype)
    v = r(B, T, HV, V).to(dtype)
    gs = (B, T, HV) if op == "gdn" else (B, T, HV, K)
    if gate == "log":
        g = -torch.rand(*gs, generator=gen) * (0.5 if op == "gdn" else 0.2)
    else:
        g = r(*gs)  # the raw gate input
    beta = torch.rand(B, T, HV, generator=gen) if beta_mode == "prob" else r(B, T, HV)
    return q, k, v, g, beta, gen


FNS = {("gdn", "chunk"): F.chunk_gated_delta_rule,
       ("gdn", "recurrent"): F.fused_recurrent_gated_delta_rule,
       ("kda", "chunk"): F.chunk_kda, ("kda", "recurrent"): F.fused_recurrent_kda}

GATES = {"gdn": ["log", "softplus", "softplus-nobias"],
         "kda": ["log", "softplus", "lower_bound", "lower_bound-noA"]}

COMBOS = [
    (op, kind, gate, beta_mode, gva, varlen, state, v_first)
    for op, kind in FNS
    for gate in GATES[op]
    for beta_mode in ("prob", "logit", "logit2")
    for gva, varlen, state, v_first in [
        (False, False, "none", False), (True, True, "initial", False),
        (True, False, "final", True), (False, True, "both", True),
    ]
]


@pytest.mark.parametrize("op, kind, gate, beta_mode, gva, varlen, state, v_first", COMBOS)
def test_functions_match_the_float64_recurrence(op, kind, gate, beta_mode, gva, varlen, state,
                                                v_first):
    H, HV, K, V = (2, 4, 32, 16) if gva else (2, 2, 16, 32)
    lens = [7, 0, 19, 1] if varlen else [13, 13, 13]
    N = len(lens)
    B, T = (1, sum(lens)) if varlen else (N, lens[0])
    q, k, v, g, beta, gen = inputs(op, B, T, H, HV, K, V, gate=gate.split("-")[0],
                                   beta_mode=beta_mode,
                                   seed=hash((op, kind, gate, beta_mode, gva)) % 1000)
    kw = dict(use_qk_l2norm_in_kernel=(beta_mode != "prob"), scale=0.3 if gva else None,
              state_v_first=v_first)
    nk = dict(gate=gate.split("-")[0], beta_mode=beta_mode, l2norm=kw["use_qk_l2norm_in_kernel"],
              scale=kw["scale"], kda=op == "kda", v_first=v_first)
    if beta_mode != "prob":
        kw["use_beta_sigmoid_in_kernel"] = True
        kw["allow_neg_eigval"] = beta_mode == "logit2"
    if gate != "log":
        kw["use_gate_in_kernel"] = True
        nk["A_log"] = kw["A_log"] = torch.randn(HV, generator=gen) * 0.5
        if gate == "lower_bound-noA":
            kw["A_log"] = nk["A_log"] = None
        if gate != "softplus-nobias":
            nk["dt_bias"] = kw["dt_bias"] = torch.randn(HV if op == "gdn" else HV * K,
                                                        generator=gen)
        if gate.startswith("lower_bound"):
            nk["lower_bound"] = kw["lower_bound"] = -4.0
    S = (V, K) if v_first else (K, V)
    h0 = torch.randn(N, HV, *S, generator=gen) if state in ("initial", "both") else None
    if varlen:
        kw["cu_seqlens"] = torch.tensor([0] + list(itertools.accumulate(lens)))
    o, ht = FNS[(op, kind)](q, k, v, g=g, beta=beta, initial_state=h0,
                            output_final_state=state in ("final", "both"), **kw)
    assert o.shape == (B, T, HV, V) and o.dtype == q.dtype
    assert (ht is None) == (state not in ("final", "both"))
    starts = list(itertools.accumulate([0] + lens))
    flat = lambda x: x.reshape((B * T,) + tuple(x.shape[2:]))  # noqa: E731
    fo = flat(o)
    for n in range(N):
        a, b = starts[n], starts[n + 1]
        sl = lambda x: flat(x)[a:b]  # noqa: E731
        ro, rs = naive(sl(q), sl(k), sl(v), sl(g), sl(beta),
                       h0=None if h0 is None else h0[n], **nk)
        if b > a:
            assert rel(fo[a:b], ro) < 1e-5, n
        if ht is not None:
            want = rs[-1] if b > a else (torch.zeros(HV, K, V, dtype=torch.float64)
                                         if h0 is None else h0[n].double()
                                         if not v_first else h0[n].double().transpose(-1, -2))
            got = ht[n].transpose(-1, -2) if v_first else ht[n]
            assert ht.dtype == torch.float32
            assert rel(got, want) < 1e-5, n


@pytest.mark.parametrize("op", ["gdn", "kda"])
def test_bf16_inputs_and_the_float64_reference_of_the_engine(op):
    B, T, H, HV, K, V = 2, 37, 2, 4, 32, 32
    q, k, v, g, beta, gen = inputs(op, B, T, H, HV, K, V, dtype=torch.bfloat16)
    h0 = torch.randn(B, HV, K, V, generator=gen)
    fn = FNS[(op, "chunk")]
    o, ht = fn(q, k, v, g, beta, initial_state=h0, output_final_state=True)
    assert o.dtype == torch.bfloat16 and ht.dtype == torch.float32
    cu = torch.tensor([0, T, 2 * T])
    pk = lambda x: x.reshape((B * T,) + tuple(x.shape[2:]))  # noqa: E731
    ref = deltarule.reference(op, pk(q), pk(k), pk(v), pk(g), pk(beta), cu, initial_state=h0,
                              state_layout="kv")
    assert rel(pk(o), ref["o"]) < 1e-2  # bf16 rounding of o
    assert rel(ht, ref["final_state"]) < 1e-6


def _pool_case(op, seed=1):
    H, HV, K, V = 2, 4, 16, 16
    lens = [1, 3, 2]
    T = sum(lens)
    q, k, v, g, beta, gen = inputs(op, 1, T, H, HV, K, V, seed=seed)
    cu = torch.tensor([0] + list(itertools.accumulate(lens)))
    pool = torch.randn(9, HV, K, V, generator=gen)
    return q, k, v, g, beta, cu, pool, lens, gen


@pytest.mark.parametrize("op", ["gdn", "kda"])
def test_pooled_decode_one_row_per_sequence(op):
    q, k, v, g, beta, cu, pool, lens, _ = _pool_case(op)
    p0 = pool.clone()
    idx = torch.tensor([5, -1, 2], dtype=torch.int32)
    fn = FNS[(op, "recurrent")]
    o, fs = fn(q, k, v, g=g, beta=beta, initial_state=pool, cu_seqlens=cu,
               ssm_state_indices=idx, use_qk_l2norm_in_kernel=True)
    assert fs is pool
    starts = [0, 1, 4, 6]
    for n, row in enumerate([5, -1, 2]):
        a, b = starts[n], starts[n + 1]
        ro, rs = naive(q[0, a:b], k[0, a:b], v[0, a:b], g[0, a:b], beta[0, a:b],
                       h0=None if row < 0 else p0[row], l2norm=True, kda=op == "kda")
        assert rel(o[0, a:b], ro) < 1e-5
        if row >= 0:
            assert rel(pool[row], rs[-1]) < 1e-5
    untouched = [r for r in range(9) if r not in (5, 2)]
    assert torch.equal(pool[untouched], p0[untouched])
    # inplace_final_state=False: the state after every token, the pool untouched
    pool2 = p0.clone()
    o2, per_token = fn(q, k, v, g=g, beta=beta, initial_state=pool2, cu_seqlens=cu,
                       ssm_state_indices=idx, inplace_final_state=False,
                       use_qk_l2norm_in_kernel=True)
    assert torch.equal(pool2, p0) and per_token.shape == (6, 4, 16, 16)
    assert rel(o2, o) < 1e-6
    ro, rs = naive(q[0, 1:4], k[0, 1:4], v[0, 1:4], g[0, 1:4], beta[0, 1:4], l2norm=True,
                   kda=op == "kda")
    assert rel(per_token[1:4], rs) < 1e-5


@pytest.mark.parametrize("op", ["gdn", "kda"])
@pytest.mark.parametrize("inplace", [True, False])
def test_speculative_decode_with_accepted_token_counts(op, inplace):
    q, k, v, g, beta, cu, pool, lens, _ = _pool_case(op, seed=3)
    p0 = pool.clone()
    idx = torch.tensor([[0, 1, -1], [2, 3, 4], [6, 7, 8]])
    nacc = torch.tensor([1, 3, 2])
    fn = FNS[(op, "recurrent")]
    o, fs = fn(q, k, v, g=g, beta=beta, initial_state=pool, cu_seqlens=cu,
               ssm_state_indices=idx, num_accepted_tokens=nacc, inplace_final_state=inplace)
    starts = [0, 1, 4, 6]
    written = {}
    for n in range(3):
        a, b = starts[n], starts[n + 1]
        h0 = p0[int(idx[n, int(nacc[n]) - 1])]
        ro, rs = naive(q[0, a:b], k[0, a:b], v[0, a:b], g[0, a:b], beta[0, a:b], h0=h0,
                       kda=op == "kda")
        assert rel(o[0, a:b], ro) < 1e-5
        for t in range(b - a):
            written[int(idx[n, t])] = rs[t]
            if not inplace:
                assert rel(fs[a + t], rs[t]) < 1e-5
    if inplace:
        assert fs is pool
        for row in range(9):
            if row in written:
                assert rel(pool[row], written[row]) < 1e-5, row
            else:
                assert torch.equal(pool[row], p0[row]), row
    else:
        assert torch.equal(pool, p0) and fs.shape == (6, 4, 16, 16)


def test_dense_in_place_and_per_token_states_without_indices():
    q, k, v, g, beta, gen = inputs("gdn", 2, 3, 2, 2, 16, 16)
    h0 = torch.randn(2, 2, 16, 16, generator=gen)
    h = h0.clone()
    o, fs = F.fused_recurrent_gated_delta_rule(q, k, v, g, beta=beta, initial_state=h,
                                               inplace_final_state=True)
    assert fs is h
    ro, rs = naive(q[1], k[1], v[1], g[1], beta[1], h0=h0[1])
    assert rel(h[1], rs[-1]) < 1e-5 and rel(o[1], ro) < 1e-5
    o, per_token = F.fused_recurrent_gated_delta_rule(q, k, v, g, beta=beta, initial_state=h0,
                                                      inplace_final_state=False)
    assert per_token.shape == (6, 2, 16, 16)
    assert rel(per_token[3:], rs) < 1e-5
    # g and beta omitted: no decay, beta = 1
    o, ht = F.fused_recurrent_gated_delta_rule(q, k, v, output_final_state=True)
    ro, rs = naive(q[0], k[0], v[0], torch.zeros(3, 2), torch.ones(3, 2))
    assert rel(o[0], ro) < 1e-5 and rel(ht[0], rs[-1]) < 1e-5


def test_gk_runs_the_per_channel_decay():
    q, k, v, gk, beta, gen = inputs("kda", 1, 9, 2, 2, 16, 16)
    g = -torch.rand(1, 9, 2, generator=gen)
    o, ht = F.fused_recurrent_gated_delta_rule(q, k, v, g=g, gk=gk, beta=beta,
                                               output_final_state=True)
    ro, rs = naive(q[0], k[0], v[0], gk[0] + g[0].unsqueeze(-1), beta[0], kda=True)
    assert rel(o[0], ro) < 1e-5 and rel(ht[0], rs[-1]) < 1e-5


def test_gate_helpers_match_fla_formulas():
    gen = torch.Generator().manual_seed(5)
    g = torch.randn(2, 3, 4, 8, generator=gen) * 10
    A = torch.randn(4, generator=gen)
    b = torch.randn(32, generator=gen)
    y = F.fused_kda_gate(g, A, b)
    x = (g + b.view(4, 8)).double()
    assert rel(y, -A.double().exp().view(4, 1) * torch.where(x > 20, x, torch.log1p(x.exp()))) \
        < 1e-6
    y = F.fused_kda_gate(g, A, b, lower_bound=-5.0)
    assert rel(y, -5.0 * torch.sigmoid(A.double().exp().view(4, 1) * x)) < 1e-6
    y = F.fused_kda_gate(g, None, b, lower_bound=-5.0)
    assert rel(y, -5.0 * torch.sigmoid(x)) < 1e-6
    y = F.fused_gdn_gate(g[..., 0], A, b[:4], output_dtype=torch.bfloat16)
    assert y.dtype == torch.bfloat16
    with pytest.raises(ValueError, match="`A_log`"):
        F.fused_kda_gate(g)


def test_what_deltarule_cannot_do_is_refused_by_name():
    q, k, v, g, beta, gen = inputs("gdn", 1, 5, 2, 2, 16, 16)
    cases = [
        (lambda: F.chunk_gated_delta_rule(q.requires_grad_(True), k, v, g, beta), "`q`",
         NotImplementedError),
        (lambda: F.chunk_gated_delta_rule(q.double(), k.double(), v.double(), g, beta), "`q`",
         NotImplementedError),
        (lambda: F.chunk_gated_delta_rule(q, k.half(), v, g, beta), "`k`", NotImplementedError),
        (lambda: F.fused_recurrent_gated_delta_rule(q, k, v, g, gv=torch.zeros(1, 5, 2, 16),
                                                    beta=beta), "`gv`", NotImplementedError),
        (lambda: F.fused_recurrent_gated_delta_rule(q, k, v, g, beta=torch.rand(1, 5, 2, 16)),
         "`beta`", NotImplementedError),
        (lambda: F.chunk_gated_delta_rule(q, k, v, g, beta, cp_context=object()), "`cp_context`",
         NotImplementedError),
        (lambda: F.chunk_kda(q, k, v, g.unsqueeze(-1).expand(1, 5, 2, 16), beta,
                             return_intermediate_states=True), "`return_intermediate_states`",
         NotImplementedError),
        (lambda: F.chunk_gated_delta_rule(q, k, v, g, beta, not_an_argument=1),
         "`not_an_argument`", NotImplementedError),
        (lambda: F.chunk_gated_delta_rule(q, k, v, g, beta, head_first=True), "`head_first`",
         NotImplementedError),
        (lambda: F.fused_recurrent_gated_delta_rule(q, k, v, g, beta=beta,
                                                    retrieve_parent_token=torch.zeros(1)),
         "`retrieve_parent_token`", NotImplementedError),
        (lambda: F.chunk_gated_delta_rule(q, k, v, g, beta, allow_neg_eigval=True),
         "`allow_neg_eigval`", ValueError),
        (lambda: F.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=torch.zeros(2, 2, 16,
                                                                                       16)),
         "`initial_state`", ValueError),
    ]
    for fn, arg, exc in cases:
        q.requires_grad_(False)
        with pytest.raises(exc, match=arg):
            fn()
    q.requires_grad_(False)
    # under no_grad a tensor that requires grad is fine, and kernel hints change nothing
    with torch.no_grad():
        a, _ = F.chunk_gated_delta_rule(q.requires_grad_(True), k, v, g, beta, chunk_size=32,
                                        safe_gate=True, cu_seqlens_cpu=torch.tensor([0, 5]))
    q.requires_grad_(False)
    b, _ = F.chunk_gated_delta_rule(q, k, v, g, beta)
    assert torch.equal(a, b)


def test_cpu_tensors_with_a_cuda_backend_are_an_error():
    q, k, v, g, beta, _ = inputs("gdn", 1, 5, 2, 2, 16, 16)
    with F.install(backend_name="cuda"):
        with pytest.raises(ValueError, match="`backend`"):
            F.chunk_gated_delta_rule(q, k, v, g, beta)
    with F.install(backend_name="cpu:chunked"):
        a, _ = F.chunk_gated_delta_rule(q, k, v, g, beta)
    b, _ = F.chunk_gated_delta_rule(q, k, v, g, beta)
    assert rel(a, b) < 1e-5


# ---------------------------------------------------------------------------------------------
# case files and capture

from deltarule import _case  # noqa: E402


def _cli():
    """The deltarule CLI binary if built (target/release or target/debug), else None."""
    import os
    from pathlib import Path

    if os.environ.get("DELTARULE_CLI"):
        return os.environ["DELTARULE_CLI"]
    root = Path(__file__).resolve().parents[2]
    found = [p for p in (root / "target" / "release" / "deltarule",
                         root / "target" / "debug" / "deltarule") if p.is_file()]
    return str(max(found, key=lambda p: p.stat().st_mtime)) if found else None


def _diff(path):
    """``deltarule diff --case FILE --backend cpu --json`` rows, or None without the CLI."""
    import json
    import subprocess

    cli = _cli()
    if cli is None:
        return None
    r = subprocess.run([cli, "diff", "--case", str(path), "--backend", "cpu", "--json"],
                       capture_output=True, text=True, timeout=300)
    if r.returncode == 2 and "observed" in r.stderr and "unknown tensor name" in r.stderr:
        pytest.skip(f"{cli} predates observed outputs in case files: rebuild it")
    assert r.returncode == 0, (r.stdout, r.stderr)
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip().startswith("{")]


def test_save_case_round_trip(tmp_path):
    q, k, v, g, beta, gen = inputs("kda", 1, 30, 2, 4, 16, 16, dtype=torch.bfloat16,
                                   gate="softplus", beta_mode="logit")
    cu = torch.tensor([0, 11, 30], dtype=torch.int32)
    A_log = torch.randn(4, generator=gen)
    dt_bias = torch.randn(4 * 16, generator=gen)
    pool = torch.randn(5, 4, 16, 16, generator=gen)
    idx = torch.tensor([3, 1])
    p = tmp_path / "kda.safetensors"
    pk = lambda x: x[0]  # noqa: E731
    deltarule.save_case(str(p), "kda", pk(q), pk(k), pk(v), pk(g), pk(beta), cu, mode="decode",
                        state_pool=pool, state_indices=idx, A_log=A_log, dt_bias=dt_bias,
                        use_qk_l2norm=True, gate="softplus", beta_mode="logit",
                        state_layout="kv", metadata={"note": "test"})
    meta, t = _case.load_case(str(p))
    assert meta == {"op": "kda", "mode": "decode", "gate": "softplus", "beta": "sigmoid",
                    "use_qk_l2norm": "true", "scale": repr(0.25), "state_layout": "kv",
                    "note": "test"}
    assert set(t) == {"q", "k", "v", "g", "beta", "cu_seqlens", "initial_state",
                      "state_indices", "A_log", "dt_bias"}
    assert torch.equal(t["q"], pk(q)) and t["q"].dtype == torch.bfloat16
    assert torch.equal(t["initial_state"], pool) and torch.equal(t["state_indices"], idx)
    assert t["cu_seqlens"].dtype == torch.int32
    rows = _diff(p)
    if rows is not None:
        assert rows, "the CLI printed no rows"
    # an invalid call is refused before anything is written
    with pytest.raises(ValueError, match="state_indices"):
        deltarule.save_case(str(tmp_path / "bad.safetensors"), "kda", pk(q), pk(k), pk(v),
                            pk(g), pk(beta), cu, state_pool=pool, state_indices=torch.tensor([3]))
    assert not (tmp_path / "bad.safetensors").exists()


def test_save_case_with_observed_outputs_diffs_beside_the_backends(tmp_path):
    q, k, v, g, beta, gen = inputs("gdn", 2, 24, 2, 4, 16, 16)
    h0 = torch.randn(2, 4, 16, 16, generator=gen)
    o, ht = F.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True)
    p = tmp_path / "gdn.safetensors"
    F.save_case(str(p), "chunk_gated_delta_rule", q, k, v, g, beta, initial_state=h0,
                output_final_state=True, observed=(o, ht), observed_label="deltarule-cpu")
    meta, t = _case.load_case(str(p))
    assert meta["observed"] == "deltarule-cpu" and meta["state_layout"] == "kv"
    assert t["q"].shape == (48, 2, 16) and torch.equal(t["cu_seqlens"], torch.tensor([0, 24, 48]))
    assert torch.equal(t["observed.o"], o.reshape(48, 4, 16))
    assert torch.equal(t["observed.final_state"], ht)
    rows = _diff(p)
    if rows is not None:
        text = str(rows)
        assert "deltarule-cpu" in text or "observed" in text, text
    with pytest.raises(ValueError, match="observed"):
        F.save_case(str(tmp_path / "x.safetensors"), "chunk_gated_delta_rule", q, k, v, g, beta,
                    observed=(o[:, :3],))
    with pytest.raises(ValueError, match="observed_label"):
        F.save_case(str(tmp_path / "x.safetensors"), "chunk_gated_delta_rule", q, k, v, g, beta,
                    observed=(o,), observed_label="x" * 41)


class _Layer(torch.nn.Module):
    """A module that calls the delta rule through a module-level binding, as model code does."""

    def __init__(self, mod):
        super().__init__()
        self.mod = mod

    def forward(self, q, k, v, g, beta, state):
        return self.mod.torch_chunk_gated_delta_rule(q, k, v, g=g, beta=beta, initial_state=state,
                                               output_final_state=True,
                                               use_qk_l2norm_in_kernel=True, position_ids=None)


def test_capture_saves_the_chosen_call_with_the_bound_functions_result(tmp_path):
    mod = types.ModuleType("transformers.models.capture_test.modeling_capture_test")
    calls = []

    def torch_chunk_gated_delta_rule(q, k, v, g, beta, initial_state=None,
                                     output_final_state=False, use_qk_l2norm_in_kernel=False,
                                     **kw):
        calls.append(1)
        return F.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=initial_state,
                                        output_final_state=output_final_state,
                                        use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel)

    mod.torch_chunk_gated_delta_rule = torch_chunk_gated_delta_rule
    sys.modules[mod.__name__] = mod
    try:
        model = torch.nn.ModuleDict({"a": _Layer(mod), "b": _Layer(mod)})
        q, k, v, g, beta, gen = inputs("gdn", 1, 20, 2, 2, 16, 16)
        state = torch.randn(1, 2, 16, 16, generator=gen)
        with deltarule.capture(str(tmp_path), model=model, layer="b", call=1) as cap:
            outs = []
            for i in range(3):
                for name in ("a", "b"):
                    outs.append((name, i, model[name](q * (i + 1), k, v, g, beta, state)))
        assert len(cap.paths) == 1 and len(calls) == 6
        assert mod.torch_chunk_gated_delta_rule is torch_chunk_gated_delta_rule  # restored
        meta, t = _case.load_case(cap.paths[0])
        assert meta["layer"] == "b" and meta["captured_call"] == "1"
        assert meta["observed"] == "torch_chunk_gated_delta_rule"
        # the second call of layer b is the one with q * 2
        want = [o for n, i, o in outs if n == "b" and i == 1][0]
        assert torch.equal(t["q"], (q * 2)[0])
        assert torch.equal(t["observed.o"], want[0][0])
        assert torch.equal(t["observed.final_state"], want[1])
        assert meta["use_qk_l2norm"] == "true"
        _diff(cap.paths[0])
        _diff_every_backend_and_plot(cap.paths[0], tmp_path)
    finally:
        sys.modules.pop(mod.__name__, None)


def _diff_every_backend_and_plot(path, tmp_path):
    """``deltarule diff --case FILE --plot SVG`` on every backend the CLI finds: the observed row and
    a CPU row pass, and the plot is well-formed SVG naming the observed output."""
    import json
    import subprocess
    import xml.etree.ElementTree as ET

    cli = _cli()
    if cli is None:
        pytest.skip("no deltarule CLI built (cargo build -p deltarule-cli)")
    svg = tmp_path / "capture.svg"
    r = subprocess.run([cli, "diff", "--case", str(path), "--json", "--plot", str(svg)],
                       capture_output=True, text=True, timeout=600)
    if r.returncode == 2 and "unexpected argument '--plot'" in r.stderr:
        pytest.skip(f"{cli} predates --plot: rebuild it")
    assert r.returncode == 0, (r.stdout, r.stderr)
    rows = [json.loads(x) for x in r.stdout.splitlines() if x.strip().startswith("{")]
    backends = {row.get("backend") for row in rows}
    assert any(str(b).startswith("observed") for b in backends), backends
    assert {"cpu", "cpu:chunked"} <= backends, backends
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg")
    assert "observed" in svg.read_text()


def test_capture_of_a_pooled_call_keeps_the_rows_it_names(tmp_path):
    mod = types.ModuleType("capture_pool_user")
    mod.fused_recurrent_gated_delta_rule = F.fused_recurrent_gated_delta_rule
    # the user's module binds deltarule's function through install(): capture wraps that
    q, k, v, g, beta, cu, pool, lens, _ = _pool_case("gdn")
    sys.modules[mod.__name__] = mod
    try:
        inst_mod = types.ModuleType("capture_pool_user2")
        inst_mod.fused_recurrent_gated_delta_rule = F._adapter(
            "fused_recurrent_gated_delta_rule", F.fused_recurrent_gated_delta_rule)
        sys.modules[inst_mod.__name__] = inst_mod
        idx = torch.tensor([7, -1, 2])
        p0 = pool.clone()
        with deltarule.capture(str(tmp_path), prefix="pool_") as cap:
            o, fs = inst_mod.fused_recurrent_gated_delta_rule(
                q, k, v, g=g, beta=beta, initial_state=pool, cu_seqlens=cu,
                ssm_state_indices=idx)
        meta, t = _case.load_case(cap.paths[0])
        assert meta["observed"].startswith("deltarule")
        assert meta["mode"] == "decode"
        assert torch.equal(t["initial_state"], p0[[7, 2]])
        assert t["state_indices"].tolist() == [0, -1, 1]
        assert torch.equal(t["observed.final_state"], pool[[7, 2]])
        rows = _diff(cap.paths[0])
        if rows is not None:
            assert rows
    finally:
        sys.modules.pop(mod.__name__, None)
        sys.modules.pop("capture_pool_user2", None)


def test_capture_without_any_binding_is_a_clear_error(tmp_path):
    if F.bindings():
        pytest.skip("a delta-rule binding is loaded in this process")
    with pytest.raises(RuntimeError, match="no binding"):
        with deltarule.capture(str(tmp_path)):
            pass


def test_math_sanity_of_the_naive_recurrence():
    # one token from a zero state: o = scale * beta * (k . q) * v
    q = torch.zeros(1, 1, 16)
    q[0, 0, 0] = 1.0
    k = q.clone()
    v = torch.ones(1, 1, 16)
    o, states = naive(q, k, v, torch.zeros(1, 1), torch.full((1, 1), 0.5))
    assert math.isclose(float(o[0, 0, 0]), 0.25 * 0.5)
    assert math.isclose(float(states[0, 0, 0, 3]), 0.5)


@pytest.mark.parametrize("inference", [False, True])
def test_equal_length_batches_reuse_one_offsets_tensor(inference):
    """B equal sequences without cu_seqlens: the offsets tensor is made once per (B, T, device),
    so a decode loop does not read new offsets back every step; also when it is first made under
    inference mode, as in transformers' generate() (each read is a host sync on a GPU)."""
    import contextlib

    from deltarule import _offsets

    F._EQUAL_CU.clear()
    q, k, v, g, beta, _ = inputs("gdn", 3, 1, 2, 2, 16, 16)
    with torch.inference_mode() if inference else contextlib.nullcontext():
        h = torch.zeros(3, 2, 16, 16)
        F.fused_recurrent_gated_delta_rule(q, k, v, g, beta=beta, initial_state=h,
                                           output_final_state=True)
        reads = _offsets.stats["reads"]
        for _ in range(4):
            _, h = F.fused_recurrent_gated_delta_rule(q, k, v, g, beta=beta, initial_state=h,
                                                      output_final_state=True)
    assert _offsets.stats["reads"] == reads
    assert F._equal_offsets(3, 1, q.device).tolist() == [0, 1, 2, 3]
    assert F._equal_offsets(2, 0, q.device).tolist() == [0, 0, 0]

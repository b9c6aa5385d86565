"""The torch ops on CPU tensors: the CPU backend runs them (``backend="auto"`` picks a CPU row),
torch.library.opcheck passes, torch.compile traces them, pool rows not named stay untouched, and
device backend names are refused. Skipped without torch."""

import pytest

torch = pytest.importorskip("torch")

import deltarule  # noqa: E402


def problem(op="gdn", T=21, N=2, H=2, HV=4, K=16, V=32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(T, H, K, generator=gen).bfloat16()
    k = torch.nn.functional.normalize(torch.randn(T, H, K, generator=gen), dim=-1).bfloat16()
    v = torch.randn(T, HV, V, generator=gen).bfloat16()
    g = -torch.rand((T, HV) if op == "gdn" else (T, HV, K), generator=gen)
    beta = torch.rand(T, HV, generator=gen)
    cu = torch.tensor([0, 8, T], dtype=torch.int32)
    return q, k, v, g, beta, cu


def args(op, pool=False):
    q, k, v, g, beta, cu = problem(op)
    T, HV, V = v.shape
    K = q.shape[2]
    o = torch.empty(T, HV, V, dtype=torch.bfloat16)
    if pool:
        sp = torch.randn(5, HV, V, K)
        idx = torch.tensor([3, -1], dtype=torch.int64)
        return (q, k, v, g, beta, cu, o, None, None, sp, idx, None, None, None, 0.0, True, "log",
                -5.0, "prob", "vk", 0, "auto", None)
    fs = torch.empty(2, HV, K, V)
    return (q, k, v, g, beta, cu, o, torch.randn(2, HV, K, V), fs, None, None, None, None, None,
            0.0, False, "log", -5.0, "prob", "kv", 0, "auto", None)


@pytest.mark.parametrize("name, pool", [("gdn_prefill", False), ("kda_prefill", False),
                                        ("gdn_decode", True), ("kda_decode", True)])
def test_opcheck_on_cpu_tensors(name, pool):
    a = args(name[:3], pool)
    torch.library.opcheck(getattr(torch.ops.deltarule, name), a)


@pytest.mark.parametrize("op", ["gdn", "kda"])
def test_the_cpu_backend_runs_the_ops_and_leaves_unnamed_rows_alone(op):
    q, k, v, g, beta, cu = problem(op)
    pool = torch.randn(5, 4, 32, 16)
    p0 = pool.clone()
    idx = torch.tensor([3, -1])
    run = getattr(deltarule, f"{op}_decode")
    o, got, _ = run(q, k, v, g, beta, cu, state_pool=pool, state_indices=idx)
    assert got is pool
    ref = deltarule.reference(op, q, k, v, g, beta, cu, mode="decode", state_pool=p0,
                              state_indices=idx)
    assert torch.allclose(o.float(), ref["o"], rtol=1e-2, atol=1e-2)
    assert torch.equal(pool[3], ref["final_state"][3])
    assert torch.equal(pool[[0, 1, 2, 4]], p0[[0, 1, 2, 4]])
    # prefill with checkpoints every 4 tokens: floor(8/4) + floor(13/4) = 5 rows
    o, fs, ck = getattr(deltarule, f"{op}_prefill")(q, k, v, g, beta, cu, output_final_state=True,
                                                    checkpoint_every=4, state_layout="kv")
    ref = deltarule.reference(op, q, k, v, g, beta, cu, checkpoint_every=4, state_layout="kv")
    assert torch.equal(fs, ref["final_state"])
    assert torch.equal(ck[:5], ref["checkpoints"]) and ck.shape[0] == 21 // 4


def test_backend_names_on_cpu_tensors():
    q, k, v, g, beta, cu = problem()
    a, _, _ = deltarule.gdn_prefill(q, k, v, g, beta, cu, backend="cpu:chunked")
    b, _, _ = deltarule.gdn_prefill(q, k, v, g, beta, cu)
    assert (a.float() - b.float()).abs().max() < 2e-2
    for name in ("cuda", "cuda:recurrent", "wgpu"):
        with pytest.raises(ValueError, match="`backend`.*CPU tensors"):
            deltarule.gdn_prefill(q, k, v, g, beta, cu, backend=name)


def test_torch_compile_fullgraph_on_cpu():
    q, k, v, g, beta, cu = problem()

    def f(q, k, v, g, beta, cu):
        o, fs, _ = deltarule.gdn_prefill(q, k, v, g, beta, cu, output_final_state=True)
        return o.float().sum() + fs.sum()

    eager = f(q, k, v, g, beta, cu)
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")(q, k, v, g, beta, cu)
    assert torch.allclose(eager, compiled, rtol=1e-5)

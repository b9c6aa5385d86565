"""Context-parallel prefill (``deltarule.distributed``) on CPU tensors: 2 and 4 processes joined
by gloo, each holding a contiguous range of the packed tokens, against one single-process run of
the float64 recurrence (``deltarule.reference(..., backend="cpu")``).

Each world size is one spawn of its processes, which run every case in turn on the same process
group; every rank checks its own outputs, final states and checkpoints, and the relative L2
errors are summed over the ranks (so they are the whole tensors' errors, docs/spec.md section 9).
The random problems put sequence boundaries on, before and after the rank boundaries, give some
ranks no tokens, and run sequences across several ranks.
"""

import json
import os
import tempfile
import time
from datetime import timedelta

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

import deltarule  # noqa: E402
from deltarule import distributed as cp  # noqa: E402

F64_TOL = 1e-6
F32_TOL = 1e-4
WORLDS = (2, 4)
TIMEOUT_S = 240


# ---- the cases ----

def _case(name, op="gdn", **kw):
    c = dict(name=name, op=op, H=2, HV=4, K=32, V=32, init="none", layout="vk", every=0,
             gate="log", beta_mode="prob", l2norm=False, backend="cpu", precision=None,
             summary="auto", lengths="mixed", T=480, final=True, runner="reference",
             cuts="random")
    c.update(kw)
    return c


CASES = [
    _case("gdn-f64-plain", init="none", final=False),
    _case("gdn-f64-dense-ck", init="dense", every=7, layout="vk"),
    _case("gdn-f64-pool-ck-kv-gva", init="pool", every=16, layout="kv", H=1, HV=4, K=16, V=32),
    _case("gdn-f64-one-sequence", init="dense", lengths="one", every=50, T=600, cuts="even"),
    _case("gdn-f64-reset-gate", init="dense", lengths="one", gate="log-inf", every=64),
    _case("gdn-f64-engine-summary", init="pool", summary="engine", every=9),
    _case("gdn-f64-softplus-logit2-l2", init="dense", gate="softplus", beta_mode="logit2",
          l2norm=True, every=5),
    _case("kda-f64-dense-ck-gva", op="kda", init="dense", every=11, H=2, HV=4),
    _case("kda-f64-pool-softplus", op="kda", init="pool", gate="softplus", beta_mode="logit",
          l2norm=True, every=13, layout="kv"),
    _case("kda-f64-lower-bound-one", op="kda", init="pool", gate="lower_bound",
          lengths="one", T=400, every=32, cuts="even"),
    _case("kda-f64-engine-summary", op="kda", init="dense", summary="engine", lengths="one",
          T=300, cuts="even"),
    _case("gdn-f32-chunked", init="dense", backend="cpu:chunked", every=10),
    _case("kda-f32-chunked-pool", op="kda", init="pool", backend="cpu:chunked",
          gate="lower_bound", every=21, layout="kv", H=1, HV=2),
    _case("kda-f32-one-sequence", op="kda", init="dense", backend="cpu:chunked",
          lengths="one", T=400, every=64, cuts="even"),
    _case("gdn-f32-zero-lengths", init="pool", backend="cpu:chunked", lengths="zeros", every=4),
    _case("gdn-api-runner", init="dense", runner="api", every=8),
]
ERROR_CASES = ("bad-ranges", "bad-option-one-rank", "bad-cu-one-rank")


def _lengths(kind, T, gen):
    if kind == "one":
        return [T]
    if kind == "zeros":  # many zero-length sequences, some at the very start and end
        out, left = [0, 0], T
        while left > 0:
            n = min(left, int(torch.randint(1, 60, (1,), generator=gen)))
            out += [n] + [0] * int(torch.randint(0, 3, (1,), generator=gen))
            left -= n
        return out + [0]
    out, left = [], T
    while left > 0:  # short, medium and long sequences, a zero-length one now and then
        r = float(torch.rand(1, generator=gen))
        n = 0 if r < 0.1 else int(torch.randint(1, 30 if r < 0.5 else 260, (1,), generator=gen))
        n = min(n, left)
        out.append(n)
        left -= n
    return out


def _ranges(cu, world, gen, mode):
    """Rank boundaries: an even split, or random ones: some on sequence boundaries, some inside
    sequences, some repeated (ranks without tokens)."""
    T = cu[-1]
    if mode == "even":
        r = [cp.token_range(T, world, i) for i in range(world)]
        return [x[0] for x in r], [x[1] for x in r]
    cuts = []
    for i in range(world - 1):
        r = float(torch.rand(1, generator=gen))
        if r < 0.25:
            cuts.append(cu[int(torch.randint(0, len(cu), (1,), generator=gen))])
        elif r < 0.4 and cuts:
            cuts.append(cuts[-1])  # an empty rank
        else:
            cuts.append(int(torch.randint(0, T + 1, (1,), generator=gen)))
    cuts = sorted(cuts)
    return [0] + cuts, cuts + [T]


def _problem(c, world, seed):
    gen = torch.Generator().manual_seed(seed)
    T, H, HV, K, V = c["T"], c["H"], c["HV"], c["K"], c["V"]
    lens = _lengths(c["lengths"], T, gen)
    cu = [0]
    for n in lens:
        cu.append(cu[-1] + n)
    N = len(lens)
    q = torch.randn(T, H, K, generator=gen)
    k = torch.randn(T, H, K, generator=gen)
    if not c["l2norm"]:
        k = torch.nn.functional.normalize(k, dim=-1)
    v = torch.randn(T, HV, V, generator=gen)
    gshape = (T, HV) if c["op"] == "gdn" else (T, HV, K)
    A_log = dt_bias = None
    gate = c["gate"]
    # mild decays, so that states carry across whole ranks and a wrong combination shows
    if gate in ("log", "log-inf"):
        g = -0.02 * torch.rand(gshape, generator=gen)
        if gate == "log-inf":
            g[T // 3] = -float("inf")  # an exact reset inside the long sequence
            g[T // 2] = -30.0
            gate = "log"
    else:
        g = torch.randn(gshape, generator=gen)
        A_log = 0.3 * torch.randn(HV, generator=gen)
        shift = -4.0 if gate == "softplus" else -6.0
        dt_bias = torch.randn(HV if c["op"] == "gdn" else HV * K, generator=gen) + shift
    beta = (torch.rand(T, HV, generator=gen) if c["beta_mode"] == "prob"
            else torch.randn(T, HV, generator=gen))
    S = (K, V) if c["layout"] == "kv" else (V, K)
    init = {}
    if c["init"] == "dense":
        init["initial_state"] = 0.5 * torch.randn((N, HV) + S, generator=gen)
    elif c["init"] == "pool":
        P = N + 3
        init["state_pool"] = 0.5 * torch.randn((P, HV) + S, generator=gen)
        idx = torch.randperm(P, generator=gen)[:N]
        idx[torch.rand(N, generator=gen) < 0.2] = -1
        init["state_indices"] = idx
    opts = dict(A_log=A_log, dt_bias=dt_bias, gate=gate, beta_mode=c["beta_mode"],
                use_qk_l2norm=c["l2norm"], state_layout=c["layout"],
                lower_bound=-3.0)
    starts, ends = _ranges(cu, world, gen, c["cuts"])
    return dict(q=q, k=k, v=v, g=g, beta=beta, cu=cu, init=init, opts=opts, starts=starts,
                ends=ends)


# ---- one rank ----

def _sums(x, ref):
    d = (x.double() - ref.double())
    return [float((d * d).sum()), float((ref.double() ** 2).sum()),
            float(0 if torch.isfinite(x).all() else 1)]


def _api_runs_host_tensors():
    q = torch.zeros(1, 1, 16)
    try:
        deltarule.gdn_prefill(q, q, torch.zeros(1, 1, 16), torch.zeros(1, 1),
                              torch.zeros(1, 1), torch.tensor([0, 1], dtype=torch.int32),
                              backend="cpu")
        return True
    except (ValueError, RuntimeError):
        return False


def _run_case(c, rank, world, seed):
    p = _problem(c, world, seed)
    a, b = p["starts"][rank], p["ends"][rank]
    cu_t = torch.tensor(p["cu"], dtype=torch.int64)
    every = c["every"]
    # the single-process float64 reference of the whole batch
    init = {n: t.clone() for n, t in p["init"].items()}
    ref = deltarule.reference(c["op"], p["q"], p["k"], p["v"], p["g"], p["beta"], cu_t,
                              checkpoint_every=every, backend="cpu", **init, **p["opts"])
    init = {n: t.clone() for n, t in p["init"].items()}
    pool_before = init["state_pool"].clone() if "state_pool" in init else None
    res = cp.prefill(
        c["op"], *(p[n][a:b] for n in ("q", "k", "v", "g", "beta")), p["cu"], token_offset=a,
        output_final_state=c["final"], checkpoint_every=every, backend=c["backend"],
        precision=c["precision"], summary=c["summary"], runner=c["runner"], **init, **p["opts"],
    )
    out = {"o": _sums(res.o, ref["o"][a:b])}
    N = len(p["cu"]) - 1
    rows = res.final_rows
    if "state_pool" in init:
        idx = init["state_indices"].tolist()
        written = [idx[n] for n in rows if idx[n] >= 0]
        out["final"] = _sums(init["state_pool"][written], ref["final_state"][written])
        untouched = [r for r in range(init["state_pool"].shape[0]) if r not in written]
        out["untouched_ok"] = bool(torch.equal(init["state_pool"][untouched],
                                               pool_before[untouched]))
    elif c["final"]:
        out["final"] = _sums(res.final_state[rows], ref["final_state"][rows])
        others = [n for n in range(N) if n not in rows]
        out["untouched_ok"] = bool((res.final_state[others] == 0).all())
    if every:
        n_ck = res.checkpoints.shape[0]
        r0 = res.checkpoint_row
        out["ck"] = _sums(res.checkpoints, ref["checkpoints"][r0:r0 + n_ck])
        out["ck_rows"] = [r0, r0 + n_ck]
        out["ck_total"] = int(ref["checkpoints"].shape[0])
    out["final_rows"] = rows
    out["N"] = N
    out["bytes"] = res.exchanged_bytes
    return out


def _check_errors(name, rank, world):
    """Invalid calls raise on every rank (none waits forever in the collective)."""
    T, H, HV, K = 64, 1, 2, 16
    q = torch.randn(T, H, K)
    v = torch.randn(T, HV, K)
    g = -torch.rand(T, HV)
    beta = torch.rand(T, HV)
    cu = [0, 30, T]
    a, b = cp.token_range(T, world, rank)
    gate, offset, cuv = "log", a, cu
    if name == "bad-ranges" and rank == world - 1:
        a = offset = a + 1  # a gap before the last rank's range: each range is valid alone
    elif name == "bad-option-one-rank" and rank == 1:
        gate = "sigmoid"
    elif name == "bad-cu-one-rank" and rank == 0:
        cuv = [0, 31, T]
    try:
        cp.gdn_prefill(q[a:b], q[a:b], v[a:b], g[a:b], beta[a:b], cuv, token_offset=offset,
                       gate=gate)
    except (ValueError, TypeError) as e:
        return str(e)
    return None


def _worker(rank, world, rdzv, out_dir, seed):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{rdzv}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=120))
    api_host = _api_runs_host_tensors()
    results = {}
    for i, c in enumerate(CASES):
        if c["runner"] == "api" and not api_host:
            results[c["name"]] = {"skip": "the api wrappers do not run host tensors here"}
            continue
        t0 = time.time()
        r = _run_case(c, rank, world, seed + 1000 * i + world)
        r["seconds"] = time.time() - t0
        results[c["name"]] = r
    for name in ERROR_CASES:
        results[name] = {"error": _check_errors(name, rank, world)}
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(results, f)
    dist.destroy_process_group()


_RESULTS = {}


def _results(world):
    """Runs every case on ``world`` gloo processes once; returns each rank's results."""
    if world in _RESULTS:
        return _RESULTS[world]
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        rdzv = os.path.join(tmp, "rdzv")
        ctx = mp.start_processes(_worker, args=(world, rdzv, tmp, 20250), nprocs=world,
                                 join=False, start_method="spawn")
        deadline = time.time() + TIMEOUT_S
        try:
            while not ctx.join(timeout=max(1.0, deadline - time.time())):
                if time.time() > deadline:
                    raise TimeoutError(
                        f"the {world} gloo processes did not finish in {TIMEOUT_S} s")
        finally:
            for proc in ctx.processes:
                if proc.is_alive():
                    proc.terminate()
        ranks = []
        for r in range(world):
            with open(os.path.join(tmp, f"rank{r}.json")) as f:
                ranks.append(json.load(f))
    _RESULTS[world] = ranks
    return ranks


def _rel(ranks, name, key):
    d = sum(r[name][key][0] for r in ranks)
    n = sum(r[name][key][1] for r in ranks)
    bad = sum(r[name][key][2] for r in ranks)
    assert bad == 0, f"{key}: NaN or Inf"
    return (d ** 0.5) / max(n ** 0.5, 1e-300)


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("case", [c["name"] for c in CASES])
def test_matches_the_single_process_reference(world, case):
    ranks = _results(world)
    c = next(x for x in CASES if x["name"] == case)
    if "skip" in ranks[0][case]:
        pytest.skip(ranks[0][case]["skip"])
    f64 = c["backend"] == "cpu" and c["precision"] in (None, "f64")
    tol = F64_TOL if f64 else F32_TOL
    errs = {key: _rel(ranks, case, key) for key in ("o", "final", "ck") if key in ranks[0][case]}
    for key, e in errs.items():
        assert e <= tol, f"{case} on {world} ranks: rel L2 of {key} = {e:.3e} > {tol:.0e}"
    N = ranks[0][case]["N"]
    if c["final"] or c["init"] == "pool":
        owners = [n for r in ranks for n in r[case]["final_rows"]]
        assert sorted(owners) == list(range(N)), f"final states written by: {owners}"
        assert all(r[case]["untouched_ok"] for r in ranks)
    if c["every"]:
        spans = sorted(tuple(r[case]["ck_rows"]) for r in ranks)
        at = 0
        for lo, hi in spans:
            assert lo == at, f"checkpoint rows by rank: {spans}"
            at = hi
        assert at == ranks[0][case]["ck_total"], f"checkpoint rows by rank: {spans}"


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("case", ERROR_CASES)
def test_an_invalid_call_raises_on_every_rank(world, case):
    ranks = _results(world)
    msgs = [r[case]["error"] for r in ranks]
    assert all(m is not None for m in msgs), msgs
    if case == "bad-ranges":
        assert all("token_offset" in m for m in msgs), msgs
    elif case == "bad-option-one-rank":
        assert "gate" in msgs[1], msgs[1]
        assert all("rank 1" in m for i, m in enumerate(msgs) if i != 1), msgs
    else:
        assert all("cu_seqlens" in m for m in msgs), msgs


def test_the_exchange_is_one_fixed_size_buffer_per_rank():
    ranks = _results(2)
    c = CASES[0]
    want = cp.exchange_bytes(c["HV"], c["K"], c["V"], "f64")
    assert ranks[0][c["name"]]["bytes"] == want
    assert want >= c["HV"] * c["K"] * (c["K"] + c["V"]) * 8


def test_token_range_splits_evenly_on_chunk_multiples():
    assert [cp.token_range(1000, 4, r, multiple=64) for r in range(4)] == [
        (0, 256), (256, 512), (512, 768), (768, 1000)]
    assert cp.token_range(10, 4, 3, multiple=64) == (10, 10)
    with pytest.raises(ValueError, match="`rank`"):
        cp.token_range(10, 2, 2)


def test_affine_summary_equals_the_recurrence_from_identity_and_zero():
    """M and S of one piece against the float64 recurrence: S from a zero state, the columns of
    M from the identity as initial state with zero values."""
    gen = torch.Generator().manual_seed(7)
    for op in ("gdn", "kda"):
        T, H, HV, K, V = 150, 1, 2, 16, 24
        k = torch.nn.functional.normalize(torch.randn(T, H, K, generator=gen), dim=-1)
        v = torch.randn(T, HV, V, generator=gen)
        g = -0.3 * torch.rand((T, HV) if op == "gdn" else (T, HV, K), generator=gen)
        beta = torch.rand(T, HV, generator=gen)
        M, S = cp.affine_summary(op, k, v, g, beta, dtype=torch.float64)
        cu = torch.tensor([0, T])
        rs = deltarule.reference(op, k, k, v, g, beta, cu, state_layout="kv")
        eye = torch.eye(K).expand(1, HV, K, K).contiguous()
        rm = deltarule.reference(op, k, k, torch.zeros(T, HV, K), g, beta, cu,
                                 initial_state=eye, state_layout="kv")
        for x, ref in ((S, rs["final_state"][0]), (M, rm["final_state"][0])):
            e = float((x - ref.double()).norm() / ref.double().norm())
            assert e < F64_TOL, (op, e)

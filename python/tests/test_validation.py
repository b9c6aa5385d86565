"""CPU-runnable tests (no torch, no GPU): argument validation, the fake-implementation logic, the
offsets checks, and the extension's host path on a golden case. numpy arrays stand in for tensors.
"""

import json
import math
import os
import struct
from pathlib import Path

import numpy as np
import pytest

from deltarule import _native, _spec
from deltarule._spec import build_spec

GOLDEN = Path(__file__).resolve().parents[2] / "tests" / "golden" / "shared"


def tensors(op="gdn", T=10, H=2, HV=4, K=16, V=16, N=2, pool=None, kv="vk"):
    z = lambda *s, dt=np.float16: np.zeros(s, dtype=dt)  # noqa: E731
    S = (K, V) if kv == "kv" else (V, K)
    d = dict(
        q=z(T, H, K), k=z(T, H, K), v=z(T, HV, V),
        g=z(T, HV, dt=np.float32) if op == "gdn" else z(T, HV, K, dt=np.float32),
        beta=z(T, HV, dt=np.float32), cu_seqlens=np.array([0, 4, T][: N + 1], dtype=np.int64),
        o=z(T, HV, V, dt=np.float32),
    )
    if pool:
        d["state_pool"] = z(pool, HV, *S, dt=np.float32)
        d["state_indices"] = np.array([0, -1][:N], dtype=np.int32)
    return d


def spec(op="gdn", mode="prefill", **kw):
    return build_spec(op, mode, **kw)


def test_a_good_call_gives_the_spec_the_extension_needs():
    s = spec(**tensors(pool=3), state_layout="vk")
    assert (s.T, s.N, s.H, s.HV, s.K, s.V, s.pool_rows) == (10, 2, 2, 4, 16, 16, 3)
    assert s.dtypes == ("f16", "f32", "f32", "f32", "f32", "f32", "i64", "i32")
    assert (s.initial, s.final) == ("pool", "inplace")
    dims, dtypes, *rest = s.native()
    assert dims[0] == 10 and dtypes[0] == "f16"


@pytest.mark.parametrize(
    "mutate, needle, exc",
    [
        (lambda d: d.update(k=np.zeros((10, 2, 15), np.float16)), "`k`", ValueError),
        (lambda d: d.update(v=np.zeros((10, 3, 16), np.float16)), "`v_heads (HV)`", ValueError),
        (lambda d: d.update(q=np.zeros((10, 2, 16), np.float64)), "`q/k/v dtype`", TypeError),
        (lambda d: d.update(v=np.zeros((10, 4, 16), np.float32)), "`v dtype`", TypeError),
        (lambda d: d.update(g=np.zeros((10, 4, 16), np.float32)), "`g`", ValueError),
        (lambda d: d.update(beta=np.zeros((10, 4), np.int32)), "`beta dtype`", TypeError),
        (lambda d: d.update(cu_seqlens=np.zeros((3,), np.float32)), "`cu_seqlens dtype`", TypeError),
        (lambda d: d.update(o=np.zeros((10, 4, 9), np.float32)), "`o`", ValueError),
        (lambda d: d.update(state_indices=None), "`state_indices`", ValueError),
        (lambda d: d.update(state_pool=np.zeros((3, 4, 16, 8), np.float32)), "`state_pool`", ValueError),
        (lambda d: d.update(initial_state=np.zeros((2, 4, 16, 16), np.float32)), "`state_pool`", ValueError),
        (lambda d: d.update(q=np.zeros((10, 2, 16), np.float16)[:, :, ::1].T.copy().T), "`q`", ValueError),
    ],
)
def test_bad_arguments_are_named(mutate, needle, exc):
    d = tensors(pool=3)
    mutate(d)
    with pytest.raises(exc) as e:
        spec(**d)
    assert needle in str(e.value)


def test_options_are_checked():
    d = tensors()
    with pytest.raises(ValueError, match="`gate`"):
        spec(**d, gate="relu")
    with pytest.raises(ValueError, match="`gate`"):
        spec(**d, gate="lower_bound", dt_bias=np.zeros(4, np.float32))  # gdn has no lower bound
    kd = tensors(op="kda")
    with pytest.raises(ValueError, match="`lower_bound`"):
        spec(op="kda", **kd, gate="lower_bound", lower_bound=0.5, dt_bias=np.zeros(64, np.float32))
    with pytest.raises(ValueError, match="`A_log`"):
        spec(**d, gate="softplus", dt_bias=np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="`A_log`"):
        spec(**d, A_log=np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="`beta_mode`"):
        spec(**d, beta_mode="tanh")
    with pytest.raises(ValueError, match="`state_layout`"):
        spec(**d, state_layout="kvk")
    with pytest.raises(ValueError, match="`checkpoints`"):
        spec(**d, checkpoint_every=64)
    for scale in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="`scale`"):
            spec(**d, scale=scale)
    # a strided (non-contiguous) view is refused
    d = tensors()
    d["q"] = np.zeros((10, 2, 32), np.float16)[:, :, ::2]
    d["k"] = np.zeros((10, 2, 16), np.float16)
    with pytest.raises(ValueError, match="contiguous"):
        spec(**d)
    # kda lower bound with a [HV, K] dt_bias and no A_log is fine
    s = spec(op="kda", **kd, gate="lower_bound", lower_bound=-5.0, dt_bias=np.zeros((4, 16), np.float32))
    assert s.gate == "lower_bound" and not s.has_a_log


def test_offsets_and_indices_checks_name_the_entry():
    _spec.validate_cu_seqlens([0, 3, 3, 10], 10)
    for cu, needle in [([1, 10], "cu_seqlens[0]"), ([0, 5, 4, 10], "cu_seqlens[2]"),
                       ([0, 11, 10], "cu_seqlens[1]"), ([0, 4, 9], "cu_seqlens[2]")]:
        with pytest.raises(ValueError, match=needle.replace("[", r"\[").replace("]", r"\]")):
            _spec.validate_cu_seqlens(cu, 10)
    _spec.validate_state_indices([2, -1, 0], 3)
    with pytest.raises(ValueError, match=r"state_indices\[1\]"):
        _spec.validate_state_indices([0, 3], 3)
    with pytest.raises(ValueError, match=r"state_indices\[2\]"):
        _spec.validate_state_indices([1, -1, 1], 3)
    assert _spec.checkpoint_count([0, 130, 194], 64) == 3


def read_safetensors(path):
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8 : 8 + n])
    meta = header.pop("__metadata__", {})
    body = raw[8 + n :]
    out = {}
    for name, info in header.items():
        a, b = info["data_offsets"]
        out[name] = (body[a:b], info["dtype"].lower().replace("float", "f"), info["shape"])
    return meta, out


def to_f64(item):
    data, dt, shape = item
    if dt == "bf16":
        u = np.frombuffer(data, np.uint16).astype(np.uint32) << 16
        return u.view(np.float32).astype(np.float64).reshape(shape)
    return np.frombuffer(data, {"f16": np.float16, "f32": np.float32}[dt]).astype(np.float64).reshape(shape)


@pytest.mark.skipif(not GOLDEN.is_dir(), reason="golden files not present")
def test_the_extension_runs_the_float64_reference_on_a_golden_case():
    meta, t = read_safetensors(GOLDEN / "gdn_gva_varlen_state.safetensors")
    T, H, K = t["q"][2]
    _, HV, V = t["v"][2]
    N = t["cu_seqlens"][2][0] - 1
    names = {"F32": "f32", "BF16": "bf16"}
    for name in t:
        d, dt, s = t[name]
        t[name] = (d, {"f32": "f32", "bf16": "bf16", "i64": "i64", "i32": "i32"}.get(dt, dt), s)
    dtypes = ("bf16", "f32", "f32", "f32", "f32", "f32", "i64", "i64")
    out = _native.run_host(
        "cpu", "gdn", "prefill",
        ((T, N, H, HV, K, V, 0), dtypes, float(meta["scale"]), False, "log", -5.0, False, "prob",
         "kv", "dense", "dense", 0),
        {n: t[n] for n in ("q", "k", "v", "g", "beta", "cu_seqlens", "initial_state")},
    )
    assert out["rule"] == "cpu.gdn.prefill.reference"
    got = to_f64(out["o"])
    want = to_f64(t["expected_o"])
    rel = np.linalg.norm(got - want) / np.linalg.norm(want)
    assert rel < 1e-6, rel
    got = to_f64(out["final_state"])
    want = to_f64(t["expected_final_state"])
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-6


@pytest.mark.skipif(not GOLDEN.is_dir(), reason="golden files not present")
def test_run_cpu_selects_among_the_cpu_rows_only():
    """The torch ops' path for CPU tensors: `auto` picks a CPU row through the selection table,
    a CPU kernel name picks that row, and a device backend is an invalid argument."""
    meta, t = read_safetensors(GOLDEN / "gdn_gva_varlen_state.safetensors")
    T, H, K = t["q"][2]
    _, HV, V = t["v"][2]
    N = t["cu_seqlens"][2][0] - 1
    desc = ((T, N, H, HV, K, V, 0), ("bf16", "f32", "f32", "f32", "f32", "f32", "i64", "i64"),
            float(meta["scale"]), False, "log", -5.0, False, "prob", "kv", "dense", "dense", 0)
    ins = {n: t[n] for n in ("q", "k", "v", "g", "beta", "cu_seqlens", "initial_state")}
    want = to_f64(t["expected_o"])
    for backend, rule, tol in (("auto", "cpu.gdn.prefill.reference", 1e-6),
                               ("cpu", "cpu.gdn.prefill.reference", 1e-6),
                               ("cpu:chunked", "cpu.gdn.prefill.chunked", 1e-4)):
        out = _native.run_cpu(backend, "gdn", "prefill", desc, ins)
        assert out["rule"] == rule
        got = to_f64(out["o"])
        assert np.linalg.norm(got - want) / np.linalg.norm(want) < tol
    for backend in ("cuda", "wgpu:chunked", "cuda:small-bh"):
        with pytest.raises(ValueError, match="`backend`.*CPU tensors"):
            _native.run_cpu(backend, "gdn", "prefill", desc, ins)
    with pytest.raises(ValueError, match="`backend`"):
        _native.run_cpu("tpu", "gdn", "prefill", desc, ins)
    with pytest.raises(ValueError, match="`q` is required"):
        _native.run_cpu("auto", "gdn", "prefill", desc, {n: v for n, v in ins.items() if n != "q"})


def test_launch_without_cuda_is_a_clear_error():
    s = spec(**tensors(pool=3, V=16))
    try:
        _native.launch("gdn", "prefill", "auto", s.native(), [0] * 13, 0, 0)
    except RuntimeError as e:
        assert "unavailable" in str(e) or "CUDA" in str(e)
    except ValueError as e:
        assert "CUDA" in str(e) or "cuda" in str(e)
    else:
        pytest.skip("a CUDA device is present: the launch would run (covered by test_cuda.py)")
    with pytest.raises(ValueError, match="backend"):
        _native.launch("gdn", "prefill", "tpu", s.native(), [0] * 13, 0, 0)
    with pytest.raises(ValueError, match="value_dim"):
        spec(**tensors(pool=3, V=8))  # V = 8 is below the engine's 16
    dims, *rest = s.native()
    with pytest.raises(ValueError, match="value_dim"):  # the launch checks the same rules
        _native.launch("gdn", "prefill", "auto", (dims[:5] + (8,) + dims[6:], *rest),
                       [0] * 13, 0, 0)


def test_the_spec_cache_returns_the_same_spec_and_still_rejects_bad_calls():
    d = tensors(pool=3)
    order = ("q", "k", "v", "g", "beta", "cu_seqlens", "o", "initial_state", "final_state",
             "state_pool", "state_indices", "checkpoints", "A_log", "dt_bias")
    ts = tuple(d.get(n) for n in order)
    opts = (0.0, False, "log", -5.0, "prob", "vk", 0)
    a = _spec.cached_spec("gdn", "prefill", ts, opts)
    b = _spec.cached_spec("gdn", "prefill", ts, opts)
    assert a is b and a == build_spec("gdn", "prefill", *ts, *opts)
    bad = list(ts)
    bad[1] = np.zeros((10, 2, 15), np.float16)
    for _ in range(2):  # not cached: rejected every time
        with pytest.raises(ValueError, match="`k`"):
            _spec.cached_spec("gdn", "prefill", tuple(bad), opts)
    with pytest.raises(ValueError, match="`gate`"):
        _spec.cached_spec("gdn", "prefill", ts, (0.0, False, "relu", -5.0, "prob", "vk", 0))


def test_the_longest_sequence_hint_keeps_the_side_of_every_power_of_two():
    from deltarule._offsets import longest_hint

    assert longest_hint(None) is None  # graph capture: the offsets are not read
    assert longest_hint([0, 0]) == 0
    assert longest_hint([0, 64, 128]) == 64
    assert longest_hint([0, 3, 40, 100]) == 64  # the longest is 60
    assert longest_hint([0, 65, 70]) == 70  # 128, capped at T
    assert longest_hint([0, 100, 1100]) == 1024
    for cu in ([0, 1], [0, 63, 64], [0, 64], [0, 65], [0, 10, 139], [0, 500, 600], [0, 0, 7]):
        m = max(b - a for a, b in zip(cu, cu[1:]))
        h = longest_hint(cu)
        assert m <= h <= cu[-1], (cu, h)
        assert (h <= 64) == (m <= 64), (cu, h)


def test_a_declared_max_seqlen_stands_in_for_unread_offsets_and_is_checked():
    from deltarule._offsets import resolve_hint, round_hint

    assert resolve_hint(64, None, 1000) == 64  # nothing declared: the read hint
    assert resolve_hint(None, None, 1000) is None  # captured, nothing declared: no hint
    assert resolve_hint(None, 60, 1000) == 64  # captured: the declared value, rounded
    assert resolve_hint(None, 5000, 1000) == 1000  # capped at T (the native side's bound)
    assert resolve_hint(64, 64, 1000) == 64
    assert resolve_hint(64, 500, 1000) == 64  # read offsets win over a larger declaration
    assert round_hint(0, 10) == 0 and round_hint(65, 1000) == 128
    with pytest.raises(ValueError, match="`max_seqlen`.*more than 32 tokens, got 20"):
        resolve_hint(64, 20, 1000)  # the offsets hold a longer sequence
    for bad in (-1, 2.5, True, "64"):
        with pytest.raises(ValueError, match="`max_seqlen`"):
            resolve_hint(None, bad, 1000)


def test_the_native_calls_take_the_hint_and_check_it():
    s = spec(**tensors(pool=3, V=16))  # T = 10
    with pytest.raises(ValueError, match="max_seq"):
        _native.launch("gdn", "prefill", "auto", s.native(), [0] * 13, 0, 0, max_seq=11)
    with pytest.raises(ValueError, match="max_seq"):
        _native.workspace_bytes("gdn", "prefill", "auto", s.native(), 0, max_seq=11)
    rule, trace = _native.select("gdn", "prefill", "auto", s.native(), max_seq=5)
    assert trace, "the selection explains itself"


def test_the_hint_is_derived_once_per_cached_offsets():
    from deltarule import _offsets

    class Fake:  # the part of a tensor the cache reads
        device = "cuda:0"
        _version = 0

        def __init__(self, xs):
            self.xs = xs

        def data_ptr(self):
            return id(self)

        def numel(self):
            return len(self.xs)

        def tolist(self):
            return list(self.xs)

    calls = []

    def derive(c):
        calls.append(c)
        return _offsets.longest_hint(c)

    t = Fake([0, 40, 100])
    _offsets.clear()
    first = _offsets.checked_contents("cu", t, lambda c: None, (100,), derive)
    again = _offsets.checked_contents("cu", t, lambda c: None, (100,), derive)
    assert first == again == ([0, 40, 100], 64)
    assert len(calls) == 1, "a cache hit reuses the derived hint"
    t._version = 1  # an in-place refill: read and derived again
    t.xs = [0, 90, 100]
    assert _offsets.checked_contents("cu", t, lambda c: None, (100,), derive) == ([0, 90, 100], 100)
    assert len(calls) == 2
    _offsets.clear()

"""Argument validation shared by the real ops and their fake (meta) implementations.

Pure Python and duck-typed: works on torch tensors (real, meta or fake) and on numpy arrays, so
the CI machine (no torch) can test it. Every error names the argument, what was expected and what
was got: ``ValueError`` for shapes, values and options, ``TypeError`` for dtypes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence, Tuple

_DTYPES = {
    "torch.bfloat16": "bf16",
    "torch.float16": "f16",
    "torch.float32": "f32",
    "torch.int32": "i32",
    "torch.int64": "i64",
    "bfloat16": "bf16",
    "float16": "f16",
    "float32": "f32",
    "int32": "i32",
    "int64": "i64",
}

QKV_DTYPES = ("bf16", "f16", "f32")
GATE_DTYPES = ("f32", "bf16")
STATE_DTYPES = ("f32", "bf16", "f16")
INDEX_DTYPES = ("i32", "i64")
GATES = ("log", "softplus", "lower_bound")
BETAS = ("prob", "logit", "logit2")
LAYOUTS = ("kv", "vk")


def dtype_name(t: Any) -> str:
    """Short dtype name of a tensor or array (``bf16``, ``f32``, ...), or its str if unknown."""
    s = str(t.dtype)
    return _DTYPES.get(s, s)


def shape(t: Any) -> Tuple[int, ...]:
    return tuple(int(x) for x in t.shape)


def _fail(arg: str, expected: str, got: Any) -> ValueError:
    return ValueError(f"invalid argument `{arg}`: expected {expected}, got {got}")


def _type_fail(arg: str, expected: Sequence[str], got: str) -> TypeError:
    return TypeError(f"invalid dtype of `{arg}`: expected one of {', '.join(expected)}, got {got}")


def _expect_shape(arg: str, t: Any, want: Tuple[int, ...]) -> None:
    if shape(t) != tuple(want):
        raise _fail(arg, f"shape {list(want)}", list(shape(t)))


def _expect_dtype(arg: str, t: Any, allowed: Sequence[str]) -> str:
    d = dtype_name(t)
    if d not in allowed:
        raise _type_fail(arg, allowed, d)
    return d


def _contiguous(t: Any) -> bool:
    if hasattr(t, "is_contiguous"):
        return bool(t.is_contiguous())
    flags = getattr(t, "flags", None)
    return bool(getattr(flags, "c_contiguous", True))


@dataclass(frozen=True)
class Spec:
    """Everything the extension needs besides pointers, as validated."""

    op: str
    mode: str
    T: int
    N: int
    H: int
    HV: int
    K: int
    V: int
    pool_rows: int
    dtypes: Tuple[str, str, str, str, str, str, str, str]
    scale: float
    l2norm: bool
    gate: str
    lower_bound: float
    has_a_log: bool
    beta_mode: str
    layout: str
    initial: str
    final: str
    checkpoint_every: int

    def native(self) -> tuple:
        """Positional arguments of ``_native.launch``/``select``/``run_host`` after the backend."""
        return (
            (self.T, self.N, self.H, self.HV, self.K, self.V, self.pool_rows),
            self.dtypes,
            self.scale,
            self.l2norm,
            self.gate,
            self.lower_bound,
            self.has_a_log,
            self.beta_mode,
            self.layout,
            self.initial,
            self.final,
            self.checkpoint_every,
        )

    def state_dims(self) -> Tuple[int, int]:
        return (self.K, self.V) if self.layout == "kv" else (self.V, self.K)


def build_spec(
    op: str,
    mode: str,
    q: Any,
    k: Any,
    v: Any,
    g: Any,
    beta: Any,
    cu_seqlens: Any,
    o: Any,
    initial_state: Optional[Any] = None,
    final_state: Optional[Any] = None,
    state_pool: Optional[Any] = None,
    state_indices: Optional[Any] = None,
    checkpoints: Optional[Any] = None,
    A_log: Optional[Any] = None,
    dt_bias: Optional[Any] = None,
    scale: float = 0.0,
    use_qk_l2norm: bool = False,
    gate: str = "log",
    lower_bound: float = -5.0,
    beta_mode: str = "prob",
    state_layout: str = "vk",
    checkpoint_every: int = 0,
) -> Spec:
    """Validates every argument of one op call and returns its :class:`Spec`."""
    if op not in ("gdn", "kda"):
        raise _fail("op", "gdn or kda", op)
    if mode not in ("prefill", "decode"):
        raise _fail("mode", "prefill or decode", mode)
    if len(shape(q)) != 3:
        raise _fail("q", "a tensor [T, H, K]", list(shape(q)))
    T, H, K = shape(q)
    if len(shape(v)) != 3:
        raise _fail("v", "a tensor [T, HV, V]", list(shape(v)))
    _, HV, V = shape(v)
    if H < 1 or HV < 1 or HV % H != 0:
        raise _fail("v", f"a value-head count HV that is a multiple of H = {H}", HV)
    _expect_shape("k", k, (T, H, K))
    _expect_shape("v", v, (T, HV, V))
    qd = _expect_dtype("q", q, QKV_DTYPES)
    for name, t in (("k", k), ("v", v)):
        d = _expect_dtype(name, t, QKV_DTYPES)
        if d != qd:
            raise _type_fail(name, (qd,), d)
    _expect_shape("g", g, (T, HV) if op == "gdn" else (T, HV, K))
    gd = _expect_dtype("g", g, GATE_DTYPES)
    _expect_shape("beta", beta, (T, HV))
    bd = _expect_dtype("beta", beta, GATE_DTYPES)
    if len(shape(cu_seqlens)) != 1 or shape(cu_seqlens)[0] < 2:
        raise _fail("cu_seqlens", "a tensor [N + 1] with N >= 1", list(shape(cu_seqlens)))
    N = shape(cu_seqlens)[0] - 1
    od = _expect_dtype("cu_seqlens", cu_seqlens, INDEX_DTYPES)
    _expect_shape("o", o, (T, HV, V))
    outd = _expect_dtype("o", o, QKV_DTYPES)

    if state_layout not in LAYOUTS:
        raise _fail("state_layout", "kv or vk", state_layout)
    S = (K, V) if state_layout == "kv" else (V, K)
    pool_rows = 0
    idxd = "i64"
    if state_pool is not None:
        if initial_state is not None or final_state is not None:
            raise _fail(
                "state_pool", "either a pool (with state_indices) or dense initial/final states",
                "both",
            )
        if len(shape(state_pool)) != 4 or shape(state_pool)[1:] != (HV,) + S:
            raise _fail("state_pool", f"shape [P, {HV}, {S[0]}, {S[1]}]", list(shape(state_pool)))
        pool_rows = shape(state_pool)[0]
        if pool_rows < 1:
            raise _fail("state_pool", "at least one row", pool_rows)
        sd = _expect_dtype("state_pool", state_pool, STATE_DTYPES)
        s_in, s_out = sd, sd
        if state_indices is None:
            raise _fail("state_indices", f"an [{N}] index tensor with state_pool", None)
        _expect_shape("state_indices", state_indices, (N,))
        idxd = _expect_dtype("state_indices", state_indices, INDEX_DTYPES)
        initial, final = "pool", "inplace"
    else:
        if state_indices is not None:
            raise _fail("state_indices", "None without state_pool", list(shape(state_indices)))
        s_in = s_out = "f32"
        initial = final = "none"
        if initial_state is not None:
            _expect_shape("initial_state", initial_state, (N, HV) + S)
            s_in = _expect_dtype("initial_state", initial_state, STATE_DTYPES)
            initial = "dense"
        if final_state is not None:
            _expect_shape("final_state", final_state, (N, HV) + S)
            s_out = _expect_dtype("final_state", final_state, STATE_DTYPES)
            final = "dense"
    if checkpoint_every < 0:
        raise _fail("checkpoint_every", "a non-negative integer", checkpoint_every)
    if (checkpoints is None) != (checkpoint_every == 0):
        raise _fail(
            "checkpoints", "a buffer exactly when checkpoint_every > 0",
            f"checkpoints={'given' if checkpoints is not None else None}, "
            f"checkpoint_every={checkpoint_every}",
        )
    if checkpoints is not None:
        cs = shape(checkpoints)
        if len(cs) != 4 or cs[1:] != (HV,) + S:
            raise _fail("checkpoints", f"shape [C, {HV}, {S[0]}, {S[1]}]", list(cs))
        ckd = _expect_dtype("checkpoints", checkpoints, STATE_DTYPES)
        if final == "none":
            s_out = ckd
        elif ckd != s_out:
            raise _type_fail("checkpoints", (s_out,), ckd)

    if gate not in GATES:
        raise _fail("gate", "log, softplus or lower_bound", gate)
    if gate == "lower_bound" and op != "kda":
        raise _fail("gate", "log or softplus for gdn", gate)
    if gate == "lower_bound" and not (lower_bound < 0 and lower_bound == lower_bound):
        raise _fail("lower_bound", "a finite negative number", lower_bound)
    if gate == "log":
        for name, t in (("A_log", A_log), ("dt_bias", dt_bias)):
            if t is not None:
                raise _fail(name, "None with gate = log", list(shape(t)))
    else:
        if gate == "softplus" and A_log is None:
            raise _fail("A_log", f"an [{HV}] f32 tensor with gate = softplus", None)
        if A_log is not None:
            _expect_shape("A_log", A_log, (HV,))
            _expect_dtype("A_log", A_log, ("f32",))
        if dt_bias is None:
            raise _fail("dt_bias", f"an f32 tensor with gate = {gate}", None)
        want = (HV,) if op == "gdn" else (HV * K,)
        if shape(dt_bias) != want and not (op == "kda" and shape(dt_bias) == (HV, K)):
            raise _fail("dt_bias", f"shape {list(want)}", list(shape(dt_bias)))
        _expect_dtype("dt_bias", dt_bias, ("f32",))
    if beta_mode not in BETAS:
        raise _fail("beta_mode", "prob, logit or logit2", beta_mode)
    if not (scale >= 0.0):
        raise _fail("scale", "0 (default 1/sqrt(K)) or a positive float", scale)

    named = [
        ("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta), ("cu_seqlens", cu_seqlens),
        ("o", o), ("initial_state", initial_state), ("final_state", final_state),
        ("state_pool", state_pool), ("state_indices", state_indices),
        ("checkpoints", checkpoints), ("A_log", A_log), ("dt_bias", dt_bias),
    ]
    dev = getattr(q, "device", None)
    for name, t in named:
        if t is None:
            continue
        if not _contiguous(t):
            raise _fail(name, "a contiguous tensor", "a strided view")
        if dev is not None and getattr(t, "device", dev) != dev:
            raise _fail(name, f"a tensor on {dev}", getattr(t, "device", None))

    return Spec(
        op=op, mode=mode, T=T, N=N, H=H, HV=HV, K=K, V=V, pool_rows=pool_rows,
        dtypes=(qd, gd, bd, outd, s_in, s_out, od, idxd), scale=float(scale),
        l2norm=bool(use_qk_l2norm), gate=gate, lower_bound=float(lower_bound),
        has_a_log=A_log is not None, beta_mode=beta_mode, layout=state_layout,
        initial=initial, final=final, checkpoint_every=int(checkpoint_every),
    )


_SPEC_CACHE: dict = {}
_SPEC_CACHE_CAPACITY = 256


def _signature(t: Any) -> Any:
    if t is None:
        return None
    return (tuple(t.shape), t.dtype, getattr(t, "device", None), _contiguous(t))


def cached_spec(op: str, mode: str, tensors: Sequence[Any], options: tuple) -> Spec:
    """:func:`build_spec` memoised on what it reads (each tensor's shape, dtype, device and
    contiguity, and the options): a layer called with the same shapes validates once. Invalid calls
    raise and are not cached. ``tensors`` and ``options`` are ``build_spec``'s positional
    arguments after ``mode``, split at ``dt_bias``."""
    key = (op, mode, options) + tuple(_signature(t) for t in tensors)
    spec = _SPEC_CACHE.get(key)
    if spec is None:
        spec = build_spec(op, mode, *tensors, *options)
        if len(_SPEC_CACHE) >= _SPEC_CACHE_CAPACITY:
            _SPEC_CACHE.clear()
        _SPEC_CACHE[key] = spec
    return spec


def validate_cu_seqlens(cu: Sequence[int], total_tokens: int) -> None:
    """``cu[0] = 0``, non-decreasing, ``cu[N] = T`` (SPEC.md section 2)."""
    if len(cu) < 2:
        raise _fail("cu_seqlens", "at least 2 entries", len(cu))
    if cu[0] != 0:
        raise _fail("cu_seqlens[0]", "0", cu[0])
    for i in range(1, len(cu)):
        if cu[i] < cu[i - 1]:
            raise _fail(f"cu_seqlens[{i}]", f"non-decreasing offsets (>= {cu[i - 1]})", cu[i])
        if cu[i] > total_tokens:
            raise _fail(f"cu_seqlens[{i}]", f"an offset in 0..={total_tokens} (T)", cu[i])
    if cu[-1] != total_tokens:
        raise _fail(f"cu_seqlens[{len(cu) - 1}]", f"T = {total_tokens}", cu[-1])


def validate_state_indices(idx: Sequence[int], pool_rows: int) -> None:
    """Every index is -1 or a pool row, and rows are not repeated."""
    seen = {}
    for n, i in enumerate(idx):
        if i < -1 or i >= pool_rows:
            raise _fail(f"state_indices[{n}]", f"-1 or a pool row in 0..{pool_rows}", i)
        if i >= 0:
            if i in seen:
                raise _fail(
                    f"state_indices[{n}]", "unique pool rows",
                    f"row {i}, also named by state_indices[{seen[i]}]",
                )
            seen[i] = n


def checkpoint_count(cu: Sequence[int], every: int) -> int:
    """``sum(floor(len_n / every))``: rows of the checkpoint buffer."""
    return sum((cu[i + 1] - cu[i]) // every for i in range(len(cu) - 1))

"""Argument validation shared by the real ops and their fake (meta) implementations.

Duck-typed: works on torch tensors (real, meta or fake) and on numpy arrays, so it is tested
without torch. The problem's own rules (dims, dtypes, options) are the engine core's
(``Problem::validate``, reached through the extension); this module checks what only the
tensors show. Every error names the argument, what was expected and what was got:
``ValueError`` for shapes, values and options, ``TypeError`` for dtypes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence, Tuple

from . import _native

_DTYPES = {
    "torch.float64": "f64",
    "torch.bfloat16": "bf16",
    "torch.float16": "f16",
    "torch.float32": "f32",
    "torch.int32": "i32",
    "torch.int64": "i64",
    "float64": "f64",
    "bfloat16": "bf16",
    "float16": "f16",
    "float32": "f32",
    "int32": "i32",
    "int64": "i64",
}

# the state tensors whose dtype the problem names differently (a pool is the problem's initial
# and final state, checkpoints share the final state's dtype): checked here under their own names
STATE_DTYPES = ("f32", "bf16", "f16")


def dtype_name(t: Any) -> str:
    """Short dtype name of a tensor or array (``bf16``, ``f32``, ...), or its str if unknown."""
    s = str(t.dtype)
    return _DTYPES.get(s, s)


def shape(t: Any) -> Tuple[int, ...]:
    return tuple(int(x) for x in t.shape)


def _fail(arg: str, expected: str, got: Any) -> ValueError:
    return ValueError(f"invalid argument `{arg}`: expected {expected}, got {got}")


def _type_fail(arg: str, expected: Sequence[str], got: str) -> TypeError:
    # the engine core's wording for dtypes (the field is `<argument> dtype`)
    return TypeError(
        f"invalid argument `{arg} dtype`: expected one of {{{', '.join(expected)}}}, got {got}"
    )


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
    """Validates every argument of one op call and returns its :class:`Spec`.

    The problem itself (op, mode, head counts and dims, dtypes, the gate, beta and layout options,
    scale, pool size, checkpoint interval) is checked by the engine's core through
    ``_native.validate``: the rules live there once, for every caller. What only the tensors show
    is checked here: ranks and shapes, that k and v have q's dtype, which state tensors are given,
    contiguity and device."""
    if len(shape(q)) != 3:
        raise _fail("q", "a tensor [T, H, K]", list(shape(q)))
    T, H, K = shape(q)
    if len(shape(v)) != 3:
        raise _fail("v", "a tensor [T, HV, V]", list(shape(v)))
    _, HV, V = shape(v)
    if len(shape(cu_seqlens)) != 1 or shape(cu_seqlens)[0] < 2:
        raise _fail("cu_seqlens", "a tensor [N + 1] with N >= 1", list(shape(cu_seqlens)))
    N = shape(cu_seqlens)[0] - 1

    # which state tensors are given
    pool_rows = 0
    idxd = "i64"
    if state_pool is not None:
        if initial_state is not None or final_state is not None:
            raise _fail(
                "state_pool", "either a pool (with state_indices) or dense initial/final states",
                "both",
            )
        if state_indices is None:
            raise _fail("state_indices", f"an [{N}] index tensor with state_pool", None)
        if len(shape(state_pool)) != 4 or shape(state_pool)[0] < 1:
            raise _fail("state_pool", "a tensor [P, HV, S0, S1] with P >= 1",
                        list(shape(state_pool)))
        pool_rows = shape(state_pool)[0]
        s_in = s_out = _expect_dtype("state_pool", state_pool, STATE_DTYPES)
        idxd = dtype_name(state_indices)
        initial, final = "pool", "inplace"
    else:
        if state_indices is not None:
            raise _fail("state_indices", "None without state_pool", list(shape(state_indices)))
        s_in = s_out = "f32"
        initial = final = "none"
        if initial_state is not None:
            s_in = dtype_name(initial_state)
            initial = "dense"
        if final_state is not None:
            s_out = dtype_name(final_state)
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
        ckd = _expect_dtype("checkpoints", checkpoints, STATE_DTYPES)
        if final == "none":
            s_out = ckd
        elif ckd != s_out:
            raise _type_fail("checkpoints", (s_out,), ckd)

    qd = dtype_name(q)
    spec = Spec(
        op=op, mode=mode, T=T, N=N, H=H, HV=HV, K=K, V=V, pool_rows=pool_rows,
        dtypes=(qd, dtype_name(g), dtype_name(beta), dtype_name(o), s_in, s_out,
                dtype_name(cu_seqlens), idxd),
        scale=float(scale), l2norm=bool(use_qk_l2norm), gate=gate,
        lower_bound=float(lower_bound), has_a_log=A_log is not None, beta_mode=beta_mode,
        layout=state_layout, initial=initial, final=final,
        checkpoint_every=int(checkpoint_every),
    )
    _native.validate(op, mode, spec.native())

    S = spec.state_dims()
    _expect_shape("k", k, (T, H, K))
    for name, t in (("k", k), ("v", v)):
        if dtype_name(t) != qd:
            raise _type_fail(name, (qd,), dtype_name(t))
    _expect_shape("g", g, (T, HV) if op == "gdn" else (T, HV, K))
    _expect_shape("beta", beta, (T, HV))
    _expect_shape("o", o, (T, HV, V))
    if state_pool is not None:
        _expect_shape("state_pool", state_pool, (pool_rows, HV) + S)
        _expect_shape("state_indices", state_indices, (N,))
    for name, t in (("initial_state", initial_state), ("final_state", final_state)):
        if t is not None:
            _expect_shape(name, t, (N, HV) + S)
    if checkpoints is not None:
        cs = shape(checkpoints)
        if len(cs) != 4 or cs[1:] != (HV,) + S:
            raise _fail("checkpoints", f"shape [C, {HV}, {S[0]}, {S[1]}]", list(cs))
    if A_log is not None:
        _expect_shape("A_log", A_log, (HV,))
        _expect_dtype("A_log", A_log, ("f32",))
    if gate == "log":
        if dt_bias is not None:
            raise _fail("dt_bias", "None with gate = log", list(shape(dt_bias)))
    else:
        if dt_bias is None:
            raise _fail("dt_bias", f"an f32 tensor with gate = {gate}", None)
        want = (HV,) if op == "gdn" else (HV * K,)
        if shape(dt_bias) != want and not (op == "kda" and shape(dt_bias) == (HV, K)):
            raise _fail("dt_bias", f"shape {list(want)}", list(shape(dt_bias)))
        _expect_dtype("dt_bias", dt_bias, ("f32",))

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
    return spec


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
    """``cu[0] = 0``, non-decreasing, ``cu[N] = T``: the engine core's check of the contents."""
    _native.validate_cu_seqlens(list(cu), total_tokens)


def validate_state_indices(idx: Sequence[int], pool_rows: int) -> None:
    """Every index is -1 or a pool row, and rows are not repeated: the engine core's check."""
    _native.validate_state_indices(list(idx), pool_rows)


def checkpoint_count(cu: Sequence[int], every: int) -> int:
    """``sum(floor(len_n / every))``: rows of the checkpoint buffer."""
    return sum((cu[i + 1] - cu[i]) // every for i in range(len(cu) - 1))

"""flash-linear-attention's public functions on deltarule's ops.

``chunk_gated_delta_rule``, ``fused_recurrent_gated_delta_rule``, ``chunk_kda`` and
``fused_recurrent_kda`` take fla-core 0.6.0's argument names, defaults and layouts (``[B, T, H, K]``
with ``B = 1`` and ``cu_seqlens``, or ``B`` equal sequences without; states ``[N, HV, K, V]``, or
``[N, HV, V, K]`` with ``state_v_first=True``) and return ``(o, final_state)`` as fla does.
``fused_recurrent_gated_delta_rule`` and ``fused_recurrent_kda`` also take vLLM's pooled-state
arguments (``ssm_state_indices``, ``inplace_final_state``, ``num_accepted_tokens``). The gate
helpers ``fused_gdn_gate`` and ``fused_kda_gate`` are fla's, in plain torch.

What fla accepts and deltarule cannot do is a ``NotImplementedError`` naming the argument (tensors
that require grad: deltarule computes the forward pass only; float64 q/k/v; per-channel beta;
``gv``; context parallelism; intermediate states; EAGLE trees), never a different answer. Options
that only steer fla's own kernels (``chunk_size``, ``chunk_indices``, ``safe_gate``,
``disable_recompute``, ``use_graph``, ``max_num_seqs``) are accepted and change nothing;
``cu_seqlens_cpu`` gives the selection its longest-sequence hint without a device read.

``install()`` routes a running program's fla calls here: fla's modules, every loaded module that
imported fla's functions, transformers' modeling modules (Qwen3-Next, Qwen3.5, Kimi Linear and
the others that bind these functions) and vLLM's vendored copies; ``uninstall()`` (or leaving
``with install():``) restores them. ``capture()`` saves chosen calls as case files with the
result of the function that was bound (docs/fla.md).

The argument and option mapping (``map_options``, ``map_state``, ``map_shapes``) needs no torch.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from . import _case

FLA_VERSION = "0.6.0"

# the selection name the functions pass to the ops (install(backend=...) sets it)
backend = "auto"

# options fla uses to steer its own kernels: accepted, no effect on the result
_KERNEL_HINTS = ("chunk_size", "chunk_indices", "safe_gate", "disable_recompute", "use_graph",
                 "max_num_seqs", "cu_seqlens_cpu")


def _unsupported(fn: str, arg: str, why: str) -> NotImplementedError:
    return NotImplementedError(f"deltarule.fla.{fn}: `{arg}` {why}")


def _invalid(fn: str, arg: str, expected: str, got: Any) -> ValueError:
    return ValueError(f"deltarule.fla.{fn}: invalid argument `{arg}`: expected {expected}, "
                      f"got {got}")


# ---------------------------------------------------------------------------------------------
# the mapping, without torch


def map_options(
    fn: str, op: str, *, scale: Optional[float] = None, use_qk_l2norm_in_kernel: bool = False,
    use_gate_in_kernel: bool = False, has_A_log: bool = False, has_dt_bias: bool = False,
    lower_bound: Optional[float] = None, use_beta_sigmoid_in_kernel: bool = False,
    allow_neg_eigval: bool = False, state_v_first: bool = False,
) -> Dict[str, Any]:
    """fla's options as the ops' keyword arguments (``scale``, ``use_qk_l2norm``, ``gate``,
    ``lower_bound``, ``beta_mode``, ``state_layout``) plus ``zero_dt_bias`` (an in-kernel gate
    without ``dt_bias``: the ops take zeros)."""
    if allow_neg_eigval and not use_beta_sigmoid_in_kernel:
        raise _invalid(fn, "allow_neg_eigval", "True only with use_beta_sigmoid_in_kernel=True",
                       allow_neg_eigval)
    if scale is not None:
        s = float(scale)
        if not (s > 0.0) or s == float("inf"):
            raise _invalid(fn, "scale", "None (1/sqrt(K)) or a finite positive float", scale)
    gate, lb = "log", -5.0
    if use_gate_in_kernel:
        if op == "gdn":
            if not has_A_log:
                raise _invalid(fn, "A_log", "a tensor [HV] with use_gate_in_kernel=True", None)
            gate = "softplus"
        elif lower_bound is None:
            if not has_A_log:
                raise _invalid(fn, "A_log", "a tensor [HV] with use_gate_in_kernel=True and "
                               "lower_bound=None", None)
            gate = "softplus"
        else:
            lb = float(lower_bound)
            if not lb < 0.0:
                raise _invalid(fn, "lower_bound", "a negative float", lower_bound)
            gate = "lower_bound"
    return {
        "scale": None if scale is None else float(scale),
        "use_qk_l2norm": bool(use_qk_l2norm_in_kernel),
        "gate": gate,
        "lower_bound": lb,
        "has_A_log": bool(has_A_log) and use_gate_in_kernel,
        "beta_mode": ("logit2" if allow_neg_eigval else "logit")
        if use_beta_sigmoid_in_kernel else "prob",
        "state_layout": "vk" if state_v_first else "kv",
        "zero_dt_bias": use_gate_in_kernel and not has_dt_bias,
    }


# How a call's states map onto the ops (docs/fla.md, "Pooled states"):
#   dense          fla: initial_state [N, ...] read, final state [N, ...] f32 if output_final_state
#   dense_inplace  no indices, inplace_final_state=True: the final state written into initial_state
#   tokens         no indices, inplace_final_state=False: the state after every token [T, ...]
#   pool           1-D indices: pool row idx[n] read and written in place (-1: zeros, no write)
#   pool_tokens    1-D indices, inplace_final_state=False: rows read, per-token states returned
#   spec           2-D indices [N, S]: row idx[n, num_accepted_tokens[n] - 1] (idx[n, 0] without
#                  counts) read, token t's state written into row idx[n, t]
#   spec_tokens    2-D indices, inplace_final_state=False: as spec, per-token states returned
STATE_MODES = ("dense", "dense_inplace", "tokens", "pool", "pool_tokens", "spec", "spec_tokens")


def map_state(fn: str, *, has_initial_state: bool, indices_ndim: Optional[int],
              inplace_final_state: Optional[bool], has_num_accepted_tokens: bool) -> str:
    """The state mode of a call (one of ``STATE_MODES``)."""
    if indices_ndim is None:
        if has_num_accepted_tokens:
            raise _invalid(fn, "num_accepted_tokens", "None without ssm_state_indices [N, S]",
                           "a tensor")
        if inplace_final_state is None:
            return "dense"
        if inplace_final_state:
            if not has_initial_state:
                raise _invalid(fn, "initial_state", "the state to update with "
                               "inplace_final_state=True", None)
            return "dense_inplace"
        return "tokens"
    if not has_initial_state:
        raise _invalid(fn, "initial_state", "the state pool [P, HV, ...] with ssm_state_indices",
                       None)
    if indices_ndim == 1:
        if has_num_accepted_tokens:
            raise _invalid(fn, "num_accepted_tokens", "None with 1-D ssm_state_indices (the "
                           "accepted-token counts index 2-D indices [N, S])", "a tensor")
        return "pool" if inplace_final_state in (None, True) else "pool_tokens"
    if indices_ndim == 2:
        return "spec" if inplace_final_state in (None, True) else "spec_tokens"
    raise _invalid(fn, "ssm_state_indices", "a tensor [N] or [N, S]",
                   f"a tensor of rank {indices_ndim}")


def map_shapes(
    fn: str, op: str, q: Tuple[int, ...], k: Tuple[int, ...], v: Tuple[int, ...],
    g: Optional[Tuple[int, ...]], beta: Optional[Tuple[int, ...]], cu_len: Optional[int],
) -> Dict[str, int]:
    """fla's ``[B, T, ...]`` shapes as the ops' dims: ``B, T`` (per batch row), ``N``, ``H``,
    ``HV``, ``K``, ``V``. ``cu_len``: the length of ``cu_seqlens`` (None without)."""
    if len(q) != 4:
        raise _invalid(fn, "q", "a tensor [B, T, H, K]", list(q))
    B, T, H, K = q
    if tuple(k) != tuple(q):
        raise _invalid(fn, "k", f"q's shape {list(q)}", list(k))
    if len(v) != 4 or tuple(v[:2]) != (B, T):
        raise _invalid(fn, "v", f"a tensor [{B}, {T}, HV, V]", list(v))
    HV, V = v[2], v[3]
    if H == 0 or HV % H:
        raise _invalid(fn, "v", f"HV a multiple of H = {H} (grouped value heads)", HV)
    want_g = (B, T, HV) if op == "gdn" else (B, T, HV, K)
    if g is not None and tuple(g) != want_g:
        raise _invalid(fn, "g", f"shape {list(want_g)}", list(g))
    if beta is not None and tuple(beta) != (B, T, HV):
        if tuple(beta) == (B, T, HV, V):
            raise _unsupported(fn, "beta", "with one value per value channel [B, T, HV, V] is not "
                               "supported (deltarule takes one beta per token and value head)")
        raise _invalid(fn, "beta", f"shape {[B, T, HV]}", list(beta))
    if cu_len is not None:
        if B != 1:
            raise _invalid(fn, "q", "batch size 1 with cu_seqlens (flatten variable-length "
                           "inputs)", B)
        if cu_len < 2:
            raise _invalid(fn, "cu_seqlens", "a tensor [N + 1] with N >= 1", cu_len)
        N = cu_len - 1
    else:
        N = B
    return {"B": B, "T": T, "N": N, "H": H, "HV": HV, "K": K, "V": V}


# ---------------------------------------------------------------------------------------------
# one call, prepared


@dataclass
class Call:
    """One fla call mapped onto the ops: packed tensors, options and the state mode."""

    fn: str
    op: str
    mode: str
    dims: Dict[str, int]
    q: Any
    k: Any
    v: Any
    g: Any
    beta: Any
    cu_seqlens: Any
    options: Dict[str, Any]
    state: str
    A_log: Any = None
    dt_bias: Any = None
    initial_state: Any = None  # dense [N, ...] (gathered from the pool in the pooled token modes)
    output_final_state: bool = False
    pool: Any = None
    indices: Any = None  # 1-D pool indices, or the 2-D [N, S] ones
    num_accepted_tokens: Any = None
    max_seqlen: Optional[int] = None
    extra: Dict[str, Any] = field(default_factory=dict)

    @property
    def op_name(self) -> str:
        return f"{self.op}_{self.mode}"

    def per_token(self) -> bool:
        return self.state in ("tokens", "pool_tokens", "spec", "spec_tokens")


def _torch():
    import torch

    return torch


_GRAD_CHECKED = ("q", "k", "v", "g", "gk", "beta", "initial_state", "A_log", "dt_bias")


def _check_common(fn: str, named: Dict[str, Any], kwargs: Dict[str, Any]) -> None:
    torch = _torch()
    for key in kwargs:
        if key in _KERNEL_HINTS:
            continue
        if key == "head_first":
            if kwargs[key]:
                raise _unsupported(fn, "head_first", "=True ([B, H, T, ...] inputs) was removed "
                                   "from fla; pass [B, T, H, ...]")
            continue
        raise _unsupported(fn, key, "is not an argument deltarule knows (fla-core "
                           f"{FLA_VERSION}'s and vLLM's are)")
    if torch.is_grad_enabled():
        for name in _GRAD_CHECKED:
            t = named.get(name)
            if t is not None and getattr(t, "requires_grad", False):
                raise _unsupported(fn, name, "requires grad: deltarule computes the forward pass "
                                   "only (no backward); call it under torch.no_grad() or "
                                   "torch.inference_mode(), or detach the inputs")
    qd = named["q"].dtype
    if qd not in (torch.bfloat16, torch.float16, torch.float32):
        raise _unsupported(fn, "q", f"dtype {qd} is not supported (bfloat16, float16, float32)")
    for name in ("k", "v"):
        if named[name].dtype != qd:
            raise _unsupported(fn, name, f"dtype {named[name].dtype} differs from q's {qd} "
                               "(deltarule takes q, k and v in one dtype)")
    dev = named["q"].device
    for name, t in named.items():
        if t is not None and hasattr(t, "device") and t.device != dev:
            raise _invalid(fn, name, f"a tensor on {dev}", t.device)


def _gate_dtype(t: Any) -> Any:
    """g and beta in a dtype the ops take: f32 and bf16 as given; others as f32 (fla's kernels
    read them in f32)."""
    torch = _torch()
    if t.dtype in (torch.float32, torch.bfloat16):
        return t
    return t.float()


def _state_dtype_ok(fn: str, name: str, t: Any) -> None:
    torch = _torch()
    if t.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise _unsupported(fn, name, f"dtype {t.dtype} is not supported (float32, bfloat16, "
                           "float16)")


def _prepare(
    fn: str, op: str, mode: str, q, k, v, g, beta, *, gk=None, scale=None, initial_state=None,
    output_final_state=False, use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False,
    A_log=None, dt_bias=None, use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
    lower_bound=None, state_v_first=False, cu_seqlens=None, ssm_state_indices=None,
    inplace_final_state=None, num_accepted_tokens=None, kwargs=None,
) -> Call:
    torch = _torch()
    kwargs = dict(kwargs or {})
    if "transpose_state_layout" in kwargs:  # fla's deprecated name of state_v_first
        if state_v_first:
            raise _invalid(fn, "transpose_state_layout", "not both it and state_v_first", True)
        state_v_first = bool(kwargs.pop("transpose_state_layout"))
    named = {"q": q, "k": k, "v": v, "g": g, "gk": gk, "beta": beta,
             "initial_state": initial_state, "A_log": A_log, "dt_bias": dt_bias}
    _check_common(fn, named, kwargs)
    if gk is not None:  # fused_recurrent_gated_delta_rule's per-key-channel decay: the kda op
        if use_gate_in_kernel:
            raise _unsupported(fn, "gk", "with use_gate_in_kernel=True is not supported (the "
                               "in-kernel gate applies to g)")
        op = "kda"
        g = gk if g is None else (gk.float() + g.float().unsqueeze(-1))
    dims = map_shapes(fn, op, tuple(q.shape), tuple(k.shape), tuple(v.shape),
                      None if g is None else tuple(g.shape),
                      None if beta is None else tuple(beta.shape),
                      None if cu_seqlens is None else int(cu_seqlens.shape[0]))
    opts = map_options(
        fn, op, scale=scale, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
        use_gate_in_kernel=use_gate_in_kernel, has_A_log=A_log is not None,
        has_dt_bias=dt_bias is not None, lower_bound=lower_bound,
        use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel, allow_neg_eigval=allow_neg_eigval,
        state_v_first=state_v_first,
    )
    idx_nd = None if ssm_state_indices is None else len(ssm_state_indices.shape)
    state = map_state(fn, has_initial_state=initial_state is not None, indices_ndim=idx_nd,
                      inplace_final_state=inplace_final_state,
                      has_num_accepted_tokens=num_accepted_tokens is not None)
    B, T, H, K, HV, V, N = (dims[x] for x in ("B", "T", "H", "K", "HV", "V", "N"))
    BT = B * T
    dev = q.device
    if g is None:
        g = torch.zeros((B, T, HV), dtype=torch.float32, device=dev)
    if beta is None:
        beta = torch.ones((B, T, HV), dtype=torch.float32, device=dev)
    pq = q.contiguous().reshape(BT, H, K)
    pk = k.contiguous().reshape(BT, H, K)
    pv = v.contiguous().reshape(BT, HV, V)
    pg = _gate_dtype(g).contiguous().reshape((BT, HV) if op == "gdn" else (BT, HV, K))
    pb = _gate_dtype(beta).contiguous().reshape(BT, HV)
    max_seqlen = None
    if cu_seqlens is None:
        cu = _equal_offsets(B, T, dev)
        max_seqlen = T
    else:
        cu = cu_seqlens if cu_seqlens.dtype in (torch.int32, torch.int64) else cu_seqlens.long()
        cu = cu.contiguous()
        cpu_cu = kwargs.get("cu_seqlens_cpu")
        if cpu_cu is not None:
            c = [int(x) for x in cpu_cu.tolist()]
            max_seqlen = max((b - a for a, b in zip(c, c[1:])), default=0)
    a_log = dtb = None
    if opts["gate"] != "log":
        if A_log is not None:
            if int(A_log.numel()) != HV:
                raise _invalid(fn, "A_log", f"{HV} values (one per value head)",
                               list(A_log.shape))
            a_log = A_log.detach().float().reshape(HV).contiguous()
        want = HV if op == "gdn" else HV * K
        if dt_bias is None:
            dtb = torch.zeros(want, dtype=torch.float32, device=dev)
        else:
            if int(dt_bias.numel()) != want:
                shape = "[HV]" if op == "gdn" else "[HV * K]"
                raise _invalid(fn, "dt_bias", f"{want} values ({shape})", list(dt_bias.shape))
            dtb = dt_bias.detach().float().reshape(want).contiguous()
    S = (K, V) if opts["state_layout"] == "kv" else (V, K)
    call = Call(fn=fn, op=op, mode=mode, dims=dims, q=pq, k=pk, v=pv, g=pg, beta=pb,
                cu_seqlens=cu, options=opts, state=state, A_log=a_log, dt_bias=dtb,
                output_final_state=bool(output_final_state), max_seqlen=max_seqlen)
    if initial_state is not None:
        _state_dtype_ok(fn, "initial_state", initial_state)
        if len(initial_state.shape) != 4 or tuple(initial_state.shape[1:]) != (HV,) + S:
            raise _invalid(fn, "initial_state", f"a tensor [{'P' if idx_nd else N}, {HV}, "
                           f"{S[0]}, {S[1]}]", list(initial_state.shape))
    if state in ("dense", "dense_inplace", "tokens"):
        if initial_state is not None and int(initial_state.shape[0]) != N:
            raise _invalid(fn, "initial_state", f"{N} states (one per sequence)",
                           int(initial_state.shape[0]))
        if state == "dense_inplace" and not initial_state.is_contiguous():
            raise _invalid(fn, "initial_state", "a contiguous tensor (it is updated in place)",
                           "a strided view")
        call.initial_state = None if initial_state is None else initial_state.contiguous()
        call.pool = initial_state if state == "dense_inplace" else None
        return call
    idx = ssm_state_indices
    if idx.dtype not in (torch.int32, torch.int64):
        raise _invalid(fn, "ssm_state_indices", "an int32 or int64 tensor", idx.dtype)
    if int(idx.shape[0]) != N:
        raise _invalid(fn, "ssm_state_indices", f"{N} rows (one per sequence)",
                       list(idx.shape))
    if state in ("pool", "spec") and not initial_state.is_contiguous():
        raise _invalid(fn, "initial_state", "a contiguous pool (it is updated in place)",
                       "a strided view")
    call.pool = initial_state
    call.indices = idx.contiguous()
    if state == "pool":
        return call
    # the pooled token modes start from rows gathered into a dense state
    if state == "pool_tokens":
        rows = call.indices.long()
    else:
        col = torch.zeros(N, dtype=torch.long, device=dev)
        if num_accepted_tokens is not None:
            if tuple(num_accepted_tokens.shape) != (N,):
                raise _invalid(fn, "num_accepted_tokens", f"a tensor [{N}]",
                               list(num_accepted_tokens.shape))
            col = num_accepted_tokens.long() - 1
            call.num_accepted_tokens = num_accepted_tokens
        rows = call.indices.long().gather(1, col.clamp(min=0).unsqueeze(1)).squeeze(1)
        rows = torch.where(col >= 0, rows, torch.full_like(rows, -1))
    call.initial_state = _gather_rows(initial_state, rows)
    call.extra["rows"] = rows
    return call


_EQUAL_CU: Dict[Tuple[int, int, str], Any] = {}


def _equal_offsets(B: int, T: int, device: Any) -> Any:
    """``[0, T, 2T, ..., BT]`` on ``device``, one tensor per (B, T, device): the ops validate an
    offsets tensor once, so a decode loop does not read new offsets back every step. It is made
    outside inference mode: an inference tensor has no version counter, and the ops would read
    it back (a host synchronisation) on every call of a ``generate()`` loop."""
    torch = _torch()
    key = (B, T, str(device))
    cu = _EQUAL_CU.get(key)
    if cu is None:
        with torch.inference_mode(False):
            cu = torch.arange(B + 1, dtype=torch.int64, device=device) * T
        if len(_EQUAL_CU) >= 64:
            _EQUAL_CU.clear()
        _EQUAL_CU[key] = cu
    return cu


def _gather_rows(pool: Any, rows: Any) -> Any:
    """``pool[rows]`` with zeros where a row index is negative."""
    torch = _torch()
    got = pool[rows.clamp(min=0)]
    keep = (rows >= 0).view(-1, 1, 1, 1)
    return torch.where(keep, got, torch.zeros((), dtype=pool.dtype, device=pool.device))


def _token_rows(call: Call) -> Tuple[Any, Any]:
    """For the 2-D index modes: each token's destination row ``idx[n, t]`` and its sequence."""
    torch = _torch()
    cu = call.cu_seqlens.long()
    lens = cu[1:] - cu[:-1]
    T = int(call.q.shape[0])
    seq = torch.repeat_interleave(torch.arange(len(lens), device=cu.device), lens)
    t = torch.arange(T, device=cu.device) - cu[seq]
    S = int(call.indices.shape[1])
    if T and int(t.max()) >= S:
        raise _invalid(call.fn, "ssm_state_indices", f"at least as many columns as the longest "
                       f"sequence's tokens ({int(t.max()) + 1})", S)
    return call.indices.long()[seq, t], seq


def _execute(call: Call) -> Tuple[Any, Any]:
    """Runs a prepared call through the ops; returns fla's ``(o, final_state)``."""
    from . import api

    torch = _torch()
    o_ = call.options
    kw = dict(A_log=call.A_log, dt_bias=call.dt_bias, scale=o_["scale"],
              use_qk_l2norm=o_["use_qk_l2norm"], gate=o_["gate"], lower_bound=o_["lower_bound"],
              beta_mode=o_["beta_mode"], state_layout=o_["state_layout"], backend=backend,
              max_seqlen=call.max_seqlen)
    run = getattr(api, call.op_name)
    args = (call.q, call.k, call.v, call.g, call.beta, call.cu_seqlens)
    d = call.dims
    st = call.state
    final = None
    if st == "dense":
        o, final, _ = run(*args, initial_state=call.initial_state,
                          output_final_state=call.output_final_state, **kw)
    elif st == "dense_inplace":
        o, fs, _ = run(*args, initial_state=call.initial_state, output_final_state=True,
                       state_dtype=call.pool.dtype, **kw)
        call.pool.copy_(fs)
        final = call.pool
    elif st == "pool":
        o, final, _ = run(*args, state_pool=call.pool, state_indices=call.indices, **kw)
    else:  # the per-token modes: checkpoints after every token
        sdt = call.initial_state.dtype if call.initial_state is not None else torch.float32
        o, _, ck = run(*args, initial_state=call.initial_state, checkpoint_every=1,
                       state_dtype=sdt, **kw)
        final = ck
        if st == "spec":
            dest, _ = _token_rows(call)
            keep = dest >= 0
            call.pool[dest[keep]] = ck[keep].to(call.pool.dtype)
            final = call.pool
    o = o.reshape(d["B"], d["T"], d["HV"], d["V"])
    return o, final


def _bind(fn: Callable, args: tuple, kwargs: dict) -> Dict[str, Any]:
    """The call's arguments by name, defaults applied, extra keywords under ``kwargs``."""
    ba = inspect.signature(fn).bind(*args, **kwargs)
    ba.apply_defaults()
    out = dict(ba.arguments)
    out["kwargs"] = dict(out.pop("kwargs", {}))
    return out


# ---------------------------------------------------------------------------------------------
# the functions


def chunk_gated_delta_rule(
    q, k, v, g, beta, scale: Optional[float] = None, initial_state=None,
    output_final_state: bool = False, use_qk_l2norm_in_kernel: bool = False,
    use_beta_sigmoid_in_kernel: bool = False, allow_neg_eigval: bool = False,
    state_v_first: bool = False, cu_seqlens=None, cu_seqlens_cpu=None, chunk_indices=None,
    cp_context=None, use_gate_in_kernel: bool = False, A_log=None, dt_bias=None, **kwargs,
):
    """fla's ``chunk_gated_delta_rule`` (Gated DeltaNet prefill) on ``deltarule.gdn_prefill``.

    q, k ``[B, T, H, K]``, v ``[B, T, HV, V]``, g and beta ``[B, T, HV]``; ``use_gate_in_kernel``
    takes the raw g with ``A_log`` ``[HV]`` and ``dt_bias`` ``[HV]`` (fla passes them through
    ``**kwargs``). Returns ``(o [B, T, HV, V] in q's dtype, final_state [N, HV, K, V] f32 or
    None)``."""
    if cp_context is not None:
        raise _unsupported("chunk_gated_delta_rule", "cp_context", "(context parallelism) is "
                           "not supported")
    kwargs.update(cu_seqlens_cpu=cu_seqlens_cpu, chunk_indices=chunk_indices)
    call = _prepare(
        "chunk_gated_delta_rule", "gdn", "prefill", q, k, v, g, beta, scale=scale,
        initial_state=initial_state, output_final_state=output_final_state,
        use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, use_gate_in_kernel=use_gate_in_kernel,
        A_log=A_log, dt_bias=dt_bias, use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel,
        allow_neg_eigval=allow_neg_eigval, state_v_first=state_v_first, cu_seqlens=cu_seqlens,
        kwargs={k_: v_ for k_, v_ in kwargs.items() if v_ is not None},
    )
    return _execute(call)


def fused_recurrent_gated_delta_rule(
    q, k, v, g=None, gk=None, gv=None, beta=None, scale: Optional[float] = None,
    initial_state=None, output_final_state: bool = False, use_qk_l2norm_in_kernel: bool = False,
    use_gate_in_kernel: bool = False, A_log=None, dt_bias=None,
    use_beta_sigmoid_in_kernel: bool = False, allow_neg_eigval: bool = False,
    state_v_first: bool = False, cu_seqlens=None, *, inplace_final_state: Optional[bool] = None,
    ssm_state_indices=None, num_accepted_tokens=None, retrieve_parent_token=None, **kwargs,
):
    """fla's ``fused_recurrent_gated_delta_rule`` (the token recurrence) on
    ``deltarule.gdn_decode``, with vLLM's pooled-state arguments.

    ``g`` ``[B, T, HV]`` (None: no decay), or ``gk`` ``[B, T, HV, K]`` (per key channel: the kda
    op; with g, both decays apply). ``ssm_state_indices``: ``initial_state`` is then a pool;
    ``[N]`` indices read and write row ``idx[n]``; ``[N, S]`` indices (speculative decoding) read
    row ``idx[n, num_accepted_tokens[n] - 1]`` and write token t's state into row ``idx[n, t]``;
    -1 reads zeros and writes nothing. ``inplace_final_state`` (vLLM; None: fla's behaviour):
    True updates ``initial_state`` in place and returns it, False returns the state after every
    token ``[T, HV, ...]`` in the initial state's dtype. Pass vLLM's arguments by keyword, as
    vLLM's call sites do (its positional order differs from fla's)."""
    fn = "fused_recurrent_gated_delta_rule"
    if gv is not None:
        raise _unsupported(fn, "gv", "(a decay per value channel) is not supported")
    if retrieve_parent_token is not None:
        raise _unsupported(fn, "retrieve_parent_token", "(EAGLE tree verification) is not "
                           "supported")
    call = _prepare(
        fn, "gdn", "decode", q, k, v, g, beta, gk=gk, scale=scale, initial_state=initial_state,
        output_final_state=output_final_state, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
        use_gate_in_kernel=use_gate_in_kernel, A_log=A_log, dt_bias=dt_bias,
        use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel, allow_neg_eigval=allow_neg_eigval,
        state_v_first=state_v_first, cu_seqlens=cu_seqlens,
        ssm_state_indices=ssm_state_indices, inplace_final_state=inplace_final_state,
        num_accepted_tokens=num_accepted_tokens, kwargs=kwargs,
    )
    return _execute(call)


def chunk_kda(
    q, k, v, g, beta, scale: Optional[float] = None, initial_state=None,
    output_final_state: bool = False, use_qk_l2norm_in_kernel: bool = False,
    use_gate_in_kernel: bool = False, use_beta_sigmoid_in_kernel: bool = False,
    allow_neg_eigval: bool = False, safe_gate: bool = False, lower_bound: Optional[float] = None,
    disable_recompute: bool = False, return_intermediate_states: bool = False,
    state_v_first: bool = False, cu_seqlens=None, cu_seqlens_cpu=None, cp_context=None,
    use_graph: bool = False, max_num_seqs: Optional[int] = None, A_log=None, dt_bias=None,
    **kwargs,
):
    """fla's ``chunk_kda`` (Kimi Delta Attention prefill) on ``deltarule.kda_prefill``.

    g ``[B, T, HV, K]``; ``use_gate_in_kernel`` takes the raw g with ``A_log`` ``[HV]`` and
    ``dt_bias`` ``[HV * K]``: ``-exp(A_log) * softplus(g + dt_bias)``, or with ``lower_bound``
    ``lower_bound * sigmoid(exp(A_log) * (g + dt_bias))`` (``A_log`` optional). ``safe_gate``,
    ``disable_recompute``, ``use_graph``, ``max_num_seqs`` steer fla's kernels and change
    nothing here. Returns ``(o, final_state)``."""
    fn = "chunk_kda"
    if cp_context is not None:
        raise _unsupported(fn, "cp_context", "(context parallelism) is not supported")
    if return_intermediate_states:
        raise _unsupported(fn, "return_intermediate_states", "is not supported (deltarule's "
                           "checkpoints hold the state after every n tokens: deltarule.kda_prefill"
                           "(..., checkpoint_every=64))")
    call = _prepare(
        fn, "kda", "prefill", q, k, v, g, beta, scale=scale, initial_state=initial_state,
        output_final_state=output_final_state, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
        use_gate_in_kernel=use_gate_in_kernel, A_log=A_log, dt_bias=dt_bias,
        use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel, allow_neg_eigval=allow_neg_eigval,
        lower_bound=lower_bound, state_v_first=state_v_first, cu_seqlens=cu_seqlens,
        kwargs=dict(kwargs, **({"cu_seqlens_cpu": cu_seqlens_cpu} if cu_seqlens_cpu is not None
                               else {})),
    )
    return _execute(call)


def fused_recurrent_kda(
    q, k, v, g, beta, A_log=None, dt_bias=None, scale: Optional[float] = None,
    initial_state=None, output_final_state: bool = False, use_qk_l2norm_in_kernel: bool = False,
    use_gate_in_kernel: bool = False, use_beta_sigmoid_in_kernel: bool = False,
    allow_neg_eigval: bool = False, lower_bound: Optional[float] = None,
    state_v_first: bool = False, cu_seqlens=None, *, inplace_final_state: Optional[bool] = None,
    ssm_state_indices=None, num_accepted_tokens=None, **kwargs,
):
    """fla's ``fused_recurrent_kda`` on ``deltarule.kda_decode``, with the pooled-state arguments
    of ``fused_recurrent_gated_delta_rule``. vLLM's vendored copy defaults
    ``use_qk_l2norm_in_kernel`` to True; fla's (and this one) to False."""
    call = _prepare(
        "fused_recurrent_kda", "kda", "decode", q, k, v, g, beta, scale=scale,
        initial_state=initial_state, output_final_state=output_final_state,
        use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, use_gate_in_kernel=use_gate_in_kernel,
        A_log=A_log, dt_bias=dt_bias, use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel,
        allow_neg_eigval=allow_neg_eigval, lower_bound=lower_bound, state_v_first=state_v_first,
        cu_seqlens=cu_seqlens, ssm_state_indices=ssm_state_indices,
        inplace_final_state=inplace_final_state, num_accepted_tokens=num_accepted_tokens,
        kwargs=kwargs,
    )
    return _execute(call)


chunk_gdn = chunk_gated_delta_rule
fused_recurrent_gdn = fused_recurrent_gated_delta_rule


def fused_gdn_gate(g, A_log, dt_bias=None, output_dtype=None):
    """fla's ``fused_gdn_gate``: ``-exp(A_log) * softplus(g + dt_bias)`` over ``[..., HV]``, in
    f32 (softplus(x) = x above 20), returned in ``output_dtype`` (f32 by default)."""
    torch = _torch()
    x = g.float()
    if dt_bias is not None:
        x = x + dt_bias.float()
    y = -A_log.float().exp() * torch.nn.functional.softplus(x, beta=1.0, threshold=20.0)
    return y.to(output_dtype or torch.float32)


def fused_kda_gate(g, A_log=None, dt_bias=None, lower_bound: Optional[float] = None,
                   output_dtype=None):
    """fla's ``fused_kda_gate`` over ``[..., HV, K]``: ``-exp(A_log) * softplus(g + dt_bias)``, or
    with ``lower_bound`` ``lower_bound * sigmoid(exp(A_log) * (g + dt_bias))`` (without
    ``A_log``: ``lower_bound * sigmoid(g + dt_bias)``); f32, returned in ``output_dtype``."""
    torch = _torch()
    HV, K = g.shape[-2:]
    x = g.float()
    if dt_bias is not None:
        x = x + dt_bias.float().view(HV, K)
    if lower_bound is None:
        if A_log is None:
            raise _invalid("fused_kda_gate", "A_log", "a tensor [HV] without lower_bound", None)
        y = -A_log.float().view(HV, 1).exp() * torch.nn.functional.softplus(x, 1.0, 20.0)
    else:
        if A_log is not None:
            x = A_log.float().view(HV, 1).exp() * x
        y = float(lower_bound) * torch.sigmoid(x)
    return y.to(output_dtype or torch.float32)


FUNCTIONS: Dict[str, Callable] = {
    "chunk_gated_delta_rule": chunk_gated_delta_rule,
    "fused_recurrent_gated_delta_rule": fused_recurrent_gated_delta_rule,
    "chunk_kda": chunk_kda,
    "fused_recurrent_kda": fused_recurrent_kda,
    "fused_gdn_gate": fused_gdn_gate,
    "fused_kda_gate": fused_kda_gate,
}
_DELTA_RULE = ("chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule", "chunk_kda",
               "fused_recurrent_kda")


def prepare(name: str, *args, **kwargs) -> Call:
    """The :class:`Call` that fla function ``name`` makes of these arguments (nothing runs)."""
    fn = FUNCTIONS[name]
    a = _bind(fn, args, kwargs)
    extra = a.pop("kwargs")
    return _prepare_from(name, a, extra)


def _prepare_from(name: str, a: Dict[str, Any], extra: Dict[str, Any]) -> Call:
    a = dict(a)
    op = "gdn" if "gated_delta_rule" in name else "kda"
    mode = "prefill" if name.startswith("chunk") else "decode"
    for key in ("cp_context", "retrieve_parent_token", "return_intermediate_states"):
        if a.pop(key, None):
            raise _unsupported(name, key, "is not supported")
    if a.pop("gv", None) is not None:
        raise _unsupported(name, "gv", "(a decay per value channel) is not supported")
    for key in ("cu_seqlens_cpu", "chunk_indices", "safe_gate", "disable_recompute",
                "use_graph", "max_num_seqs"):
        val = a.pop(key, None)
        if val is not None and val is not False:
            extra[key] = val
    q, k, v, g, beta = (a.pop(x) for x in ("q", "k", "v", "g", "beta"))
    return _prepare(name, op, mode, q, k, v, g, beta, kwargs=extra, **a)


# ---------------------------------------------------------------------------------------------
# case files


def _case_args(call: Call, snapshot: bool = True) -> Dict[str, Any]:
    """``save_case`` keyword arguments for a prepared call (its inputs as they are now)."""
    o_ = call.options
    kw: Dict[str, Any] = dict(
        op=call.op, q=call.q, k=call.k, v=call.v, g=call.g, beta=call.beta,
        cu_seqlens=call.cu_seqlens, mode=call.mode, A_log=call.A_log, dt_bias=call.dt_bias,
        scale=o_["scale"], use_qk_l2norm=o_["use_qk_l2norm"], gate=o_["gate"],
        lower_bound=o_["lower_bound"], beta_mode=o_["beta_mode"],
        state_layout=o_["state_layout"],
    )
    if call.state == "pool":
        rows, remap = _compact(call.indices)
        kw["state_pool"] = call.pool[rows.to(call.pool.device)].detach().cpu().clone()
        kw["state_indices"] = remap
        call.extra["case_rows"] = rows
    else:
        init = call.initial_state
        if init is not None and snapshot:
            init = init.detach().cpu().clone()
        kw["initial_state"] = init
        if call.per_token():
            kw["checkpoint_every"] = 1
    return kw


def _compact(indices: Any) -> Tuple[Any, Any]:
    """The pool rows a 1-D index tensor names (in first-use order; one zero row when none) and
    the indices renumbered into them: a case holds the rows the call touches, not the pool."""
    torch = _torch()
    idx = [int(x) for x in indices.tolist()]
    rows: List[int] = []
    where: Dict[int, int] = {}
    remap = []
    for i in idx:
        if i < 0:
            remap.append(-1)
            continue
        if i not in where:
            where[i] = len(rows)
            rows.append(i)
        remap.append(where[i])
    if not rows:
        rows = [0]
    return (torch.tensor(rows, dtype=torch.long),
            torch.tensor(remap, dtype=indices.dtype))


def _observed(call: Call, result: Tuple[Any, Any]) -> Dict[str, Any]:
    """The observed outputs of a call in the case's terms."""
    if isinstance(result, dict):
        o, final = result.get("o"), result.get("final_state")
    elif isinstance(result, (tuple, list)):
        o, final = result[0], (result[1] if len(result) > 1 else None)
    else:
        o, final = result, None
    obs: Dict[str, Any] = {"o": o}
    st = call.state
    if final is None:
        return obs
    if st == "dense" or st == "dense_inplace":
        obs["final_state"] = final
    elif st == "pool":
        obs["final_state"] = final[call.extra["case_rows"].to(final.device)]
    elif st in ("tokens", "pool_tokens", "spec_tokens"):
        obs["checkpoints"] = final
    elif st == "spec":
        dest, _ = _token_rows(call)
        if bool((dest >= 0).all()):
            obs["checkpoints"] = final[dest]
    return obs


def save_case(path: str, fn, *args, observed=None, observed_label: Optional[str] = None,
              metadata: Optional[Dict[str, str]] = None, **kwargs) -> str:
    """Writes the call ``fn(*args, **kwargs)`` of an fla function (name or function) as a case
    file, with ``observed`` = what a kernel returned for it (``(o, final_state)``) if given. Pass
    the inputs as they were before that kernel ran (a copy of a pool it updated in place);
    :func:`capture` takes that copy itself.

    The call is mapped exactly as the function maps it: fla layouts flattened, in-kernel gates and
    beta forms as options, pools compacted to the rows the call names (indices renumbered), the
    speculative-decoding modes as a dense initial state (the rows read) with a checkpoint after
    every token (observed: the per-token states)."""
    name = fn if isinstance(fn, str) else getattr(fn, "__name__", str(fn))
    if name not in _DELTA_RULE:
        raise _invalid("save_case", "fn", f"one of {', '.join(_DELTA_RULE)}", name)
    call = prepare(name, *args, **kwargs)
    kw = _case_args(call)
    obs = _observed(call, observed) if observed is not None else None
    meta = {"source": f"deltarule.fla.save_case({name})"}
    meta.update(metadata or {})
    return _case.save_case(path, observed=obs, observed_label=observed_label, metadata=meta, **kw)


# ---------------------------------------------------------------------------------------------
# install / uninstall / capture: the program routing is in _fla_routing.py, the capture in
# _fla_capture.py; both import this module back and read its FUNCTIONS and backend when called

from ._fla_routing import (  # noqa: E402, F401  (re-exported: deltarule.fla.install, ...)
    _FLA_MODULES,
    _INSTALLED,
    _INSTANCE_NAMES,
    _TRANSFORMERS_NAMES,
    _VLLM_MODULES,
    Installation,
    _adapter,
    _originals,
    _patch,
    _transformers_target,
    bindings,
    install,
    reroute,
    uninstall,
)
from ._fla_capture import Capture, _label_of, capture  # noqa: E402, F401

"""Friendly wrappers: allocate the outputs, call the custom op (in eager mode straight into its
implementation, see ``ops.call_eager``), return the tensors.

``gdn_prefill(q, k, v, g, beta, cu_seqlens, ...)`` and the three others mirror the ops of
``deltarule.ops``; pass ``state_pool`` + ``state_indices`` for model-owned states updated in place,
or ``initial_state`` and ``output_final_state=True`` for dense states. ``max_seqlen`` (optional,
like flash-attn's): the longest sequence's tokens, for the kernel selection when the offsets are not
read on the host, i.e. under CUDA-graph capture (eager calls read them once per offsets tensor and
raise if the declared value is too small; see ``ops``). CPU tensors run on the CPU backend.
``reference(...)`` runs the engine's float64 recurrence on the host (any tensors; for tests).
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from . import _native, _spec

_TORCH_DTYPE = {}


def _torch():
    import torch

    if not _TORCH_DTYPE:
        _TORCH_DTYPE.update(
            {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32,
             "i32": torch.int32, "i64": torch.int64}
        )
    return torch


def _call(
    name: str, op: str, mode: str, q, k, v, g, beta, cu_seqlens, *, initial_state=None,
    state_pool=None, state_indices=None, output_final_state: bool = False, final_state=None,
    state_dtype=None, checkpoint_every: int = 0, checkpoints=None, A_log=None, dt_bias=None,
    scale: Optional[float] = None, use_qk_l2norm: bool = False, gate: str = "log",
    lower_bound: float = -5.0, beta_mode: str = "prob", state_layout: str = "vk", out=None,
    out_dtype=None, backend: str = "auto", max_seqlen: Optional[int] = None,
):
    torch = _torch()
    T, HV, V = v.shape
    K = q.shape[2]
    N = cu_seqlens.shape[0] - 1
    o = out if out is not None else torch.empty(
        (T, HV, V), dtype=out_dtype or v.dtype, device=v.device
    )
    S = (K, V) if state_layout == "kv" else (V, K)
    if output_final_state and final_state is None and state_pool is None:
        final_state = torch.empty(
            (N, HV) + S, dtype=state_dtype or torch.float32, device=v.device
        )
    if checkpoint_every and checkpoints is None:
        rows = T // checkpoint_every  # an upper bound of sum(floor(len_n / every))
        sdt = state_pool.dtype if state_pool is not None else (state_dtype or torch.float32)
        checkpoints = torch.empty((rows, HV) + S, dtype=sdt, device=v.device)
    from . import ops

    ops.call_eager(
        name, op, mode,
        (q, k, v, g, beta, cu_seqlens, o, initial_state, final_state, state_pool, state_indices,
         checkpoints, A_log, dt_bias),
        (float(scale or 0.0), use_qk_l2norm, gate, lower_bound, beta_mode, state_layout,
         int(checkpoint_every)),
        backend,
        max_seqlen,
    )
    return o, (state_pool if state_pool is not None else final_state), checkpoints


def gdn_prefill(q, k, v, g, beta, cu_seqlens, **kw):
    """Gated DeltaNet prefill. Returns ``(o, final_state or pool, checkpoints)``."""
    return _call("gdn_prefill", "gdn", "prefill", q, k, v, g, beta, cu_seqlens, **kw)


def kda_prefill(q, k, v, g, beta, cu_seqlens, **kw):
    """Kimi Delta Attention prefill. Returns ``(o, final_state or pool, checkpoints)``."""
    return _call("kda_prefill", "kda", "prefill", q, k, v, g, beta, cu_seqlens, **kw)


def gdn_decode(q, k, v, g, beta, cu_seqlens, **kw):
    """Gated DeltaNet decode (T >= 1 tokens per sequence), pool updated in place."""
    return _call("gdn_decode", "gdn", "decode", q, k, v, g, beta, cu_seqlens, **kw)


def kda_decode(q, k, v, g, beta, cu_seqlens, **kw):
    """Kimi Delta Attention decode (T >= 1 tokens per sequence), pool updated in place."""
    return _call("kda_decode", "kda", "decode", q, k, v, g, beta, cu_seqlens, **kw)


def _host(t) -> Tuple[bytes, str, list]:
    torch = _torch()
    t = t.detach().contiguous().cpu()
    name = _spec.dtype_name(t)
    raw = t.view(torch.int16) if t.element_size() == 2 else t
    return (raw.numpy().tobytes(), name, list(t.shape))


def _from_host(item, device) -> Any:
    torch = _torch()
    data, name, shape = item
    dt = _TORCH_DTYPE[name]
    if dt in (torch.bfloat16, torch.float16):
        t = torch.frombuffer(bytearray(data), dtype=torch.int16).view(dt)
    else:
        t = torch.frombuffer(bytearray(data), dtype=dt)
    return t.reshape(shape).to(device)


def reference(
    op: str, q, k, v, g, beta, cu_seqlens, *, mode: str = "prefill", initial_state=None,
    state_pool=None, state_indices=None, A_log=None, dt_bias=None, scale: Optional[float] = None,
    use_qk_l2norm: bool = False, gate: str = "log", lower_bound: float = -5.0,
    beta_mode: str = "prob", state_layout: str = "vk", checkpoint_every: int = 0,
    backend: str = "cpu",
) -> Dict[str, Any]:
    """Runs the engine on host copies of the tensors (``cpu``: the float64 recurrence) and returns
    ``{"o": f32 tensor, "final_state": ..., "checkpoints": ..., "rule": id}`` on q's device.
    With ``state_pool``, ``final_state`` is the whole pool after the in-place update."""
    torch = _torch()
    T, HV, V = v.shape
    K = q.shape[2]
    N = cu_seqlens.shape[0] - 1
    S = (K, V) if state_layout == "kv" else (V, K)
    named = (
        ("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta), ("cu_seqlens", cu_seqlens),
        ("A_log", A_log), ("dt_bias", dt_bias),
        ("initial_state", state_pool if state_pool is not None else initial_state),
        ("state_indices", state_indices),
    )
    cpu = {n: t.detach().cpu() for n, t in named if t is not None}
    o = torch.empty((T, HV, V), dtype=torch.float32)
    final = None if state_pool is not None else torch.empty((N, HV) + S, dtype=torch.float32)
    ck = None
    if checkpoint_every:
        cu = [int(x) for x in cu_seqlens.tolist()]
        sdt = state_pool.dtype if state_pool is not None else torch.float32
        rows = _spec.checkpoint_count(cu, checkpoint_every)
        ck = torch.empty((rows, HV) + S, dtype=sdt)
    spec = _spec.build_spec(
        op, mode, cpu["q"], cpu["k"], cpu["v"], cpu["g"], cpu["beta"], cpu["cu_seqlens"], o,
        None if state_pool is not None else cpu.get("initial_state"), final,
        cpu.get("initial_state") if state_pool is not None else None, cpu.get("state_indices"),
        ck, cpu.get("A_log"), cpu.get("dt_bias"), float(scale or 0.0), use_qk_l2norm, gate,
        lower_bound, beta_mode, state_layout, checkpoint_every,
    )
    out = _native.run_host(
        backend, op, mode, spec.native(), {n: _host(t) for n, t in cpu.items()}
    )
    res = {"rule": out.pop("rule")}
    for n, item in out.items():
        res[n] = _from_host(item, q.device)
    return res


def backends(device: int = 0):
    """The devices found and why any backend is unavailable."""
    return _native.backends(device)

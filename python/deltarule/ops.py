"""The ``torch.library`` custom ops (namespace ``deltarule``), in the style vLLM uses for its own
linear-attention ops: outputs are preallocated by the caller and declared in ``mutates_args``, the
fake (meta) implementations validate and return nothing so ``torch.compile`` traces the calls, and
the real implementation launches on ``torch.cuda.current_stream()`` without synchronising (apart
from the one-time validation of a new offsets tensor, see ``_offsets``).

CPU tensors run on the CPU backend (host copies through the extension, outputs copied back into
the caller's tensors, pool rows written in place as on the device): ``backend="auto"`` picks a CPU
row of the selection table as it picks a device row for CUDA tensors; a CUDA or wgpu selection
name with CPU tensors is an invalid argument.

Signature of all four ops (``gdn_prefill``, ``kda_prefill``, ``gdn_decode``, ``kda_decode``)::

    (q, k, v, g, beta, cu_seqlens, o, initial_state, final_state, state_pool, state_indices,
     checkpoints, A_log, dt_bias, scale, use_qk_l2norm, gate, lower_bound, beta_mode,
     state_layout, checkpoint_every, backend, max_seqlen) -> None

Dense states: ``initial_state`` (read) and/or ``final_state`` (written), ``[N, HV, S0, S1]``.
Pooled states: ``state_pool`` ``[P, HV, S0, S1]`` read and written in place at the rows named by
``state_indices`` (-1: start from zeros and write nothing); rows not named are not touched and the
pool is never copied. ``(S0, S1)`` is ``(K, V)`` for ``state_layout="kv"`` and ``(V, K)`` for
``"vk"`` (vLLM's, FlashInfer's and SGLang's layout, the default).

``max_seqlen`` (``None``: not given): the longest sequence's tokens. The kernel selection takes the
longest sequence as a hint (batches of one-chunk sequences go to the fused kernel). Eager calls
read it from ``cu_seqlens`` (once per offsets tensor) and raise if ``max_seqlen`` is smaller;
under CUDA-graph capture nothing is read, so without ``max_seqlen`` a captured call may run a
slower kernel than the eager one (gdn 16/32, 256 x 64 on the H100: 1.19 against 0.86 ms). A stale
value never changes the result, only the kernel.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Optional

import torch
from torch import Tensor

from . import _native, _offsets, _spec

MUTATES = ("o", "final_state", "state_pool", "checkpoints")


def _ptr(t: Optional[Tensor]) -> int:
    return 0 if t is None else int(t.data_ptr())


# Workspace bytes per (op, mode, backend, device, problem signature), from the native side. The
# workspace itself is a torch tensor allocated per call on the launch stream: PyTorch's caching
# allocator reuses it between eager calls (stream-ordered, so it is not reused before the launch
# ran) and a captured CUDA graph keeps it in its memory pool, so nothing grows when the token
# counts vary from call to call.
_WS_BYTES: "OrderedDict[tuple, int]" = OrderedDict()
_WS_CACHE_MAX = 1024


def _workspace(
    op: str, mode: str, backend: str, native: tuple, device: torch.device, max_seq: Optional[int]
) -> Tensor:
    index = device.index or 0
    key = (op, mode, backend, index, native, max_seq)
    need = _WS_BYTES.get(key)
    if need is None:
        need = int(_native.workspace_bytes(op, mode, backend, native, index, max_seq=max_seq)[1])
        _WS_BYTES[key] = need
        if len(_WS_BYTES) > _WS_CACHE_MAX:
            _WS_BYTES.popitem(last=False)
    else:
        _WS_BYTES.move_to_end(key)
    return torch.empty(max(need, 1), dtype=torch.uint8, device=device)


def _run(
    op: str, mode: str, tensors: tuple, scalars: tuple, backend: str,
    max_seqlen: Optional[int] = None,
) -> None:
    """The real implementation of the four ops: validate (cached per signature), then launch on
    the current stream. ``tensors`` = (q, k, v, g, beta, cu_seqlens, o, initial_state,
    final_state, state_pool, state_indices, checkpoints, A_log, dt_bias), ``scalars`` = (scale,
    use_qk_l2norm, gate, lower_bound, beta_mode, state_layout, checkpoint_every)."""
    (q, k, v, g, beta, cu_seqlens, o, initial_state, final_state, state_pool, state_indices,
     checkpoints, A_log, dt_bias) = tensors
    spec = _spec.cached_spec(op, mode, tensors, scalars)
    if q.device.type == "cpu":
        _run_host(op, mode, spec, tensors, backend, max_seqlen)
        return
    if q.device.type != "cuda":
        raise ValueError(
            f"invalid argument `q`: expected CUDA or CPU tensors, got {q.device}"
        )
    if spec.T == 0:
        return
    # (the longest sequence, when the offsets were read: the selection's hint, e.g. one-chunk
    # sequences take the fused kernel; the workspace and the launch get the same value)
    max_seq = _offsets.resolve_hint(
        _offsets.validate(spec, cu_seqlens, state_indices, checkpoints), max_seqlen, spec.T
    )
    state_in = state_pool if state_pool is not None else initial_state
    state_out = state_pool if state_pool is not None else final_state
    ptrs = [
        _ptr(q), _ptr(k), _ptr(v), _ptr(g), _ptr(beta), _ptr(cu_seqlens), _ptr(A_log),
        _ptr(dt_bias), _ptr(state_in), _ptr(state_indices), _ptr(o), _ptr(state_out),
        _ptr(checkpoints),
    ]
    stream = torch.cuda.current_stream(q.device).cuda_stream
    native = spec.native()
    ws = _workspace(op, mode, backend, native, q.device, max_seq)
    _native.launch(op, mode, backend, native, ptrs, stream, q.device.index or 0,
                   int(ws.data_ptr()), int(ws.numel()), max_seq=max_seq)


def _run_host(
    op: str, mode: str, spec: "_spec.Spec", tensors: tuple, backend: str,
    max_seqlen: Optional[int],
) -> None:
    """CPU tensors: the same validation, then the CPU backend through the extension
    (``_native.run_cpu``: the selection table's CPU rows) on host copies; the outputs are copied
    into ``o``, ``final_state``, the named pool rows and ``checkpoints``."""
    from .api import _from_host, _host

    (q, k, v, g, beta, cu_seqlens, o, initial_state, final_state, state_pool, state_indices,
     checkpoints, A_log, dt_bias) = tensors
    _native_backend_for_host(backend)
    _offsets.resolve_hint(
        _offsets.validate(spec, cu_seqlens, state_indices, checkpoints), max_seqlen, spec.T
    )
    if spec.T == 0:
        return
    named = (
        ("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta), ("cu_seqlens", cu_seqlens),
        ("A_log", A_log), ("dt_bias", dt_bias),
        ("initial_state", state_pool if state_pool is not None else initial_state),
        ("state_indices", state_indices),
    )
    out = _native.run_cpu(
        backend, op, mode, spec.native(), {n: _host(t) for n, t in named if t is not None}
    )
    with torch.no_grad():
        o.copy_(_from_host(out["o"], o.device))
        if state_pool is not None:
            rows = state_indices[state_indices >= 0].long()
            if rows.numel():
                new = _from_host(out["final_state"], state_pool.device)
                state_pool[rows] = new[rows]
        elif final_state is not None:
            final_state.copy_(_from_host(out["final_state"], final_state.device))
        if checkpoints is not None and "checkpoints" in out:
            ck = _from_host(out["checkpoints"], checkpoints.device)
            checkpoints[: ck.shape[0]].copy_(ck)


def _native_backend_for_host(backend: str) -> None:
    """A CUDA or wgpu selection name with CPU tensors is the caller's error: say so plainly."""
    name = backend.strip().split(":", 1)[0]
    if name in ("cuda", "wgpu"):
        raise ValueError(
            f"invalid argument `backend`: expected auto or a CPU selection name (cpu, "
            f"cpu:reference, cpu:chunked, cpu:chunked-f64, cpu:segmented) for CPU tensors, "
            f"got {backend!r} "
            f"(move the tensors to the device, or pass backend='auto')"
        )


def _dispatch_stack_empty() -> bool:
    n = getattr(torch._C, "_len_torch_dispatch_stack", None)
    return n is None or n() == 0


def call_eager(
    name: str, op: str, mode: str, tensors: tuple, scalars: tuple, backend: str,
    max_seqlen: Optional[int] = None,
) -> None:
    """Runs op ``name`` for the public wrappers (``deltarule.gdn_prefill``, ...): straight into
    the implementation for plain CUDA or CPU tensors in eager mode, through
    ``torch.ops.deltarule`` when tracing or compiling, under a dispatch mode, or for tensor
    subclasses (fake, functional). PyTorch's custom-op dispatch costs ~60 us per call (measured
    on an H200 host), as long as a short prefill's kernels. Mutated tensors get their version
    counters bumped as the dispatcher would (where autograd tracks them)."""
    q = tensors[0]
    if (type(q) is torch.Tensor and q.device.type in ("cuda", "cpu")
            and not torch.compiler.is_compiling()
            and _dispatch_stack_empty()):
        _run(op, mode, tensors, scalars, backend, max_seqlen)
        if torch.is_grad_enabled() and not torch.is_inference_mode_enabled():
            for i in (6, 8, 9, 11):  # o, final_state, state_pool, checkpoints
                t = tensors[i]
                if t is not None and not t.is_inference():
                    torch.autograd.graph.increment_version(t)
        return
    getattr(torch.ops.deltarule, name)(*tensors, *scalars, backend, max_seqlen)


def _make(name: str, op: str, mode: str):
    qualname = f"deltarule::{name}"

    @torch.library.custom_op(qualname, mutates_args=MUTATES)
    def impl(
        q: Tensor,
        k: Tensor,
        v: Tensor,
        g: Tensor,
        beta: Tensor,
        cu_seqlens: Tensor,
        o: Tensor,
        initial_state: Optional[Tensor],
        final_state: Optional[Tensor],
        state_pool: Optional[Tensor],
        state_indices: Optional[Tensor],
        checkpoints: Optional[Tensor],
        A_log: Optional[Tensor],
        dt_bias: Optional[Tensor],
        scale: float,
        use_qk_l2norm: bool,
        gate: str,
        lower_bound: float,
        beta_mode: str,
        state_layout: str,
        checkpoint_every: int,
        backend: str,
        max_seqlen: Optional[int] = None,
    ) -> None:
        _run(
            op, mode,
            (q, k, v, g, beta, cu_seqlens, o, initial_state, final_state, state_pool,
             state_indices, checkpoints, A_log, dt_bias),
            (scale, use_qk_l2norm, gate, lower_bound, beta_mode, state_layout, checkpoint_every),
            backend,
            max_seqlen,
        )

    @impl.register_fake
    def fake(
        q, k, v, g, beta, cu_seqlens, o, initial_state, final_state, state_pool, state_indices,
        checkpoints, A_log, dt_bias, scale, use_qk_l2norm, gate, lower_bound, beta_mode,
        state_layout, checkpoint_every, backend, max_seqlen=None,
    ) -> None:
        _offsets.check_max_seqlen(max_seqlen)
        _spec.build_spec(
            op, mode, q, k, v, g, beta, cu_seqlens, o, initial_state, final_state, state_pool,
            state_indices, checkpoints, A_log, dt_bias, scale, use_qk_l2norm, gate, lower_bound,
            beta_mode, state_layout, checkpoint_every,
        )
        return None

    return impl


gdn_prefill = _make("gdn_prefill", "gdn", "prefill")
kda_prefill = _make("kda_prefill", "kda", "prefill")
gdn_decode = _make("gdn_decode", "gdn", "decode")
kda_decode = _make("kda_decode", "kda", "decode")

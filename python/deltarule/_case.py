"""Case files from PyTorch: ``save_case`` writes one op call (inputs, options and, optionally, the
outputs the caller's own kernel produced) as the safetensors case file of docs/case-format.md, so
``deltarule diff --case FILE`` replays it on every backend beside the caller's result.

The safetensors container is written here (8-byte little-endian header length, a JSON header, the
data); the ``safetensors`` package is not needed. Metadata values are strings.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any, Dict, Mapping, Optional, Tuple

from . import _spec

# case-format.md's names for the options the torch ops take
_GATE = {"log": "precomputed", "softplus": "softplus", "lower_bound": "lower_bound"}
_BETA = {"prob": "precomputed", "logit": "sigmoid", "sigmoid": "sigmoid", "logit2": "sigmoid2",
         "sigmoid2": "sigmoid2"}
_ST_DTYPE = {"f64": "F64", "f32": "F32", "bf16": "BF16", "f16": "F16", "i32": "I32", "i64": "I64"}
MAX_LABEL = 40


def _fail(arg: str, expected: str, got: Any) -> ValueError:
    return ValueError(f"invalid argument `{arg}`: expected {expected}, got {got}")


def check_label(label: str) -> str:
    """An observed label as the case reader takes it: 1 to 40 characters, no control characters,
    no surrounding spaces."""
    if (not isinstance(label, str) or not 1 <= len(label) <= MAX_LABEL or label.strip() != label
            or any(ord(c) < 32 or ord(c) == 127 for c in label)):
        raise _fail("observed_label", f"1 to {MAX_LABEL} characters without control characters "
                    "or surrounding spaces", repr(label))
    return label


def tensor_bytes(t: Any) -> Tuple[bytes, str, list]:
    """(little-endian bytes, safetensors dtype, shape) of a torch tensor, copied to the host."""
    import torch

    t = t.detach().contiguous().cpu()
    name = _spec.dtype_name(t)
    if name not in _ST_DTYPE:
        raise TypeError(f"invalid tensor dtype {t.dtype} for a case file")
    raw = t.view(torch.int16) if t.element_size() == 2 else t
    return raw.numpy().tobytes(), _ST_DTYPE[name], [int(x) for x in t.shape]


def write_safetensors(path: str, tensors: Mapping[str, Tuple[bytes, str, list]],
                      metadata: Mapping[str, str]) -> None:
    """Writes ``{name: (bytes, dtype, shape)}`` and string metadata as one safetensors file."""
    header: Dict[str, Any] = {}
    meta = {str(k): str(v) for k, v in metadata.items()}
    if meta:
        header["__metadata__"] = meta
    offset = 0
    for name, (data, dtype, shp) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shp),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * ((8 - len(raw) % 8) % 8)  # the data starts 8-byte aligned, as safetensors does
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for data, _, _ in tensors.values():
            f.write(data)


def read_safetensors(path: str) -> Tuple[Dict[str, str], Dict[str, Tuple[bytes, str, list]]]:
    """The metadata and ``{name: (bytes, dtype, shape)}`` of a safetensors file (for tests)."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {})
    data = blob[8 + n:]
    out = {}
    for name, e in header.items():
        a, b = e["data_offsets"]
        out[name] = (data[a:b], e["dtype"], e["shape"])
    return meta, out


def load_case(path: str) -> Tuple[Dict[str, str], Dict[str, Any]]:
    """The metadata and tensors (torch, on the CPU) of a case file."""
    import torch

    dt = {"F64": torch.float64, "F32": torch.float32, "BF16": torch.bfloat16,
          "F16": torch.float16, "I32": torch.int32, "I64": torch.int64}
    meta, raw = read_safetensors(path)
    out = {}
    for name, (data, dtype, shp) in raw.items():
        d = dt[dtype]
        if d in (torch.bfloat16, torch.float16):
            t = torch.frombuffer(bytearray(data), dtype=torch.int16).view(d) if data else \
                torch.empty(0, dtype=d)
        else:
            t = torch.frombuffer(bytearray(data), dtype=d) if data else torch.empty(0, dtype=d)
        out[name] = t.reshape(shp)
    return meta, out


def _flatten(name: str, t: Any, rank: int) -> Any:
    """fla's ``[B, T, ...]`` input as the ops' packed ``[B*T, ...]``."""
    if t is None or len(t.shape) == rank:
        return t
    if len(t.shape) == rank + 1:
        return t.reshape((t.shape[0] * t.shape[1],) + tuple(t.shape[2:]))
    raise _fail(name, f"a tensor of rank {rank} (packed) or {rank + 1} (fla's [B, T, ...])",
                list(t.shape))


def _observed(observed: Any) -> Dict[str, Any]:
    if observed is None:
        return {}
    if isinstance(observed, Mapping):
        got = dict(observed)
    elif isinstance(observed, (tuple, list)):
        got = dict(zip(("o", "final_state", "checkpoints"), observed))
    else:
        got = {"o": observed}
    unknown = set(got) - {"o", "final_state", "checkpoints"}
    if unknown:
        raise _fail("observed", "keys among o, final_state, checkpoints", sorted(unknown))
    return {k: v for k, v in got.items() if v is not None}


def save_case(
    path: str, op: str, q, k, v, g, beta, cu_seqlens=None, *, mode: str = "prefill",
    initial_state=None, state_pool=None, state_indices=None, A_log=None, dt_bias=None,
    scale: Optional[float] = None, use_qk_l2norm: bool = False, gate: str = "log",
    lower_bound: float = -5.0, beta_mode: str = "prob", state_layout: str = "vk",
    checkpoint_every: int = 0, observed: Any = None, observed_label: Optional[str] = None,
    metadata: Optional[Mapping[str, str]] = None,
) -> str:
    """Writes one call of ``torch.ops.deltarule.{op}_{mode}`` as a case file and returns ``path``.

    The tensors and options are the ops' (``deltarule.gdn_prefill`` and the others): packed
    ``[T, H, K]`` inputs with ``cu_seqlens`` (fla's ``[B, T, H, K]`` is taken too: B = 1 with
    ``cu_seqlens``, or B equal sequences without), dense ``initial_state`` or ``state_pool`` with
    ``state_indices``, ``A_log``/``dt_bias`` for in-kernel gates, ``checkpoint_every``. The call is
    validated as the ops validate it, so a file written here replays.

    ``observed``: the outputs the caller's own kernel produced for these inputs, stored as
    ``observed.o`` (``[T, HV, V]``; ``[B, T, HV, V]`` is flattened), ``observed.final_state``
    (dense ``[N, HV, ...]``, or the whole pool after the in-place update) and
    ``observed.checkpoints``; a dict with those keys, or the ``(o, final_state, checkpoints)``
    tuple the wrappers return. ``observed_label`` (metadata ``observed``, at most 40
    characters) names the kernel in ``deltarule diff``'s table. ``metadata``: extra string entries
    (provenance), kept by the readers."""
    import torch

    if op not in ("gdn", "kda"):
        raise _fail("op", "gdn or kda", repr(op))
    fla_batch = (int(q.shape[0]), int(q.shape[1])) if len(q.shape) == 4 else None
    q, k, v, beta = (_flatten(n, t, r) for n, t, r in
                     (("q", q, 3), ("k", k, 3), ("v", v, 3), ("beta", beta, 2)))
    g = _flatten("g", g, 2 if op == "gdn" else 3)
    T, _, K = (int(x) for x in q.shape)
    HV = int(v.shape[1])
    if cu_seqlens is None:  # one sequence, or fla's B equal sequences
        step = fla_batch[1] if fla_batch is not None and fla_batch[1] > 0 else max(T, 1)
        cu_seqlens = torch.arange(0, T + 1, step, dtype=torch.int64) if T else \
            torch.zeros(2, dtype=torch.int64)
    if dt_bias is not None:
        dt_bias = dt_bias.reshape(-1)
    if A_log is not None:
        A_log = A_log.reshape(-1)
    cpu = {
        "q": q, "k": k, "v": v, "g": g, "beta": beta, "cu_seqlens": cu_seqlens,
        "initial_state": state_pool if state_pool is not None else initial_state,
        "state_indices": state_indices, "A_log": A_log, "dt_bias": dt_bias,
    }
    cpu = {n: t.detach().contiguous().cpu() for n, t in cpu.items() if t is not None}
    N = int(cpu["cu_seqlens"].shape[0]) - 1
    S = (K, int(v.shape[2])) if state_layout == "kv" else (int(v.shape[2]), K)
    o = torch.empty((T, HV, int(v.shape[2])), dtype=torch.float32)
    ck = None
    cu_list = [int(x) for x in cpu["cu_seqlens"].tolist()]
    if checkpoint_every:
        sdt = state_pool.dtype if state_pool is not None else torch.float32
        ck = torch.empty((_spec.checkpoint_count(cu_list, checkpoint_every), HV) + S, dtype=sdt)
    pool = state_pool is not None
    spec = _spec.build_spec(
        op, mode, cpu["q"], cpu["k"], cpu["v"], cpu["g"], cpu["beta"], cpu["cu_seqlens"], o,
        None if pool else cpu.get("initial_state"),
        None if pool else torch.empty((N, HV) + S, dtype=torch.float32),
        cpu.get("initial_state") if pool else None, cpu.get("state_indices"), ck,
        cpu.get("A_log"), cpu.get("dt_bias"), float(scale or 0.0), use_qk_l2norm, gate,
        lower_bound, beta_mode, state_layout, checkpoint_every,
    )
    _spec.validate_cu_seqlens(cu_list, T)
    if pool:
        _spec.validate_state_indices([int(x) for x in cpu["state_indices"].tolist()],
                                     spec.pool_rows)

    meta: Dict[str, str] = {str(a): str(b) for a, b in (metadata or {}).items()}
    meta.update({
        "op": op, "mode": mode, "gate": _GATE[gate], "beta": _BETA[beta_mode],
        "use_qk_l2norm": "true" if use_qk_l2norm else "false",
        "scale": repr(float(scale) if scale else 1.0 / math.sqrt(K)),
        "state_layout": state_layout,
    })
    if gate == "lower_bound":
        meta["lower_bound"] = repr(float(lower_bound))
    if checkpoint_every:
        meta["checkpoint_every"] = str(int(checkpoint_every))
    tensors = {n: tensor_bytes(cpu[n]) for n in
               ("q", "k", "v", "g", "beta", "cu_seqlens", "initial_state", "state_indices",
                "A_log", "dt_bias") if n in cpu}
    obs = _observed(observed)
    if obs:
        want = {"o": (T, HV, int(v.shape[2])),
                "final_state": ((spec.pool_rows if pool else N), HV) + S,
                "checkpoints": (None if ck is None else tuple(ck.shape))}
        for name, t in obs.items():
            if name == "o":
                t = _flatten("observed.o", t, 3)
            if name == "checkpoints" and want["checkpoints"] is not None:
                t = t[: want["checkpoints"][0]]
            if want[name] is None or tuple(t.shape) != want[name]:
                raise _fail(f"observed.{name}", f"shape {list(want[name] or ())}"
                            if want[name] else "none without checkpoint_every", list(t.shape))
            if not t.is_floating_point():
                raise TypeError(f"invalid argument `observed.{name}`: expected a float tensor, "
                                f"got {t.dtype}")
            tensors[f"observed.{name}"] = tensor_bytes(t)
        meta["observed"] = check_label(observed_label or "observed")
    elif observed_label is not None:
        raise _fail("observed_label", "a label only with observed outputs", repr(observed_label))
    write_safetensors(path, tensors, meta)
    return path


"""Validation of device-resident offsets and indices, with a versioned cache (docs/spec.md).

Reading ``cu_seqlens`` or ``state_indices`` on the host costs a device-to-host copy and a stream
synchronisation, so each distinct tensor is validated once and the result cached under
(data pointer, length, ``tensor._version``), for that tensor object only: a new tensor that the
allocator placed at a freed one's address (version 0 again, other contents) is read afresh. A
tensor created under ``torch.inference_mode()`` has no version counter (reading ``_version``
raises): such a tensor is revalidated against its contents on every eager call, so an in-place
refill is never missed. Under CUDA-graph capture nothing is read
(the kernels build their chunk tables on the device from the current contents at replay).
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from typing import Any, Callable, List, Optional, Tuple

from . import _spec

_CAPACITY = 64
# (version, contents, derive(contents), the tensor): what a call needs from the contents is
# computed once; the entry holds only for the tensor object it was read from
_cache: "OrderedDict[Tuple[Any, ...], Tuple[int, List[int], Any, Any]]" = OrderedDict()
stats = {"hits": 0, "reads": 0}


def _version(t: Any) -> Optional[int]:
    try:
        return int(t._version)
    except (RuntimeError, AttributeError):
        return None  # an inference tensor: no version counter


def _dead() -> None:
    return None


def capturing() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_current_stream_capturing())
    except Exception:  # pragma: no cover - torch absent or no CUDA
        return False


def checked_contents(
    kind: str,
    t: Any,
    check: Callable[[List[int]], None],
    extra: Tuple[Any, ...] = (),
    derive: Callable[[List[int]], Any] = lambda c: None,
) -> Tuple[Optional[List[int]], Any]:
    """Returns the validated contents of ``t`` and ``derive(contents)``, cached with them (None,
    None under graph capture)."""
    if capturing():
        return None, None
    key = (kind, int(t.data_ptr()), int(t.numel()), str(t.device)) + extra
    version = _version(t)
    if version is not None:
        hit = _cache.get(key)
        if hit is not None and hit[0] == version and hit[3]() is t:
            _cache.move_to_end(key)
            stats["hits"] += 1
            return hit[1], hit[2]
    contents = [int(x) for x in t.tolist()]
    stats["reads"] += 1
    check(contents)
    derived = derive(contents)
    if version is not None:
        try:
            ref = weakref.ref(t)
        except TypeError:  # an object without weak references: never reused from the cache
            ref = _dead
        _cache[key] = (version, contents, derived, ref)
        _cache.move_to_end(key)
        while len(_cache) > _CAPACITY:
            _cache.popitem(last=False)
    return contents, derived


def validate(
    spec: "_spec.Spec", cu_seqlens: Any, state_indices: Any, checkpoints: Any
) -> Optional[int]:
    """Validates offsets (and indices and the checkpoint buffer size) for one call; returns the
    selection's hint ``longest_hint(cu_seqlens)``, cached with the offsets (None under graph
    capture)."""
    cu, hint = checked_contents(
        "cu", cu_seqlens, lambda c: _spec.validate_cu_seqlens(c, spec.T), (spec.T,), longest_hint
    )
    if state_indices is not None:
        checked_contents(
            "idx",
            state_indices,
            lambda i: _spec.validate_state_indices(i, spec.pool_rows),
            (spec.pool_rows,),
        )
    if checkpoints is not None:
        rows = int(checkpoints.shape[0])
        # the exact count when the offsets were read, else the bound floor(T / every)
        need = (
            _spec.checkpoint_count(cu, spec.checkpoint_every)
            if cu is not None
            else spec.T // spec.checkpoint_every
        )
        if rows < need:
            raise ValueError(
                f"invalid argument `checkpoints`: expected at least {need} rows "
                f"(floor(len/{spec.checkpoint_every}) per sequence), got {rows}"
            )
    return hint


def longest_hint(cu: Optional[List[int]]) -> Optional[int]:
    """The selection's hint for offsets ``cu``: the longest sequence's tokens rounded up to a
    power of two and capped at T, or None when the offsets were not read (graph capture). Never
    below the true length, and on the same side of every power-of-two bound (the rule it feeds
    fuses one-chunk sequences, at most 64 tokens); few distinct values keep the workspace-size
    cache small when lengths vary from call to call."""
    if cu is None:
        return None
    return round_hint(max((b - a for a, b in zip(cu, cu[1:])), default=0), cu[-1])


def round_hint(m: int, T: int) -> int:
    """A longest-sequence length ``m`` rounded up to a power of two and capped at ``T`` (0 for
    none): the value ``longest_hint`` derives and a caller's ``max_seqlen`` is turned into."""
    return 0 if m <= 0 else min(1 << (m - 1).bit_length(), T)


def check_max_seqlen(declared: Any) -> None:
    """A caller's ``max_seqlen`` is None or a non-negative int."""
    if declared is not None and (
        isinstance(declared, bool) or not isinstance(declared, int) or declared < 0
    ):
        raise ValueError(
            f"invalid argument `max_seqlen`: expected a non-negative int (the longest sequence's "
            f"tokens) or None, got {declared!r}"
        )


def resolve_hint(read: Optional[int], declared: Optional[int], T: int) -> Optional[int]:
    """The selection's hint: the one read from the offsets (``longest_hint``) when they
    were read, else the caller's ``max_seqlen`` rounded the same way; a declared value below the
    read one is an error."""
    if declared is None:
        return read
    check_max_seqlen(declared)
    given = round_hint(declared, T)
    if read is None:
        return given
    if given < read:
        raise ValueError(
            f"invalid argument `max_seqlen`: expected at least the longest sequence of "
            f"`cu_seqlens`, which has more than {given} tokens, got {declared}"
        )
    return read


def clear() -> None:
    _cache.clear()

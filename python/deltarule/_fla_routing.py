"""Program routing for ``deltarule.fla``: finding and rebinding a running program's fla calls.

``bindings()`` lists every place a loaded program binds one of fla's delta-rule functions (fla's
modules, every loaded module that imported them, transformers' modeling modules and their torch
fallbacks, vLLM's vendored copies, layer instances); ``install()`` rebinds them to
``deltarule.fla``'s functions, ``reroute()`` to any function, and ``uninstall()`` (or leaving the
returned :class:`Installation`'s ``with`` block) restores them. Everything here is re-exported by
``deltarule.fla``, which holds the ``backend`` selection name that ``install()`` sets.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
import types
from typing import Any, Callable, Dict, List, Optional, Tuple

from . import fla as _fla

# transformers' torch fallbacks that stand for an fla function (the modules bind them under
# these names; older versions bind the fla function itself on the layer instance)
_TRANSFORMERS_NAMES = {
    "torch_chunk_gated_delta_rule": "chunk_gated_delta_rule",
    "torch_recurrent_gated_delta_rule": "fused_recurrent_gated_delta_rule",
    "chunk_kimi_delta_attention": "chunk_kda",
    "recurrent_kimi_delta_attention": "fused_recurrent_kda",
}
_INSTANCE_NAMES = {
    "chunk_gated_delta_rule": "chunk_gated_delta_rule",
    "recurrent_gated_delta_rule": "fused_recurrent_gated_delta_rule",
    "fused_recurrent_gated_delta_rule": "fused_recurrent_gated_delta_rule",
    "chunk_kda": "chunk_kda",
    "fused_recurrent_kda": "fused_recurrent_kda",
}
_FLA_MODULES = {
    "chunk_gated_delta_rule": ("fla.ops.gated_delta_rule",),
    "fused_recurrent_gated_delta_rule": ("fla.ops.gated_delta_rule",),
    "chunk_kda": ("fla.ops.kda",),
    "fused_recurrent_kda": ("fla.ops.kda",),
    "fused_gdn_gate": ("fla.ops.gated_delta_rule.gate",),
    "fused_kda_gate": ("fla.ops.kda.gate",),
}
_VLLM_MODULES = {
    "chunk_gated_delta_rule": ("vllm.model_executor.layers.fla.ops",),
    "fused_recurrent_gated_delta_rule": ("vllm.model_executor.layers.fla.ops",),
    "chunk_kda": ("vllm.model_executor.layers.fla.ops.kda",),
    "fused_recurrent_kda": ("vllm.model_executor.layers.fla.ops.kda",),
    "fused_kda_gate": ("vllm.model_executor.layers.fla.ops.kda",),
}


def _adapter(name: str, target: Callable) -> Callable:
    """``target`` (fla-named) as a drop-in for a binding that passes extra keywords (transformers'
    layers pass their ``**kwargs``): keywords the target does not name are dropped, as
    transformers' own wrapper drops them for fla."""
    params = inspect.signature(_fla.FUNCTIONS[name]).parameters
    known = {p for p, d in params.items() if d.kind is not inspect.Parameter.VAR_KEYWORD}

    @functools.wraps(_fla.FUNCTIONS[name])
    def call(*args, **kwargs):
        kwargs = {key: val for key, val in kwargs.items() if key in known}
        return target(*args, **kwargs)

    call._deltarule_fla = name  # type: ignore[attr-defined]
    return call


def _transformers_target(value: Any, attr: str) -> Optional[str]:
    """The fla function a transformers binding stands for, or None."""
    if type(value) is not types.FunctionType:
        return None
    mine = getattr(value, "_deltarule_fla", None)
    if mine:
        return mine
    try:
        cv = inspect.getclosurevars(value).nonlocals
    except (TypeError, ValueError):
        cv = {}
    if cv.get("package") == "fla" and cv.get("func_name") in _fla._DELTA_RULE:
        return cv["func_name"]
    name = getattr(value, "__name__", "")
    if attr in _TRANSFORMERS_NAMES and name == attr:
        return _TRANSFORMERS_NAMES[attr]
    return None


def _originals(table: Dict[str, Tuple[str, ...]], do_import: bool) -> Dict[int, Tuple[str, Any]]:
    """{id(function): (fla name, function)} of the functions named in ``table``."""
    out: Dict[int, Tuple[str, Any]] = {}
    for name, mods in table.items():
        for m in mods:
            mod = sys.modules.get(m)
            if mod is None and do_import:
                try:
                    mod = importlib.import_module(m)
                except Exception:  # noqa: BLE001 - absent or broken (no triton, no GPU)
                    mod = None
            f = getattr(mod, name, None) if mod is not None else None
            if f is not None and not hasattr(f, "_deltarule_fla"):
                out[id(f)] = (name, f)
    return out


def bindings(model: Any = None, *, fla: bool = True, transformers: bool = True,
             vllm: Optional[bool] = None) -> List[Tuple[Any, str, str, Any]]:
    """Every place a loaded program binds one of these functions: ``(owner, attribute, fla name,
    current value)`` for module attributes identical to fla's (or vLLM's) functions,
    transformers' modeling bindings, and (with ``model``) layer instances' attributes."""
    use_vllm = vllm if vllm is not None else "vllm" in sys.modules
    orig: Dict[int, Tuple[str, Any]] = {}
    if fla:
        orig.update(_originals(_FLA_MODULES, do_import=True))
    if use_vllm:
        orig.update(_originals(_VLLM_MODULES, do_import=bool(vllm)))
    found: List[Tuple[Any, str, str, Any]] = []
    seen = set()
    for mname, mod in list(sys.modules.items()):
        if mod is None or mname.startswith("deltarule"):
            continue
        tf = transformers and mname.startswith("transformers.models.")
        try:
            items = list(vars(mod).items())
        except TypeError:
            continue
        for attr, value in items:
            target = None
            hit = orig.get(id(value))
            if hit is not None and hit[1] is value:
                target = hit[0]
            elif type(value) is not types.FunctionType:
                continue
            elif getattr(value, "_deltarule_fla", None) in _fla.FUNCTIONS:
                target = value._deltarule_fla
            elif tf:
                target = _transformers_target(value, attr)
            if target is not None and (id(mod), attr) not in seen:
                seen.add((id(mod), attr))
                found.append((mod, attr, target, value))
    if model is not None and hasattr(model, "modules"):
        for m in model.modules():
            for attr, target in _INSTANCE_NAMES.items():
                value = m.__dict__.get(attr)
                if callable(value):
                    found.append((m, attr, target, value))
    return found


class Installation:
    """What ``install()`` patched; ``uninstall()`` or leaving a ``with`` block restores it."""

    def __init__(self, patched: List[Tuple[Any, str, Any, bool]], previous_backend: str):
        self.patched = patched
        self._previous_backend = previous_backend

    @property
    def names(self) -> List[str]:
        return [f"{getattr(o, '__name__', type(o).__name__)}.{a}" for o, a, _, _ in self.patched]

    def uninstall(self) -> None:
        for owner, attr, old, was_attr in reversed(self.patched):
            if isinstance(owner, type(sys)) or was_attr:
                setattr(owner, attr, old)
            else:
                owner.__dict__.pop(attr, None)
        self.patched = []
        _fla.backend = self._previous_backend
        if _INSTALLED and _INSTALLED[-1] is self:
            _INSTALLED.pop()

    def __enter__(self) -> "Installation":
        return self

    def __exit__(self, *exc) -> None:
        self.uninstall()


_INSTALLED: List[Installation] = []


def _patch(found, make: Callable[[str, Any], Callable]) -> List[Tuple[Any, str, Any, bool]]:
    patched = []
    for owner, attr, target, value in found:
        new = make(target, value)
        if isinstance(owner, type(sys)):
            setattr(owner, attr, new)
            patched.append((owner, attr, value, True))
        else:
            owner.__dict__[attr] = new
            patched.append((owner, attr, value, False))
    return patched


def install(model: Any = None, *, backend_name: str = "auto", fla: bool = True,
            transformers: bool = True, vllm: Optional[bool] = None) -> Installation:
    """Routes the program's fla calls to deltarule: fla's own modules (when fla imports), every
    loaded module that bound fla's functions, transformers' modeling modules (their fla bindings
    and torch fallbacks), vLLM's vendored copies (``vllm=None``: when vLLM is already imported),
    and with ``model`` the layer instances that hold the functions as attributes. Returns an
    :class:`Installation` (a context manager; ``uninstall()`` restores everything).
    ``backend_name``: the selection name the calls use (``auto``, ``cuda:small-bh``, ...)."""
    previous = _fla.backend
    _fla.backend = backend_name
    return reroute(lambda target, value: _adapter(target, _fla.FUNCTIONS[target])
                   if target in _fla._DELTA_RULE else _fla.FUNCTIONS[target], model, fla=fla,
                   transformers=transformers, vllm=vllm, _previous_backend=previous)


def reroute(make: Callable[[str, Any], Callable], model: Any = None, *, fla: bool = True,
            transformers: bool = True, vllm: Optional[bool] = None,
            _previous_backend: Optional[str] = None) -> Installation:
    """Rebinds every place :func:`bindings` finds to ``make(fla name, current value)`` (for
    example transformers' torch fallbacks, or fla's own functions, to compare paths in one
    process). Returns an :class:`Installation` that restores them."""
    found = bindings(model, fla=fla, transformers=transformers, vllm=vllm)
    inst = Installation(_patch(found, make),
                        _fla.backend if _previous_backend is None else _previous_backend)
    _INSTALLED.append(inst)
    return inst


def uninstall() -> None:
    """Undoes every ``install()`` still in effect, last first."""
    while _INSTALLED:
        _INSTALLED[-1].uninstall()

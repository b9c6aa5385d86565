"""Capture for ``deltarule.fla``: saving chosen calls of a running program as case files.

``capture()`` wraps the delta-rule functions the program has bound (through
``deltarule.fla.bindings``) and writes the chosen calls, with the bound function's own result as
the observed output. Re-exported by ``deltarule.fla``.
"""

from __future__ import annotations

import functools
import inspect
import os
import threading
from typing import Any, Callable, List, Optional, Tuple

from . import _case
from . import fla as _fla


class Capture:
    """Saves chosen calls of the bound functions as case files (see :func:`capture`)."""

    def __init__(self, directory: str, layer: Any, call: int, count: int, op: Optional[str],
                 model: Any, label: Optional[str], prefix: str):
        self.directory = directory
        self.call = int(call)
        self.count = int(count)
        self.op = op
        self.label = label
        self.prefix = prefix
        self.paths: List[str] = []
        self.seen = 0
        self._model = model
        self._layer_name = layer if isinstance(layer, str) else None
        if isinstance(layer, str):
            if model is None:
                raise _fla._invalid("capture", "model", "the model whose submodule `layer` names",
                                    None)
            layer = model.get_submodule(layer)
        self._layer = layer
        self._active = threading.local()
        self._hooks: List[Any] = []
        self._patched: List[Tuple[Any, str, Any, bool]] = []

    def _in_layer(self) -> bool:
        return self._layer is None or getattr(self._active, "depth", 0) > 0

    def _wrap(self, target: str, original: Callable) -> Callable:
        params = inspect.signature(_fla.FUNCTIONS[target]).parameters
        known = {p for p, d in params.items() if d.kind is not inspect.Parameter.VAR_KEYWORD}

        @functools.wraps(original)
        def wrapped(*args, **kwargs):
            op = "gdn" if "gated_delta_rule" in target else "kda"
            if not self._in_layer() or (self.op is not None and self.op != op) or \
                    len(self.paths) >= self.count:
                return original(*args, **kwargs)
            index = self.seen
            self.seen += 1
            if index < self.call:
                return original(*args, **kwargs)
            # the inputs as they are before the call (a pool is updated in place)
            fkw = {key: val for key, val in kwargs.items() if key in known}
            with _fla._torch().no_grad():  # a copy of the inputs: gradients do not matter here
                call = _fla.prepare(target, *args, **fkw)
                case_kw = _fla._case_args(call)
            result = original(*args, **kwargs)
            label = self.label or _label_of(original)
            os.makedirs(self.directory, exist_ok=True)
            stem = f"{self.prefix}{target}"
            if self._layer_name:
                stem += "_" + self._layer_name.replace(".", "-")
            path = os.path.join(self.directory, f"{stem}_call{index}.safetensors")
            _case.save_case(path, observed=_fla._observed(call, result), observed_label=label,
                            metadata={"source": f"deltarule.fla.capture({target})",
                                      "captured_call": str(index),
                                      **({"layer": self._layer_name} if self._layer_name
                                         else {})},
                            **case_kw)
            self.paths.append(path)
            return result

        wrapped._deltarule_fla = target  # type: ignore[attr-defined]
        return wrapped

    def __enter__(self) -> "Capture":
        found = [f for f in _fla.bindings(self._model) if f[2] in _fla._DELTA_RULE]
        if not found:
            raise RuntimeError(
                "deltarule.fla.capture: no binding of chunk_gated_delta_rule, "
                "fused_recurrent_gated_delta_rule, chunk_kda or fused_recurrent_kda is loaded "
                "(import the model's modules, or fla, first)")
        self._patched = _fla._patch(found, lambda target, value: self._wrap(target, value))
        if self._layer is not None:
            def pre(_m, _a):
                self._active.depth = getattr(self._active, "depth", 0) + 1

            def post(_m, _a, _o):
                self._active.depth = getattr(self._active, "depth", 1) - 1

            self._hooks = [self._layer.register_forward_pre_hook(pre),
                           self._layer.register_forward_hook(post)]
        return self

    def __exit__(self, *exc) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks = []
        _fla.Installation(self._patched, _fla.backend).uninstall()
        self._patched = []


def _label_of(fn: Callable) -> str:
    """A short observed label for the function a capture wrapped."""
    target = getattr(fn, "_deltarule_fla", None)
    if target:
        return f"deltarule-{_fla.backend}"[: _case.MAX_LABEL]
    mod = getattr(fn, "__module__", "") or ""
    if mod.startswith("fla"):
        return "fla"
    if mod.startswith("vllm"):
        return "vllm-fla"
    if mod.startswith("transformers"):
        try:
            impl = inspect.getclosurevars(fn).nonlocals.get("implementation")
        except (TypeError, ValueError):
            impl = None
        if impl is not None and getattr(impl, "__module__", "").startswith("fla"):
            return "fla"
        return "transformers-torch"
    return (getattr(fn, "__name__", None) or "observed")[: _case.MAX_LABEL]


def capture(directory: str, *, layer: Any = None, call: int = 0, count: int = 1,
            op: Optional[str] = None, model: Any = None, label: Optional[str] = None,
            prefix: str = "") -> Capture:
    """A context manager that saves the ``call``-th call (0-based; then ``count`` calls) of the
    delta-rule functions the program has bound (fla's, transformers' fallbacks, or deltarule's
    after ``install()``), made inside ``layer`` (a module, or its name in ``model``; None: any
    call), optionally only of ``op`` (``gdn``/``kda``), as case files in ``directory`` with the
    function's own result as the observed output (labelled ``label``, else after the function:
    ``fla``, ``transformers-torch``, ``deltarule-auto``, ...). ``.paths`` lists the files."""
    return Capture(directory, layer, call, count, op, model, label, prefix)

"""deltarule: gated delta-rule attention (Gated DeltaNet, Kimi Delta Attention) for PyTorch.

The ops ``torch.ops.deltarule.{gdn,kda}_{prefill,decode}`` are registered when torch is
importable (the package itself does not depend on torch or link libtorch). See ``deltarule.ops``
for the op signature and ``deltarule.api`` for the friendly wrappers re-exported here.
``deltarule.fla`` has flash-linear-attention's functions on these ops (``deltarule.fla.install()``
routes an existing program's fla calls to them); ``deltarule.save_case`` writes one call as a case
file for ``deltarule diff``, and ``deltarule.capture`` saves chosen calls from a running model.
"""

from . import _spec, fla
from ._case import save_case
from ._spec import Spec, build_spec
from .fla import capture

__all__ = ["Spec", "build_spec", "torch_available", "fla", "save_case", "capture"]

try:  # the ops and wrappers need torch; validation does not
    import torch  # noqa: F401

    torch_available = True
except ImportError:  # pragma: no cover - exercised on the CI machine
    torch_available = False

if torch_available:
    from . import ops  # noqa: F401  (registers torch.ops.deltarule.*)
    from .api import (  # noqa: F401
        backends,
        gdn_decode,
        gdn_prefill,
        kda_decode,
        kda_prefill,
        reference,
    )

    __all__ += ["gdn_prefill", "kda_prefill", "gdn_decode", "kda_decode", "reference", "backends"]

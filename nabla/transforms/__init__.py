"""Function transforms (layer 4): vmap, autodiff, custom rules, compile, trace.

The transforms are importable from here as functions (``from nabla.transforms import
compile`` gives the function, as in the original; the module stays
``nabla.transforms.compile`` in ``sys.modules``)."""

from .autodiff import (
    grad,
    hessian,
    jacfwd,
    jacobian,
    jacrev,
    jvp,
    linear_transpose,
    linearize,
    value_and_grad,
    vjp,
)
from .compile import CompiledFunction, compile  # noqa: A004 - the transform's public name
from .control_flow import cond, fori_loop, scan, switch, while_loop
from .custom import (
    checkpoint,
    checkpoint_name,
    checkpoint_policies,
    custom_jvp,
    custom_vjp,
    remat,
)
from .trace import Trace, trace
from .vmap import vmap

__all__ = [
    "vmap",
    "vjp",
    "grad",
    "value_and_grad",
    "jvp",
    "linearize",
    "linear_transpose",
    "jacrev",
    "jacobian",
    "jacfwd",
    "hessian",
    "custom_vjp",
    "custom_jvp",
    "checkpoint",
    "checkpoint_policies",
    "checkpoint_name",
    "remat",
    "compile",
    "CompiledFunction",
    "trace",
    "Trace",
    "cond",
    "switch",
    "while_loop",
    "fori_loop",
    "scan",
]

"""Nabla: JAX-style transforms and a lazy, PyTorch-style Tensor on NumPy and MAX.

``import nabla as nb``. Public names only; see ``README.md`` and the package READMEs.
"""

from __future__ import annotations

import math as _math
import sys as _sys

from .core import pytree as _pytree
from .core.config import backend, get_backend_name, set_backend
from .core.device import CPU, Accelerator, Device, default_device, get_default_device
from .core.dtypes import (
    DType,
    bfloat16,
    default_dtype,
    float16,
    float32,
    float64,
    get_default_dtype,
    int8,
    int16,
    int32,
    int64,
    promote_types,
    uint8,
    uint16,
    uint32,
    uint64,
)
from .core.dtypes import bool_ as bool  # noqa: A001 - nb.bool as in the API
from .core.pytree import (
    register_pytree_node,
    tree_flatten,
    tree_leaves,
    tree_map,
    tree_reduce,
    tree_structure,
    tree_unflatten,
)
from .runtime.graph import GRAPH as _GRAPH
from .runtime.graph import ConcretizationError, backend_stats
from .runtime.display import visualize_sharding
from .runtime.tensor import Tensor, realize
from .ops import methods as _methods  # noqa: F401 - attaches Tensor operators
from .ops.base import Operation, OpError
from .ops.binary import (
    BinaryOperation,
    add,
    allclose,
    atan2,
    bitwise_and,
    bitwise_or,
    bitwise_xor,
    clip,
    div,
    equal,
    floor_div,
    fmod,
    greater,
    greater_equal,
    hypot,
    isclose,
    left_shift,
    logaddexp,
    less,
    less_equal,
    logical_and,
    logical_or,
    logical_xor,
    maximum,
    minimum,
    mod,
    mul,
    not_equal,
    pow,
    right_shift,
    sub,
    where,
)
from .backends import max_backend as _max_backend
from .backends.kernels import KernelError, KernelNotFoundError
from .ops.kernels import CustomKernelOp, ShapeDtype, call_custom_kernel, custom_op
from .ops.creation import (
    arange,
    asarray,
    constant,
    eye,
    from_dlpack,
    from_numpy,
    full,
    full_like,
    hann_window,
    linspace,
    ones,
    ones_like,
    tensor,
    tril,
    triu,
    zeros,
    zeros_like,
)
from .core.sharding import DeviceMesh, DimSpec, P, PartitionSpec, ShardingError, ShardingSpec
from .ops.collectives import (
    all_gather,
    all_reduce,
    all_to_all,
    axis_index,
    broadcast,
    pmean,
    ppermute,
    reduce_scatter,
    reshard,
    shard,
)
from .ops.indexing import gather, scatter, take, take_along_axis
from .ops.linalg import bmm, dot, einsum, matmul, outer, tensordot
from .ops.reduction import (
    ReduceOperation,
    all,
    any,
    argmax,
    argmin,
    argsort,
    argwhere,
    nonzero,
    cumprod,
    cumsum,
    logsoftmax,
    logsumexp,
    max,
    mean,
    min,
    minmax,
    prod,
    reduce_max,
    reduce_min,
    reduce_sum,
    softmax,
    sort,
    std,
    sum,
    top_k,
    var,
)
from .ops.unary import (
    UnaryOperation,
    abs,
    acos,
    asin,
    atan,
    atanh,
    bitwise_not,
    cast,
    ceil,
    cos,
    cosh,
    erf,
    exp,
    expm1,
    floor,
    gelu,
    is_inf,
    is_nan,
    isfinite,
    nan_to_num,
    log,
    log1p,
    log2,
    log10,
    logical_not,
    neg,
    reciprocal,
    relu,
    round,
    rsqrt,
    sigmoid,
    sign,
    silu,
    sin,
    sinh,
    softplus,
    sqrt,
    square,
    stop_gradient,
    tan,
    tanh,
    trunc,
)
from .ops.array_functions import (
    bincount,
    digitize,
    array_split,
    atleast_1d,
    atleast_2d,
    atleast_3d,
    count_nonzero,
    cross,
    diagonal,
    diff,
    fliplr,
    flipud,
    inner,
    kron,
    ravel,
    rot90,
    searchsorted,
    vdot,
)
from .ops.view import (
    broadcast_to,
    chunk,
    concatenate,
    diag,
    expand,
    flatten,
    flip,
    hstack,
    meshgrid,
    moveaxis,
    pad,
    permute,
    repeat,
    reshape,
    slice_tensor,
    slice_update,
    split,
    squeeze,
    stack,
    vstack,
    swap_axes,
    roll,
    tile,
    transpose,
    unbind,
    unsqueeze,
)

realize_all = realize
negate = neg
subtract = sub
multiply = mul
divide = div
power = pow
concat = concatenate
absolute = abs  # (NumPy's and JAX's names)
floor_divide = floor_div
remainder = mod
true_divide = div
cat = concatenate  # (PyTorch's name)
swapaxes = swap_axes
tree_util = _pytree

__version__ = "0.1.0"

from .core.debug import debug_infs, debug_nans
from .core.state import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from . import tree
from .ops import random
from .ops.random import (
    bernoulli,
    get_rng_state,
    manual_seed,
    rand,
    randint,
    randn,
    set_rng_state,
)
from .ops.random import normal_ as normal
from .ops.random import normal_ as gaussian
from .ops.random import uniform_ as uniform
from .transforms.autodiff import (
    backward,
    detach,
    grad,
    hessian,
    jacfwd,
    jacrev,
    jvp,
    linearize,
    value_and_grad,
    vjp,
)
from .transforms.shard_map import shard_map
from .transforms.vmap import vmap
from .ops.nn import avg_pool2d, conv2d, conv2d_transpose, max_pool2d
from .transforms.custom import checkpoint, custom_jvp, custom_vjp, remat
from .transforms.trace import Trace, communication_report, trace
from .transforms.compile import CompiledFunction, compile
from .transforms.control_flow import cond, fori_loop, scan, switch, while_loop
from . import config, distributed, lax, linalg, testing

# ``import nabla.random`` / ``from nabla.random import normal``, as ``jax.random``: the
# random functions live in the ops layer, and this is that module under its public path
_sys.modules[f"{__name__}.random"] = random
from . import _compat  # noqa: F401 - the original's module paths (nabla.core.trace, ...)

# Tensor methods that need transforms are attached here, above the layers they come from.
Tensor.backward = backward
Tensor.detach = detach


def _clear_caches() -> None:
    """Forget cached programs and compiled models (the original Nabla's ``nb._clear_caches``):
    later evaluations build them again; values already computed are kept."""
    _GRAPH.clear_cache()
    max_backend = _max_backend()
    if max_backend is not None:
        max_backend.clear_caches()


def __getattr__(name):
    # ``nb.nn`` is imported on first use: a script without modules or optimizers does not
    # pay for compiling the ~4000 lines of ``nabla.nn`` and importing safetensors (~50 ms of
    # a ~0.5 s first result without bytecode). ``import nabla.nn`` works as usual.
    if name == "nn":
        import importlib  # noqa: PLC0415 - only on the first ``nb.nn``

        return importlib.import_module(".nn", __name__)
    raise AttributeError(f"module 'nabla' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | {"nn"})


# NumPy's and JAX's names for functions above (``jnp.isnan`` etc.), and their constants
array = asarray
expand_dims = unsqueeze
isnan = is_nan
isinf = is_inf
arctan2 = atan2
arcsin, arccos, arctan, arctanh = asin, acos, atan, atanh
negative = neg
amax, amin = max, min
jit = compile  # (JAX's name: traced once per signature, as jax.jit)
inf = float("inf")
nan = float("nan")
pi = _math.pi
e = _math.e

__all__ = [
    "bincount",
    "digitize",
    "ravel",
    "atleast_1d",
    "atleast_2d",
    "atleast_3d",
    "fliplr",
    "flipud",
    "rot90",
    "diagonal",
    "count_nonzero",
    "diff",
    "vdot",
    "inner",
    "kron",
    "cross",
    "array_split",
    "searchsorted",
    "absolute",
    "allclose",
    "DeviceMesh",
    "diag",
    "DimSpec",
    "floor_divide",
    "from_numpy",
    "hstack",
    "isclose",
    "logaddexp",
    "fmod",
    "hypot",
    "manual_seed",
    "get_rng_state",
    "set_rng_state",
    "meshgrid",
    "nan_to_num",
    "P",
    "PartitionSpec",
    "rand",
    "randn",
    "remainder",
    "ShardingError",
    "ShardingSpec",
    "all_gather",
    "all_reduce",
    "all_to_all",
    "axis_index",
    "broadcast",
    "pmean",
    "ppermute",
    "reduce_scatter",
    "reshard",
    "shard",
    "shard_map",
    "tensor",
    "tensordot",
    "true_divide",
    "visualize_sharding",
    "Accelerator",
    "BinaryOperation",
    "CPU",
    "CompiledFunction",
    "ConcretizationError",
    "CustomKernelOp",
    "DType",
    "Device",
    "KernelError",
    "KernelNotFoundError",
    "OpError",
    "Operation",
    "ReduceOperation",
    "ShapeDtype",
    "Tensor",
    "Trace",
    "UnaryOperation",
    "abs",
    "acos",
    "add",
    "all",
    "any",
    "arange",
    "argmax",
    "argmin",
    "argsort",
    "argwhere",
    "nonzero",
    "asarray",
    "asin",
    "atan",
    "atan2",
    "atanh",
    "avg_pool2d",
    "backend",
    "backend_stats",
    "backward",
    "bernoulli",
    "bfloat16",
    "bitwise_and",
    "bitwise_not",
    "bitwise_or",
    "bitwise_xor",
    "bool",
    "broadcast_to",
    "cat",
    "call_custom_kernel",
    "cast",
    "ceil",
    "checkpoint",
    "chunk",
    "clip",
    "communication_report",
    "compile",
    "concat",
    "concatenate",
    "cond",
    "config",
    "constant",
    "conv2d",
    "conv2d_transpose",
    "cos",
    "cosh",
    "cumprod",
    "cumsum",
    "custom_jvp",
    "custom_op",
    "custom_vjp",
    "default_device",
    "default_dtype",
    "detach",
    "div",
    "divide",
    "dot",
    "einsum",
    "equal",
    "erf",
    "exp",
    "expand",
    "expm1",
    "eye",
    "flatten",
    "flip",
    "float16",
    "float32",
    "float64",
    "floor",
    "floor_div",
    "fori_loop",
    "from_dlpack",
    "full",
    "full_like",
    "gather",
    "sort",
    "take_along_axis",
    "top_k",
    "gaussian",
    "gelu",
    "get_backend_name",
    "get_default_device",
    "get_default_dtype",
    "grad",
    "greater",
    "greater_equal",
    "hann_window",
    "hessian",
    "int16",
    "int32",
    "int64",
    "int8",
    "is_inf",
    "is_nan",
    "jacfwd",
    "jacrev",
    "jvp",
    "left_shift",
    "linearize",
    "less",
    "less_equal",
    "linspace",
    "log",
    "log1p",
    "log2",
    "log10",
    "logical_and",
    "logical_not",
    "logical_or",
    "logical_xor",
    "logsoftmax",
    "logsumexp",
    "matmul",
    "max",
    "max_pool2d",
    "maximum",
    "mean",
    "min",
    "minimum",
    "minmax",
    "mod",
    "moveaxis",
    "mul",
    "multiply",
    "neg",
    "negate",
    "nn",
    "distributed",
    "testing",
    "linalg",
    "lax",
    "no_grad",
    "enable_grad",
    "set_grad_enabled",
    "is_grad_enabled",
    "debug_nans",
    "debug_infs",
    "normal",
    "not_equal",
    "ones",
    "ones_like",
    "outer",
    "bmm",
    "pad",
    "permute",
    "pow",
    "power",
    "prod",
    "promote_types",
    "randint",
    "random",
    "realize",
    "realize_all",
    "reciprocal",
    "reduce_max",
    "reduce_min",
    "reduce_sum",
    "register_pytree_node",
    "relu",
    "remat",
    "repeat",
    "reshape",
    "right_shift",
    "round",
    "rsqrt",
    "scan",
    "scatter",
    "set_backend",
    "sigmoid",
    "sign",
    "silu",
    "sin",
    "sinh",
    "slice_tensor",
    "slice_update",
    "softmax",
    "softplus",
    "split",
    "sqrt",
    "square",
    "squeeze",
    "stack",
    "std",
    "stop_gradient",
    "sub",
    "subtract",
    "sum",
    "swap_axes",
    "swapaxes",
    "switch",
    "take",
    "tan",
    "tanh",
    "roll",
    "tile",
    "trace",
    "transpose",
    "tree_flatten",
    "tree_leaves",
    "tree_map",
    "tree_reduce",
    "tree_structure",
    "tree_unflatten",
    "tree",
    "tree_util",
    "tril",
    "triu",
    "trunc",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "unbind",
    "uniform",
    "unsqueeze",
    "value_and_grad",
    "var",
    "vjp",
    "vmap",
    "vstack",
    "where",
    "while_loop",
    "zeros",
    "zeros_like",
    "array",
    "expand_dims",
    "isnan",
    "isinf",
    "isfinite",
    "arctan2",
    "arcsin",
    "arccos",
    "arctan",
    "arctanh",
    "negative",
    "amax",
    "amin",
    "jit",
    "inf",
    "nan",
    "pi",
    "e",
]

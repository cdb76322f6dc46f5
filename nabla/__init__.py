"""Nabla: JAX-style transforms and a lazy, PyTorch-style Tensor on NumPy and MAX.

``import nabla as nb``. Public names only; see ``README.md`` and the package READMEs.
"""

from __future__ import annotations

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
)
from .core.dtypes import bool_ as bool  # noqa: A001 - nb.bool as in the API
from .core.pytree import (
    register_pytree_node,
    tree_flatten,
    tree_leaves,
    tree_map,
    tree_structure,
    tree_unflatten,
)
from .runtime.graph import backend_stats
from .runtime.tensor import Tensor, realize
from .ops import methods as _methods  # noqa: F401 - attaches Tensor operators
from .ops.base import Operation, OpError
from .ops.binary import (
    BinaryOperation,
    add,
    atan2,
    bitwise_and,
    bitwise_or,
    bitwise_xor,
    clip,
    div,
    equal,
    floor_div,
    greater,
    greater_equal,
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
    sub,
    where,
)
from .ops.creation import (
    arange,
    asarray,
    constant,
    eye,
    from_dlpack,
    full,
    full_like,
    hann_window,
    linspace,
    ones,
    ones_like,
    tril,
    triu,
    zeros,
    zeros_like,
)
from .ops.indexing import gather, scatter, take
from .ops.linalg import dot, einsum, matmul, outer
from .ops.reduction import (
    ReduceOperation,
    all,
    any,
    argmax,
    argmin,
    cumsum,
    logsoftmax,
    logsumexp,
    max,
    mean,
    min,
    prod,
    reduce_max,
    reduce_min,
    reduce_sum,
    softmax,
    std,
    sum,
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
    log,
    log1p,
    log2,
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
from .ops.view import (
    broadcast_to,
    chunk,
    concatenate,
    expand,
    flatten,
    flip,
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
    swap_axes,
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
swapaxes = swap_axes
tree_util = _pytree

__version__ = "0.1.0"

from .core.state import no_grad
from .ops import random
from .ops.random import bernoulli, randint
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
    value_and_grad,
    vjp,
)
from .transforms.vmap import vmap
from .ops.nn import avg_pool2d, conv2d, conv2d_transpose, max_pool2d
from .transforms.custom import checkpoint, custom_jvp, custom_vjp, remat
from .transforms.trace import Trace, trace
from .transforms.compile import CompiledFunction, compile

# Tensor methods that need transforms are attached here, above the layers they come from.
Tensor.backward = backward
Tensor.detach = detach

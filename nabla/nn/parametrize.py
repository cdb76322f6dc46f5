"""PyTorch's parametrizations (``torch.nn.utils.parametrize`` and
``torch.nn.utils.parametrizations``): a module's tensor computed from other tensors each
time it is read.

``register_parametrization(module, "weight", p)`` moves the parameter into
``module.parametrizations.weight`` (a :class:`ParametrizationList`), as ``original`` (or
``original0``, ``original1``, ... when ``p.right_inverse`` returns several), and from then
on reading ``module.weight`` computes ``p(original)`` (each further parametrization
applied to the result, in order). The originals are ordinary parameters of that child
module, so ``state_dict`` names them as PyTorch does
(``parametrizations.weight.original0``), optimizers train them, and ``grad``, ``vmap``
and ``compile`` see the computation, which reads them as pytree leaves. Assigning
``module.weight = value`` sets the originals through ``right_inverse``.

``weight_norm`` and ``spectral_norm`` are the two PyTorch models use most. Their ``dim``
counts in PyTorch's layout of the weight. For the layers that keep another layout here
(``Linear`` ``(in, out)``, ``Conv2d`` HWIO), it is mapped to the same axis of ours, so
``weight_norm(nn.Linear(...))`` normalizes each output unit's weights, as PyTorch's does.
"""

from __future__ import annotations

from ..ops import binary, linalg, reduction, unary, view
from ..ops._util import as_tensor
from ..ops.indexing import rebind
from ..ops.random import normal as _normal
from ..ops.random import split as _split
from ..runtime.tensor import Tensor
from ..transforms.autodiff import detach
from .layers import Conv2d, ConvTranspose1d, ConvTranspose2d, Linear
from .module import Module, ModuleDict, ModuleList

__all__ = [
    "ParametrizationList",
    "register_parametrization",
    "remove_parametrizations",
    "is_parametrized",
    "cached",
    "weight_norm",
    "spectral_norm",
]


class ParametrizationList(ModuleList):
    """The parametrizations of one tensor (items ``"0"``, ``"1"``, ...) and its originals
    (``original``, or ``original0``, ``original1``, ...). Calling it computes the tensor.

    Args:
        modules: the parametrizations, applied in order.
        original: the tensor they parametrize (kept as given, or through the first's
            ``right_inverse``).
    """

    def __init__(self, modules, original: Tensor):
        super().__init__(modules)
        first = self[0]
        value = first.right_inverse(original) if hasattr(first, "right_inverse") else original
        if isinstance(value, tuple | list):
            object.__setattr__(self, "_originals", len(value))
            for i, v in enumerate(value):
                self.register_parameter(f"original{i}", _trained_like(v, original))
        else:
            object.__setattr__(self, "_originals", 0)
            self.register_parameter("original", _trained_like(value, original))

    def originals(self) -> list:
        """The original tensors, in order.

        Returns:
            A list of tensors.
        """
        if self._originals:
            return [getattr(self, f"original{i}") for i in range(self._originals)]
        return [self.original]

    def forward(self):
        """The parametrized tensor: the first parametrization of the originals, then each
        further one of the result.

        Returns:
            The tensor.
        """
        items = list(self)
        value = items[0](*self.originals())
        for p in items[1:]:
            value = p(value)
        return value

    def right_inverse(self, value) -> None:
        """Set the originals so that the list computes ``value`` (through the
        parametrizations' ``right_inverse``, last first).

        Args:
            value: the tensor to represent.
        """
        for p in reversed(list(self)):
            if hasattr(p, "right_inverse"):
                value = p.right_inverse(value)
        values = value if isinstance(value, tuple | list) else [value]
        for orig, v in zip(self.originals(), values, strict=True):
            rebind(orig, detach(as_tensor(v).cast(orig.dtype)))


def _trained_like(value, original: Tensor) -> Tensor:
    t = detach(as_tensor(value).cast(original.dtype))
    t.requires_grad = getattr(original, "requires_grad", True)
    return t


def register_parametrization(
    module: Module, tensor_name: str, parametrization: Module, *, unsafe: bool = False
) -> Module:
    """Compute ``module.<tensor_name>`` by ``parametrization`` from now on (PyTorch's
    ``register_parametrization``; see the module's docstring). A second one on the same
    name applies to the first one's result.

    Args:
        module: the module.
        tensor_name: the name of a parameter (or buffer) of ``module``.
        parametrization: a module whose ``forward`` maps the original tensor(s) to the
            value; optionally with ``right_inverse``.
        unsafe: PyTorch's flag (skips its checks): accepted.

    Returns:
        ``module``.

    Raises:
        ValueError: when ``module`` has no such tensor.
    """
    del unsafe
    plists = module.__dict__["_modules"].get("parametrizations")
    if plists is not None and tensor_name in plists.__dict__["_modules"]:
        plists[tensor_name].append(parametrization)
        return module
    params, buffers = module.__dict__["_parameters"], module.__dict__["_buffers"]
    table = params if tensor_name in params else buffers if tensor_name in buffers else None
    if table is None or table[tensor_name] is None:
        raise ValueError(
            f"register_parametrization: {type(module).__name__} has no parameter or buffer "
            f"{tensor_name!r}"
        )
    original = table.pop(tensor_name)
    if plists is None:
        module.parametrizations = plists = ModuleDict()
    plists[tensor_name] = ParametrizationList([parametrization], original)
    return module


def is_parametrized(module: Module, tensor_name: str | None = None) -> bool:
    """Whether ``module`` has parametrizations (on ``tensor_name``, when given).

    Args:
        module: the module.
        tensor_name: a tensor's name, or None for any.

    Returns:
        A bool.
    """
    plists = module.__dict__["_modules"].get("parametrizations")
    if plists is None:
        return False
    return tensor_name is None or tensor_name in plists.__dict__["_modules"]


def remove_parametrizations(module: Module, tensor_name: str, leave_parametrized: bool = True):
    """Undo :func:`register_parametrization`: ``tensor_name`` becomes a parameter again,
    holding the parametrized value (``leave_parametrized=True``) or the single original.

    Args:
        module: the module.
        tensor_name: the parametrized tensor's name.
        leave_parametrized: keep the current value (default) rather than the original.

    Returns:
        ``module``.

    Raises:
        ValueError: when ``tensor_name`` is not parametrized, or ``leave_parametrized=False``
            with several originals.
    """
    if not is_parametrized(module, tensor_name):
        raise ValueError(
            f"remove_parametrizations: {type(module).__name__}.{tensor_name} is not parametrized"
        )
    plists = module.parametrizations
    plist = plists[tensor_name]
    if leave_parametrized:
        value = detach(plist())
    else:
        if plist._originals:
            raise ValueError(
                "remove_parametrizations: leave_parametrized=False needs a single original, "
                f"{tensor_name} has {plist._originals}"
            )
        value = detach(plist.original)
    del plists[tensor_name]
    if not plists.__dict__["_modules"]:
        del module.parametrizations
    value.requires_grad = True
    module.register_parameter(tensor_name, value)
    return module


class cached:  # noqa: N801 - PyTorch's name
    """PyTorch's ``parametrize.cached()`` context: accepted; each read computes the value
    (inside ``compile`` the trace computes it once per use anyway)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# ----------------------------------------------------------------------------- layouts
def _our_axis(module: Module, name: str, dim: int, ndim: int) -> int:
    """PyTorch's axis ``dim`` of ``module``'s tensor ``name`` as an axis of ours."""
    d = dim % ndim
    if name == "weight" and isinstance(module, Linear) and ndim == 2:
        return 1 - d  # (out, in) there, (in, out) here
    if name == "weight" and isinstance(module, Conv2d) and ndim == 4:
        return (3, 2, 0, 1)[d]  # OIHW there, HWIO here
    return d


def _norm_except(v: Tensor, axis: int | None) -> Tensor:
    """The 2-norm of ``v`` over every axis but ``axis`` (kept as size 1), or of all."""
    if axis is None:
        return unary.sqrt(reduction.sum(v * v))
    axes = tuple(i for i in range(v.ndim) if i != axis)
    return unary.sqrt(reduction.sum(v * v, axes, keepdims=True))


class _WeightNorm(Module):
    """``g v / |v|`` with the norm over every axis but ``axis`` (PyTorch's weight norm)."""

    def __init__(self, axis: int | None):
        super().__init__()
        self.axis = axis

    def forward(self, g, v):
        """The weight ``g v / |v|``."""
        return v * (g / _norm_except(v, self.axis))

    def right_inverse(self, weight):
        """``(|w|, w)``: the magnitude and the direction of ``weight``."""
        return _norm_except(weight, self.axis), weight


def weight_norm(module: Module, name: str = "weight", dim: int | None = 0) -> Module:
    """PyTorch's ``parametrizations.weight_norm``: ``module.<name>`` becomes ``g v / |v|``,
    the norm over every axis but ``dim``, with ``g`` (``original0``) and ``v``
    (``original1``) trained in its place, starting at the weight's norm and the weight.

    Args:
        module: the module.
        name: the weight's name (default ``"weight"``).
        dim: the axis kept, in PyTorch's layout of the weight (default 0: each output
            unit's weights; see the module's docstring); None normalizes the whole tensor.

    Returns:
        ``module``.
    """
    weight = getattr(module, name)
    axis = None if dim is None else _our_axis(module, name, dim, weight.ndim)
    return register_parametrization(module, name, _WeightNorm(axis))


class _SpectralNorm(Module):
    """``W / sigma(W)``, ``sigma`` the largest singular value of ``W`` as a matrix with
    axis ``axis`` first, estimated by power iteration on the buffers ``_u`` and ``_v``
    (updated in place while training, as PyTorch's)."""

    def __init__(self, weight: Tensor, n_power_iterations: int, axis: int, eps: float, key):
        super().__init__()
        self.n_power_iterations, self.axis, self.eps = int(n_power_iterations), axis, eps
        if weight.ndim > 1:
            mat = detach(self._matrix(weight))
            h, w = mat.shape
            if key is None:
                u, v = _normal((h,), dtype=weight.dtype), _normal((w,), dtype=weight.dtype)
            else:
                ku, kv = _split(key, 2)
                u, v = _normal(ku, (h,), dtype=weight.dtype), _normal(kv, (w,), dtype=weight.dtype)
            self.register_buffer("_u", self._unit(u))
            self.register_buffer("_v", self._unit(v))
            self._iterate(mat, 15)

    def _matrix(self, weight: Tensor) -> Tensor:
        w = weight if self.axis == 0 else view.moveaxis(weight, self.axis, 0)
        return w.reshape(w.shape[0], -1)

    def _unit(self, x: Tensor) -> Tensor:
        return x / binary.maximum(unary.sqrt(reduction.sum(x * x)), self.eps)

    def _iterate(self, mat: Tensor, n: int) -> None:
        u, v = self._u, self._v
        for _ in range(n):
            u = self._unit(linalg.matmul(mat, v))
            v = self._unit(linalg.matmul(view.swap_axes(mat, 0, 1), u))
        rebind(self._u, detach(u))
        rebind(self._v, detach(v))

    def forward(self, weight):
        """``weight / sigma``, iterating the estimate first while training."""
        if weight.ndim == 1:
            return weight / binary.maximum(unary.sqrt(reduction.sum(weight * weight)), self.eps)
        mat = self._matrix(weight)
        if self.training:
            self._iterate(detach(mat), self.n_power_iterations)
        sigma = reduction.sum(detach(self._u) * linalg.matmul(mat, detach(self._v)))
        return weight / sigma

    def right_inverse(self, value):
        """The weight itself (its scale is not recovered, as PyTorch's)."""
        return value


def spectral_norm(
    module: Module,
    name: str = "weight",
    n_power_iterations: int = 1,
    eps: float = 1e-12,
    dim: int | None = None,
    *,
    key=None,
) -> Module:
    """PyTorch's ``parametrizations.spectral_norm``: ``module.<name>`` becomes ``W /
    sigma(W)``, ``sigma`` its largest singular value (``W`` as a matrix with ``dim``
    first), estimated by ``n_power_iterations`` steps of power iteration per forward in
    training mode (its vectors ``_u``, ``_v`` are buffers, updated in place, also under
    ``compile``; 15 steps at registration, as PyTorch's).

    Args:
        module: the module.
        name: the weight's name (default ``"weight"``).
        n_power_iterations: power-iteration steps per training forward (default 1).
        eps: the smallest norm divided by (default 1e-12).
        dim: the axis put first, in PyTorch's layout (default: 1 for the transposed
            convolutions, 0 otherwise).
        key: an RNG key for the starting vectors; None uses the global generator.

    Returns:
        ``module``.
    """
    weight = getattr(module, name)
    if dim is None:
        dim = 1 if isinstance(module, ConvTranspose1d | ConvTranspose2d) else 0
    axis = _our_axis(module, name, dim, max(weight.ndim, 1))
    return register_parametrization(
        module, name, _SpectralNorm(weight, n_power_iterations, axis, eps, key)
    )

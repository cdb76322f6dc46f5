"""``nb.func``: PyTorch's ``torch.func`` (functorch) names over Nabla's transforms, with
PyTorch's argument names, so per-example gradients, ensembles and meta-learning code port
as written.

``grad``, ``vjp``, ``jvp``, ``jacrev``, ``jacfwd``, ``hessian``, ``linearize`` and
``vmap`` are the JAX-style transforms (``vmap``'s ``in_dims``/``out_dims`` are its
``in_axes``/``out_axes``); ``grad_and_value`` returns PyTorch's ``(grad, value)`` order;
``functional_call`` runs a module with other parameters and buffers; and
``stack_module_state`` stacks several models' tensors for ``vmap`` over an ensemble
(these two load ``nabla.nn`` when called: importing ``nabla`` does not).

PyTorch's ``randomness`` (default ``"error"``, refusing random draws inside ``vmap``)
and ``chunk_size`` are accepted: draws under ``vmap`` here differ per element (PyTorch's
``"different"``), and the batch is never chunked.
"""

from __future__ import annotations

from .core.pytree import tree_flatten, tree_unflatten
from .ops import view
from .ops._util import as_tensor
from .runtime.tensor import realize
from .transforms.autodiff import detach, linearize, value_and_grad
from .transforms.autodiff import grad as _grad
from .transforms.autodiff import hessian as _hessian
from .transforms.autodiff import jacfwd as _jacfwd
from .transforms.autodiff import jacrev as _jacrev
from .transforms.autodiff import jvp as _jvp
from .transforms.autodiff import vjp as _vjp
from .transforms.vmap import vmap as _vmap

__all__ = [
    "grad",
    "grad_and_value",
    "vjp",
    "jvp",
    "jacrev",
    "jacfwd",
    "hessian",
    "linearize",
    "vmap",
    "functional_call",
    "stack_module_state",
]


def grad(func, argnums=0, has_aux: bool = False):
    """``torch.func.grad``: the gradient of ``func`` (a scalar) in argument(s) ``argnums``.

    Args:
        func: the function.
        argnums: an int or a tuple of ints (default 0).
        has_aux: ``func`` returns ``(output, aux)``; then ``(grad, aux)`` is returned.

    Returns:
        The gradient function.
    """
    return _grad(func, argnums=argnums, has_aux=has_aux)


def grad_and_value(func, argnums=0, has_aux: bool = False):
    """``torch.func.grad_and_value``: ``(grad, value)`` (``(grad, (value, aux))`` with
    ``has_aux``), PyTorch's order (JAX's ``value_and_grad`` the other way round).

    Args:
        func: the function.
        argnums: an int or a tuple of ints (default 0).
        has_aux: ``func`` returns ``(output, aux)``.

    Returns:
        The function.
    """
    inner = value_and_grad(func, argnums=argnums, has_aux=has_aux)

    def wrapper(*args, **kwargs):
        value, g = inner(*args, **kwargs)
        return g, value

    return wrapper


def vjp(func, *primals, has_aux: bool = False):
    """``torch.func.vjp``: ``(output, vjp_fn)`` (with ``has_aux``, ``(output, vjp_fn,
    aux)``); ``vjp_fn(cotangent)`` returns a tuple, one per primal.

    Args:
        func: the function.
        *primals: its arguments.
        has_aux: ``func`` returns ``(output, aux)``.

    Returns:
        As described.
    """
    return _vjp(func, *primals, has_aux=has_aux)


def jvp(func, primals, tangents, *, strict: bool = False, has_aux: bool = False):
    """``torch.func.jvp``: ``(output, jvp_out)`` (and ``aux`` with ``has_aux``).

    Args:
        func: the function.
        primals: a tuple of its arguments.
        tangents: a tuple of tangents like ``primals``.
        strict: PyTorch's flag: accepted.
        has_aux: ``func`` returns ``(output, aux)``.

    Returns:
        As described.
    """
    del strict
    return _jvp(func, tuple(primals), tuple(tangents), has_aux=has_aux)


def jacrev(func, argnums=0, *, has_aux: bool = False, chunk_size=None, **unused):
    """``torch.func.jacrev``: the Jacobian by reverse mode.

    Args:
        func: the function.
        argnums: an int or a tuple of ints (default 0).
        has_aux: ``func`` returns ``(output, aux)``.
        chunk_size: PyTorch's: accepted (not chunked).
        **unused: PyTorch's private options: accepted.

    Returns:
        The Jacobian function.
    """
    del chunk_size, unused
    return _jacrev(func, argnums=argnums, has_aux=has_aux)


def jacfwd(func, argnums=0, has_aux: bool = False, *, randomness: str = "error"):
    """``torch.func.jacfwd``: the Jacobian by forward mode.

    Args:
        func: the function.
        argnums: an int or a tuple of ints (default 0).
        has_aux: ``func`` returns ``(output, aux)``.
        randomness: PyTorch's: accepted (see the module's docstring).

    Returns:
        The Jacobian function.
    """
    del randomness
    return _jacfwd(func, argnums=argnums, has_aux=has_aux)


def hessian(func, argnums=0):
    """``torch.func.hessian``: the Hessian (forward over reverse).

    Args:
        func: the function.
        argnums: an int or a tuple of ints (default 0).

    Returns:
        The Hessian function.
    """
    return _hessian(func, argnums=argnums)


def vmap(func, in_dims=0, out_dims=0, randomness: str = "error", *, chunk_size=None):
    """``torch.func.vmap``: ``func`` mapped over the ``in_dims`` of its arguments (None:
    not mapped), results stacked at ``out_dims``.

    Args:
        func: the function.
        in_dims: an int, None, or a tuple (per argument, nested as the arguments).
        out_dims: an int or a tuple per output.
        randomness: PyTorch's: accepted (draws differ per element here).
        chunk_size: PyTorch's: accepted (not chunked).

    Returns:
        The mapped function.
    """
    del randomness, chunk_size
    return _vmap(func, in_axes=in_dims, out_axes=out_dims)


def functional_call(
    module,
    parameter_and_buffer_dicts,
    args=None,
    kwargs=None,
    *,
    tie_weights: bool = True,
    strict: bool = False,
):
    """``torch.func.functional_call``: ``module(*args, **kwargs)`` with some (or all) of its
    parameters and buffers replaced by the tensors named in ``parameter_and_buffer_dicts``
    (``"layer.weight"``); ``module`` itself is not changed. The replacements may be traced
    values, so ``grad`` and ``vmap`` differentiate and map through them.

    Args:
        module: the module.
        parameter_and_buffer_dicts: a dict ``name -> tensor``, or a tuple of such dicts.
        args: the positional arguments (one, or a tuple).
        kwargs: the keyword arguments.
        tie_weights: PyTorch's: a tensor shared by two names takes one replacement
            (always so here: each name is replaced where it is).
        strict: every parameter and buffer must be replaced, and no other name given.

    Returns:
        The module's output.

    Raises:
        ValueError: for a name the module does not have (always), or, with ``strict``, a
            tensor left out.
    """
    from .nn.module import Module, named_leaves  # noqa: PLC0415 - nabla.nn loads on first use

    del tie_weights
    if not isinstance(module, Module):
        raise TypeError(f"functional_call: expects a Module, got {type(module).__name__}")
    dicts = parameter_and_buffer_dicts
    dicts = list(dicts) if isinstance(dicts, tuple | list) else [dicts]
    given: dict = {}
    for d in dicts:
        twice = set(given) & set(d)
        if twice:
            raise ValueError(f"functional_call: {sorted(twice)} given in more than one dict")
        given.update(d)
    leaves, tree = tree_flatten(module)
    names = named_leaves(module)
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise ValueError(
            f"functional_call: {type(module).__name__} has no parameter or buffer "
            f"{unknown[0]!r} (of {len(unknown)} unknown names)"
        )
    if strict:
        missing = [n for n in names if n not in given]
        if missing:
            raise ValueError(f"functional_call: strict, but {missing[:3]} are not given")
    new = [as_tensor(given[n]) if n in given else leaf for n, leaf in zip(names, leaves)]
    replaced = tree_unflatten(tree, new)
    if args is None:
        args = ()
    elif not isinstance(args, tuple):
        args = (args,)
    return replaced(*args, **(kwargs or {}))


def stack_module_state(models) -> tuple[dict, dict]:
    """``torch.func.stack_module_state``: each parameter and buffer of models of one
    structure stacked along a new first dim, as ``(params, buffers)`` dicts by name, for
    ``vmap(functional_call)`` over the ensemble.

    Args:
        models: a list of modules of the same structure.

    Returns:
        ``(params, buffers)``.

    Raises:
        ValueError: for no models, or models of different structures.
    """
    models = list(models)
    if not models:
        raise ValueError("stack_module_state: expects at least one model")
    first = models[0]
    shapes = {n: p.shape for n, p in first.named_parameters()}
    for m in models[1:]:
        if {n: p.shape for n, p in m.named_parameters()} != shapes:
            raise ValueError("stack_module_state: the models' parameters differ in names or shapes")
    params = {n: view.stack([dict(m.named_parameters())[n] for m in models], 0) for n in shapes}
    buffer_names = [n for n, _ in first.named_buffers()]
    buffers = {n: view.stack([dict(m.named_buffers())[n] for m in models], 0) for n in buffer_names}
    realize(*params.values(), *buffers.values())
    params = {n: detach(p) for n, p in params.items()}  # (realized: new leaves, no history)
    buffers = {n: detach(b) for n, b in buffers.items()}
    for p in params.values():  # trained, as PyTorch's are
        p.requires_grad = True
    return params, buffers

"""``nabla.nn.utils``: what PyTorch keeps in ``torch.nn.utils`` — gradient clipping in place
(``clip_grad_norm_``, ``clip_grad_value_``, also in :mod:`nabla.nn.optim` beside their
functional forms) and parameters as one flat vector (``parameters_to_vector``,
``vector_to_parameters``).
"""

from __future__ import annotations

from ..ops import view
from ..ops._util import as_tensor
from ..ops.indexing import rebind
from ..runtime.tensor import Tensor
from ..transforms.autodiff import detach
from .optim import _params_of, clip_grad_norm_, clip_grad_value_

__all__ = ["clip_grad_norm_", "clip_grad_value_", "parameters_to_vector", "vector_to_parameters"]


def parameters_to_vector(parameters) -> Tensor:
    """Every parameter flattened and joined into one vector, in order (differentiable).

    Args:
        parameters: a Module, a tensor, or an iterable of tensors.

    Returns:
        A 1-D tensor of the parameters' total size.

    Raises:
        ValueError: for no parameters, or parameters of several dtypes.
    """
    params = _params_of(parameters)
    if not params:
        raise ValueError("parameters_to_vector: no parameters given")
    dtypes = sorted({str(p.dtype) for p in params})
    if len(dtypes) > 1:
        raise ValueError(f"parameters_to_vector: the parameters have several dtypes {dtypes}")
    return view.concatenate([view.reshape(p, (-1,)) for p in params], axis=0)


def vector_to_parameters(vec, parameters) -> None:
    """Give each parameter, in order, its slice of the 1-D ``vec``, in place (each keeps
    its identity, ``requires_grad`` and ``.grad``).

    Args:
        vec: a 1-D tensor of the parameters' total size.
        parameters: a Module, a tensor, or an iterable of tensors.

    Raises:
        ValueError: if ``vec`` is not 1-D or its size is not the parameters' total size.
    """
    params = _params_of(parameters)
    vec = as_tensor(vec, op="vector_to_parameters")
    total = sum(p.size for p in params)
    if vec.ndim != 1 or vec.shape[0] != total:
        raise ValueError(
            f"vector_to_parameters: vec of shape {vec.shape} for {len(params)} parameters of "
            f"{total} values in all (expected shape ({total},))"
        )
    at = 0
    for p in params:
        part = view.reshape(vec[at : at + p.size], p.shape).cast(p.dtype)
        rebind(p, detach(part))
        at += p.size

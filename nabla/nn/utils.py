"""``nabla.nn.utils``: what PyTorch keeps in ``torch.nn.utils`` — gradient clipping in place
(``clip_grad_norm_``, ``clip_grad_value_``, also in :mod:`nabla.nn.optim` beside their
functional forms), parameters as one flat vector (``parameters_to_vector``,
``vector_to_parameters``), and a PyTorch ``state_dict`` turned into this model's layouts
and back (``from_torch_state_dict``, ``to_torch_state_dict``), ``rnn`` (``pad_sequence`` and
the packed sequences of :mod:`nabla.nn.packed`), and
the parametrizations (``parametrize``, ``parametrizations.weight_norm``/``spectral_norm``,
and the older ``weight_norm``/``spectral_norm`` functions, which make the same
parametrizations: see :mod:`nabla.nn.parametrize`).
"""

from __future__ import annotations

import types

import ml_dtypes
import numpy as np

from ..ops import view
from ..ops._util import as_tensor
from ..ops.indexing import rebind
from ..runtime.tensor import Tensor
from ..transforms.autodiff import detach
from . import parametrize
from .layers import Conv2d, Linear
from .module import Module, host_array
from .optim import _params_of, clip_grad_norm_, clip_grad_value_
from .packed import PackedSequence, pack_padded_sequence, pack_sequence, pad_packed_sequence
from .transformer import MultiHeadAttention, MultiheadAttention, TransformerDecoderLayer

__all__ = [
    "clip_grad_norm_",
    "clip_grad_value_",
    "from_torch_state_dict",
    "pad_sequence",
    "parameters_to_vector",
    "parametrize",
    "parametrizations",
    "remove_spectral_norm",
    "remove_weight_norm",
    "rnn",
    "spectral_norm",
    "weight_norm",
    "to_torch_state_dict",
    "vector_to_parameters",
]


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


# ----------------------------------------------------------------------------- PyTorch layouts
# Where this package's modules keep the original nabla's (JAX's) layouts instead of
# PyTorch's: Linear's weight (in, out), Conv2d's HWIO filter, the transformer layers'
# attention as four Linear projections (PyTorch packs q, k and v in ``in_proj_weight``) and
# the decoder's cross-attention named ``cross_attn`` (``multihead_attn``). Every other
# module holds PyTorch's names and layouts already.


def _torch_modules(model: Module) -> list:
    """``(prefix, module)`` of ``model`` and its submodules whose layouts differ from
    PyTorch's, parents first."""
    out = []
    for name, m in model.named_modules():
        p = f"{name}." if name else ""
        if isinstance(m, TransformerDecoderLayer | MultiHeadAttention | Conv2d | Linear):
            out.append((p, m))
    return out


def from_torch_state_dict(model: Module, state_dict) -> dict:
    """A PyTorch ``state_dict`` for ``model``'s architecture in ``model``'s own names and
    layouts, for ``model.load_state_dict``: ``Linear`` weights transposed to ``(in,
    out)``, ``Conv2d`` filters from OIHW to HWIO, the transformer layers' packed
    ``in_proj_weight``/``in_proj_bias`` split into their ``q_proj``/``k_proj``/``v_proj``
    and the decoder's ``multihead_attn`` renamed ``cross_attn``; every other entry as it is.
    (A square ``Linear`` or ``Conv2d`` loads a PyTorch weight of the other layout without a
    shape error, silently wrong: this is the way to load one.)

    What it cannot know: a ``Linear`` after ``Flatten`` of a convolution's output reads the
    features in ``(H, W, C)`` order here, ``(C, H, W)`` in PyTorch; permute that weight's
    input rows (or pool to 1x1 first).

    Args:
        model: the module the weights are for (its structure decides each conversion).
        state_dict: PyTorch's ``state_dict()`` (torch tensors, NumPy arrays or nabla tensors).

    Returns:
        A dict name -> NumPy array.

    Example:
        >>> model = nn.Linear(3, 2)
        >>> torch_sd = {"weight": np.zeros((2, 3)), "bias": np.zeros(2)}
        >>> from_torch_state_dict(model, torch_sd)["weight"].shape
        (3, 2)
    """
    sd = {k: host_array(v) for k, v in state_dict.items()}
    done = set()  # entries already in this model's layout (the split projections)
    for p, m in _torch_modules(model):
        if isinstance(m, TransformerDecoderLayer):
            old = f"{p}multihead_attn."
            for k in [k for k in sd if k.startswith(old)]:
                sd[f"{p}cross_attn.{k[len(old) :]}"] = sd.pop(k)
        elif isinstance(m, MultiheadAttention):
            continue  # PyTorch's own parameters already
        elif isinstance(m, MultiHeadAttention):
            e, names = m.embed_dim, ("q_proj", "k_proj", "v_proj")
            if f"{p}in_proj_weight" in sd:
                w = sd.pop(f"{p}in_proj_weight")
                for i, n in enumerate(names):
                    sd[f"{p}{n}.weight"] = w[i * e : (i + 1) * e].T
                    done.add(f"{p}{n}.weight")
            for n in names:  # (kdim/vdim other than embed_dim: one weight each)
                if f"{p}{n}_weight" in sd:
                    sd[f"{p}{n}.weight"] = sd.pop(f"{p}{n}_weight").T
                    done.add(f"{p}{n}.weight")
            if f"{p}in_proj_bias" in sd:
                b = sd.pop(f"{p}in_proj_bias")
                for i, n in enumerate(names):
                    sd[f"{p}{n}.bias"] = b[i * e : (i + 1) * e]
        elif isinstance(m, Linear) and f"{p}weight" in sd and f"{p}weight" not in done:
            sd[f"{p}weight"] = sd[f"{p}weight"].T
        elif isinstance(m, Conv2d) and f"{p}weight" in sd:
            sd[f"{p}weight"] = sd[f"{p}weight"].transpose(2, 3, 1, 0)  # OIHW -> HWIO
    return sd


def to_torch_state_dict(model: Module, *, tensors: bool = False) -> dict:
    """``model``'s ``state_dict`` in PyTorch's names and layouts (the inverse of
    :func:`from_torch_state_dict`): with ``tensors=True``, ready for
    ``torch_model.load_state_dict``.

    Args:
        model: the module to export.
        tensors: return PyTorch tensors (PyTorch must be installed; a bfloat16 value
            crosses by its bits, which ``torch.from_numpy`` cannot take) instead of NumPy
            arrays.

    Returns:
        A dict name -> NumPy array (or PyTorch tensor).

    Example:
        >>> to_torch_state_dict(nn.Linear(3, 2))["weight"].shape
        (2, 3)
    """
    sd = {k: v.numpy() for k, v in model.state_dict().items()}
    for p, m in reversed(_torch_modules(model)):  # children first: then their parents
        if isinstance(m, MultiheadAttention):
            continue
        if isinstance(m, MultiHeadAttention):
            names = ("q_proj", "k_proj", "v_proj")
            ws = [sd.pop(f"{p}{n}.weight") for n in names]  # (as their Linear turned them)
            if m.kdim == m.embed_dim and m.vdim == m.embed_dim:
                sd[f"{p}in_proj_weight"] = np.concatenate(ws)
            else:
                for n, w in zip(names, ws, strict=True):
                    sd[f"{p}{n}_weight"] = w
            if f"{p}q_proj.bias" in sd:
                sd[f"{p}in_proj_bias"] = np.concatenate([sd.pop(f"{p}{n}.bias") for n in names])
        elif isinstance(m, TransformerDecoderLayer):
            new = f"{p}cross_attn."
            for k in [k for k in sd if k.startswith(new)]:
                sd[f"{p}multihead_attn.{k[len(new) :]}"] = sd.pop(k)
        elif isinstance(m, Linear) and f"{p}weight" in sd:
            sd[f"{p}weight"] = sd[f"{p}weight"].T
        elif isinstance(m, Conv2d) and f"{p}weight" in sd:
            sd[f"{p}weight"] = sd[f"{p}weight"].transpose(3, 2, 0, 1)  # HWIO -> OIHW
    return {k: _torch_tensor(v) for k, v in sd.items()} if tensors else sd


def _torch_tensor(a: np.ndarray):
    """A NumPy array as a PyTorch tensor of its dtype (a copy)."""
    import torch  # noqa: PLC0415 - optional: only ``tensors=True`` needs it

    a = np.ascontiguousarray(a)
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(a.copy())


def pad_sequence(sequences, batch_first: bool = False, padding_value=0.0, padding_side="right"):
    """Sequences of different lengths ``(L_i, *rest)`` padded to the longest and stacked
    (``torch.nn.utils.rnn.pad_sequence``): ``(L, N, *rest)``, or ``(N, L, *rest)`` with
    ``batch_first``. Differentiable.

    Args:
        sequences: a list of tensors (or arrays) whose dims after the first agree.
        batch_first: put the batch dim first (default False, PyTorch's).
        padding_value: the value of the padded positions (default 0).
        padding_side: ``"right"`` (default) or ``"left"``.

    Returns:
        A tensor.

    Raises:
        ValueError: for no sequences, dims after the first that differ, or another
            ``padding_side``.
    """
    if padding_side not in ("right", "left"):
        raise ValueError(
            f"pad_sequence: padding_side must be 'right' or 'left', got {padding_side!r}"
        )
    seqs = [as_tensor(s, op="pad_sequence") for s in sequences]
    if not seqs:
        raise ValueError("pad_sequence: needs at least one sequence")
    rest = {tuple(s.shape[1:]) for s in seqs}
    if len(rest) != 1 or any(s.ndim == 0 for s in seqs):
        shapes = [tuple(s.shape) for s in seqs]
        raise ValueError(
            f"pad_sequence: the sequences' dims after the first must agree, got {shapes}"
        )
    longest = max(s.shape[0] for s in seqs)
    padded = []
    for s in seqs:
        gap = longest - s.shape[0]
        widths = [(gap, 0) if padding_side == "left" else (0, gap)] + [(0, 0)] * (s.ndim - 1)
        padded.append(view.pad(s, widths, value=padding_value) if gap else s)
    out = view.stack(padded, axis=0)
    return out if batch_first else out.swap_axes(0, 1)


# ``nn.utils.rnn`` as PyTorch spells it (packed sequences: nn/packed.py)
rnn = types.SimpleNamespace(
    pad_sequence=pad_sequence,
    PackedSequence=PackedSequence,
    pack_padded_sequence=pack_padded_sequence,
    pad_packed_sequence=pad_packed_sequence,
    pack_sequence=pack_sequence,
)

# ``nn.utils.parametrizations`` as PyTorch spells it
parametrizations = types.SimpleNamespace(
    weight_norm=parametrize.weight_norm, spectral_norm=parametrize.spectral_norm
)


def weight_norm(module: Module, name: str = "weight", dim: int | None = 0) -> Module:
    """PyTorch's older ``nn.utils.weight_norm``, as the parametrization
    :func:`nabla.nn.parametrize.weight_norm` (the magnitude and direction are named
    ``parametrizations.<name>.original0``/``original1`` in ``state_dict``, where the older
    PyTorch function names them ``<name>_g``/``<name>_v``).

    Args:
        module: the module.
        name: the weight's name (default ``"weight"``).
        dim: the axis kept, in PyTorch's layout (default 0); None for the whole tensor.

    Returns:
        ``module``.
    """
    return parametrize.weight_norm(module, name, dim)


def remove_weight_norm(module: Module, name: str = "weight") -> Module:
    """Undo :func:`weight_norm`: ``<name>`` becomes a plain parameter again with its
    current value.

    Args:
        module: the module.
        name: the weight's name (default ``"weight"``).

    Returns:
        ``module``.
    """
    return parametrize.remove_parametrizations(module, name)


def spectral_norm(
    module: Module,
    name: str = "weight",
    n_power_iterations: int = 1,
    eps: float = 1e-12,
    dim: int | None = None,
) -> Module:
    """PyTorch's older ``nn.utils.spectral_norm``, as the parametrization
    :func:`nabla.nn.parametrize.spectral_norm` (``state_dict`` names
    ``parametrizations.<name>.original`` and ``parametrizations.<name>.0._u``/``_v``
    where the older function has ``<name>_orig``, ``<name>_u``, ``<name>_v``).

    Args:
        module: the module.
        name: the weight's name (default ``"weight"``).
        n_power_iterations: power-iteration steps per training forward (default 1).
        eps: the smallest norm divided by (default 1e-12).
        dim: the axis put first, in PyTorch's layout (default: 1 for transposed
            convolutions, else 0).

    Returns:
        ``module``.
    """
    return parametrize.spectral_norm(module, name, n_power_iterations, eps, dim)


def remove_spectral_norm(module: Module, name: str = "weight") -> Module:
    """Undo :func:`spectral_norm`: ``<name>`` becomes a plain parameter again with its
    current (normalized) value.

    Args:
        module: the module.
        name: the weight's name (default ``"weight"``).

    Returns:
        ``module``.
    """
    return parametrize.remove_parametrizations(module, name)

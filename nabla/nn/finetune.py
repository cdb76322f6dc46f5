"""Parameter-efficient finetuning: LoRA adapters and QLoRA on an NF4-quantized frozen base.

LoRA adds a trainable low-rank update to a frozen linear weight ``W`` (``(in, out)``, as in
:func:`nabla.nn.functional.linear`)::

    y = x @ W + (alpha / rank) * (x @ A) @ B        A: (in, rank), B: (rank, out)

``B`` starts at zero, so the adapted layer starts equal to the base. QLoRA stores ``W`` in
4-bit NormalFloat (NF4): 16 levels placed at quantiles of a standard normal (so normally
distributed weights use every level about equally), one absmax scale per block of
``block_size`` values, two 4-bit codes packed per ``uint8``. Dequantization is made of
ordinary ops, so it runs inside ``nb.compile`` and the frozen base is never differentiated.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import OrderedDict

import numpy as np

from ..core.dtypes import DType, get_default_dtype, to_dtype
from ..core.pytree import register_pytree_node
from ..ops import binary, creation, indexing, view
from ..ops._util import as_tensor
from ..runtime.tensor import Tensor
from . import checkpoint
from . import init as _init
from .module import castable

__all__ = [
    "NF4_LEVELS",
    "NF4Weight",
    "dequantize_nf4",
    "init_lora_adapter",
    "load_finetune_checkpoint",
    "lora_delta",
    "lora_linear",
    "merge_lora_weight",
    "qlora_linear",
    "quantize_nf4",
    "save_finetune_checkpoint",
    "tree_lora_delta",
    "unmerge_lora_weight",
]


# ----------------------------------------------------------------------------- LoRA
def init_lora_adapter(weight, rank: int, key: Tensor | None = None, init_std: float | None = None):
    """A LoRA adapter ``{"A": (in, rank), "B": (rank, out)}`` for a base weight ``(in, out)``.

    ``A`` is normal with std ``init_std`` (default ``1 / sqrt(in)``), ``B`` is zeros.

    Args:
        weight: the frozen base weight (or an :class:`NF4Weight`), used for its shape and dtype.
        rank: the adapter rank (at least 1, at most ``min(in, out)``).
        key: optional RNG key for ``A``.
        init_std: std of ``A``.

    Returns:
        A dict of two tensors (a pytree: pass it to ``nb.grad`` and the optimizers).

    Raises:
        ValueError: for a weight that is not 2-D, a rank out of range or a negative
            ``init_std``.
        TypeError: for a weight that is not float, or a rank that is not an int.
    """
    if not isinstance(weight, NF4Weight):
        weight = as_tensor(weight, op="init_lora_adapter")
    shape = weight.shape
    dtype = DType.float32 if isinstance(weight, NF4Weight) else weight.dtype
    if not dtype.is_float:
        raise TypeError(f"init_lora_adapter: the weight must be float, got {dtype.value}")
    if len(shape) != 2:
        raise ValueError(f"init_lora_adapter: weight must be (in, out), got shape {shape}")
    if not isinstance(rank, int | np.integer) or isinstance(rank, bool):
        raise TypeError(f"init_lora_adapter: rank must be an int, got {rank!r}")
    if not 1 <= rank <= min(shape):
        raise ValueError(f"init_lora_adapter: rank {rank} must be in [1, {min(shape)}] for {shape}")
    std = 1.0 / math.sqrt(shape[0]) if init_std is None else init_std
    if not isinstance(std, int | float | np.number) or isinstance(std, bool) or not std >= 0:
        raise ValueError(f"init_lora_adapter: init_std must be a number >= 0, got {init_std!r}")
    return {
        "A": _init.normal((shape[0], rank), 0.0, std, key, dtype),
        "B": creation.zeros((rank, shape[1]), dtype=dtype),
    }


def _delta(fn, adapter, shape, alpha):
    """``(A, B, alpha / rank)`` after checking the adapter fits a weight of ``shape``
    (arrays taken as tensors)."""
    a, b = as_tensor(adapter["A"], op=fn), as_tensor(adapter["B"], op=fn)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"{fn}: adapter A {a.shape} and B {b.shape} are not (in, r) and (r, out)")
    if (a.shape[0], b.shape[1]) != tuple(shape):
        raise ValueError(
            f"{fn}: adapter A {a.shape} @ B {b.shape} does not match the weight of shape {shape}"
        )
    return a, b, float(alpha) / a.shape[1]


def lora_linear(x, weight, adapter, alpha: float = 1.0, bias=None) -> Tensor:
    """``x @ weight + (alpha / rank) * (x @ A) @ B (+ bias)`` without forming ``A @ B``.

    Args:
        x: input ``(..., in)``.
        weight: frozen base weight ``(in, out)``.
        adapter: ``{"A", "B"}`` from :func:`init_lora_adapter`.
        alpha: LoRA scaling numerator (default 1).
        bias: optional ``(out,)``.

    Returns:
        ``(..., out)``.

    Raises:
        ValueError: if the adapter does not fit the weight, or ``x`` does not fit either.
    """
    x, weight = as_tensor(x, op="lora_linear"), as_tensor(weight, op="lora_linear")
    a, b, scale = _delta("lora_linear", adapter, weight.shape, alpha)
    if x.ndim == 0 or x.shape[-1] != weight.shape[0]:
        raise ValueError(
            f"lora_linear: input of shape {x.shape} does not fit weight of shape {weight.shape}"
        )
    y = x @ weight + ((x @ a) @ b) * scale
    return y if bias is None else y + bias


def lora_delta(adapter, alpha: float = 1.0) -> Tensor:
    """The adapter's weight update ``(alpha / rank) * A @ B`` (the original nabla's
    ``lora_delta``; what :func:`merge_lora_weight` adds).

    Args:
        adapter: ``{"A": (in, rank), "B": (rank, out)}``.
        alpha: LoRA scaling numerator (default 1).

    Returns:
        A tensor ``(in, out)``.

    Raises:
        ValueError: if ``A`` and ``B`` are not ``(in, r)`` and ``(r, out)``.
    """
    a, b = as_tensor(adapter["A"], op="lora_delta"), as_tensor(adapter["B"], op="lora_delta")
    _, _, scale = _delta("lora_delta", {"A": a, "B": b}, (a.shape[0], b.shape[-1]), alpha)
    return (a @ b) * scale


def _is_adapter(x) -> bool:
    return isinstance(x, dict) and "A" in x and "B" in x


def tree_lora_delta(adapters, alpha: float = 1.0, *, is_leaf=None):
    """:func:`lora_delta` of every adapter in a pytree (the original nabla's
    ``tree_lora_delta``): each ``{"A", "B"}`` dict becomes its update tensor, everything else
    is kept.

    Args:
        adapters: a pytree of adapters, e.g. ``{"layer0": {"A": ..., "B": ...}}``, or one
            adapter.
        alpha: LoRA scaling numerator (default 1).
        is_leaf: optional predicate marking the subtrees that are adapters (default: a dict
            with keys ``"A"`` and ``"B"``).

    Returns:
        A pytree like ``adapters`` (its container types kept) with an update tensor in
        place of each adapter.

    Raises:
        ValueError: when ``is_leaf`` marks a subtree that is not an ``{"A", "B"}`` dict.
    """
    test = _is_adapter if is_leaf is None else is_leaf

    def go(node):
        if test(node):
            if not _is_adapter(node):  # (a peft-style ``lora_A``/``lora_B`` dict, say)
                raise ValueError(
                    f"tree_lora_delta: is_leaf marked a {type(node).__name__} that is not an "
                    "adapter (a dict with keys 'A' and 'B')"
                )
            return lora_delta(node, alpha)
        if isinstance(node, dict):  # (an OrderedDict stays one)
            return type(node)((k, go(v)) for k, v in node.items())
        if isinstance(node, list | tuple):
            items = [go(v) for v in node]
            return type(node)(*items) if hasattr(node, "_fields") else type(node)(items)
        return node

    return go(adapters)


def _weight_and_update(fn: str, weight, adapter, alpha: float):
    """``weight`` as a tensor and the adapter's update ``(alpha / rank) * A @ B`` to it."""
    if isinstance(weight, NF4Weight):
        raise TypeError(
            f"{fn}: the weight is an NF4Weight; merge into dequantize_nf4(weight) (a 4-bit "
            "weight cannot hold the update)"
        )
    weight = as_tensor(weight, op=fn)
    if not weight.dtype.is_float:  # (the update would be truncated to integers)
        raise TypeError(f"{fn}: the weight must be float, got {weight.dtype.value}")
    a, b, scale = _delta(fn, adapter, weight.shape, alpha)
    return weight, (a @ b) * scale


def merge_lora_weight(weight, adapter, alpha: float = 1.0) -> Tensor:
    """The merged weight ``weight + (alpha / rank) * A @ B`` (for inference without adapters).

    Args:
        weight: base weight ``(in, out)``.
        adapter: ``{"A", "B"}``.
        alpha: LoRA scaling numerator (default 1).

    Returns:
        A tensor like ``weight``.
    """
    weight, delta = _weight_and_update("merge_lora_weight", weight, adapter, alpha)
    return weight + delta.cast(weight.dtype)  # an NF4 base's adapter is float32


def unmerge_lora_weight(weight, adapter, alpha: float = 1.0) -> Tensor:
    """The base weight back from a merged one: ``weight - (alpha / rank) * A @ B``.

    Args:
        weight: merged weight ``(in, out)``.
        adapter: the ``{"A", "B"}`` adapter that was merged into it.
        alpha: the LoRA scaling numerator it was merged with (default 1).

    Returns:
        A tensor like ``weight``.
    """
    weight, delta = _weight_and_update("unmerge_lora_weight", weight, adapter, alpha)
    return weight - delta.cast(weight.dtype)


# ----------------------------------------------------------------------------- NF4
def _nf4_levels() -> np.ndarray:
    """The 16 NF4 levels derived: 8 positive and 7 negative normal quantiles plus an exact
    zero, scaled into [-1, 1] (the asymmetric construction of the QLoRA paper). Within a
    few float32 ulps of the published table, which is what ``NF4_LEVELS`` holds."""
    ppf = statistics.NormalDist().inv_cdf
    offset = 0.5 * (1 / 32 + 1 / 30)  # the quantile range leaves this much tail on each side
    pos = [ppf(p) for p in np.linspace(1 - offset, 0.5, 9)[:-1]]
    neg = [-ppf(p) for p in np.linspace(1 - offset, 0.5, 8)[:-1]]
    levels = np.array(sorted(pos + [0.0] + neg), dtype=np.float64)
    return (levels / np.abs(levels).max()).astype(np.float32)


# The levels as the QLoRA paper publishes them (its float32 rounding): codes made elsewhere
# decode to the same floats, and a weight on a level round-trips exactly.
NF4_LEVELS = np.array(
    [
        -1.0,
        -0.6961928009986877,
        -0.5250730514526367,
        -0.39491748809814453,
        -0.28444138169288635,
        -0.18477343022823334,
        -0.09105003625154495,
        0.0,
        0.07958029955625534,
        0.16093020141124725,
        0.24611230194568634,
        0.33791524171829224,
        0.44070982933044434,
        0.5626170039176941,
        0.7229568362236023,
        1.0,
    ],
    dtype=np.float32,
)


class NF4Weight:
    """A weight stored as NF4: ``packed`` uint8 codes (two per byte, the first in the high
    nibble), float32 ``scales`` (one absmax per block), and the original ``shape`` and
    ``block_size``. A pytree whose leaves are the two tensors.

    Args:
        packed: uint8 tensor of ``ceil(size / 2)`` bytes.
        scales: float32 tensor of ``ceil(size / block_size)`` scales.
        shape: the dequantized shape.
        block_size: values per scale.
    """

    def __init__(self, packed: Tensor, scales: Tensor, shape: tuple, block_size: int):
        self.packed, self.scales = packed, scales
        self.shape, self.block_size = tuple(shape), int(block_size)

    @property
    def nbytes(self) -> int:
        """Storage in bytes (codes plus scales)."""
        return int(np.prod(self.packed.shape)) + 4 * int(np.prod(self.scales.shape))

    def __repr__(self) -> str:
        return f"NF4Weight(shape={self.shape}, block_size={self.block_size})"

    #: the original nabla's dict keys (its ``quantize_nf4`` returned a dict), read as a mapping
    _KEYS = ("indices", "scales", "original_shape", "original_numel", "padded_numel", "block_size")

    def keys(self) -> tuple:
        """The keys the original nabla's quantized-weight dict had (``qw["scales"]``...).

        Returns:
            ``("indices", "scales", "original_shape", "original_numel", "padded_numel",
            "block_size")``.
        """
        return self._KEYS

    def __contains__(self, key) -> bool:
        return key in self._KEYS

    def __getitem__(self, key):
        """The original's entries: ``indices`` (one uint8 code in 0..15 per value, padded to
        whole blocks), ``scales``, ``original_shape``, ``original_numel``, ``padded_numel``
        and ``block_size``."""
        size = math.prod(self.shape)
        padded = self.scales.shape[0] * self.block_size
        if key == "indices":
            p = self.packed.cast(DType.int32)
            codes = view.stack([binary.floor_div(p, 16), binary.mod(p, 16)], axis=-1).reshape(-1)
            if codes.shape[0] < padded:
                pad = creation.full((padded - codes.shape[0],), 7, dtype=DType.int32)
                codes = view.concatenate([codes, pad], axis=0)
            return codes[:padded].cast(DType.uint8)
        values = {
            "scales": self.scales,
            "original_shape": self.shape,
            "original_numel": size,
            "padded_numel": padded,
            "block_size": self.block_size,
        }
        if key not in values:
            raise KeyError(f"NF4Weight has no entry {key!r}; its entries are {self._KEYS}")
        return values[key]


register_pytree_node(
    NF4Weight,
    lambda w: ((w.packed, w.scales), (w.shape, w.block_size)),
    lambda aux, ch: NF4Weight(ch[0], ch[1], *aux),
)


def quantize_nf4(weight, block_size: int = 64) -> NF4Weight:
    """Quantize ``weight`` to NF4 with one absmax scale per ``block_size`` values.

    Each value is divided by its block's absmax and mapped to the nearest of the 16
    :data:`NF4_LEVELS`. Runs once on the host (a frozen base is quantized once).

    Args:
        weight: a float tensor or array.
        block_size: values per scale (default 64).

    Returns:
        An :class:`NF4Weight`.

    Raises:
        ValueError: for a non-positive ``block_size``, or a weight holding inf or NaN (or
            values beyond float32's range).
        TypeError: for a ``block_size`` that is not an int, or a weight that is not float.
    """
    if not isinstance(block_size, int | np.integer) or isinstance(block_size, bool):
        raise TypeError(f"quantize_nf4: block_size must be an int, got {block_size!r}")
    if block_size < 1:
        raise ValueError(f"quantize_nf4: block_size must be positive, got {block_size}")
    if isinstance(weight, NF4Weight):
        raise TypeError("quantize_nf4: the weight is already an NF4Weight")
    w = np.asarray(weight.numpy() if isinstance(weight, Tensor) else weight)
    if w.dtype.kind != "f" and w.dtype.name != "bfloat16":  # (ml_dtypes' kind is "V")
        raise TypeError(f"quantize_nf4: the weight must be float, got {w.dtype}")
    with np.errstate(over="ignore"):
        w = w.astype(np.float32)
    if not np.isfinite(w).all():  # an inf or NaN scale would turn its whole block to NaN
        where = tuple(int(i) for i in np.argwhere(~np.isfinite(w))[0])
        raise ValueError(
            f"quantize_nf4: the weight of shape {w.shape} holds a non-finite float32 value "
            f"(first at index {where}); NF4 scales each block by its largest magnitude"
        )
    flat = w.reshape(-1)
    n_blocks = -(-flat.size // block_size)
    padded = np.zeros(n_blocks * block_size, np.float32)
    padded[: flat.size] = flat
    blocks = padded.reshape(n_blocks, block_size)
    scales = np.abs(blocks).max(axis=1)
    scales[scales == 0] = 1.0  # an all-zero block: any scale decodes to zeros
    normed = blocks / scales[:, None]
    # nearest level via the midpoints between consecutive levels
    mids = (NF4_LEVELS[1:] + NF4_LEVELS[:-1]) / 2
    codes = np.searchsorted(mids, normed.reshape(-1)).astype(np.uint8)[: flat.size]
    if codes.size % 2:
        codes = np.append(codes, np.uint8(7))  # pad with the code of 0.0
    packed = (codes[0::2] << 4) | codes[1::2]
    return NF4Weight(
        creation.constant(packed.astype(np.uint8)),
        creation.constant(scales.astype(np.float32)),
        w.shape,
        block_size,
    )


def dequantize_nf4(qweight: NF4Weight, dtype=None) -> Tensor:
    """The float weight an :class:`NF4Weight` stands for (lazy ops: fine inside ``compile``).

    Args:
        qweight: from :func:`quantize_nf4`.
        dtype: result dtype, a float dtype (default float32).

    Returns:
        A tensor of ``qweight.shape``.

    Raises:
        TypeError: if ``qweight`` is not an :class:`NF4Weight`, or for a ``dtype`` that is
            not a float dtype (an integer one would truncate every value).
    """
    if not isinstance(qweight, NF4Weight):
        raise TypeError(f"dequantize_nf4: expected an NF4Weight, got {type(qweight).__name__}")
    if dtype is not None and not to_dtype(dtype).is_float:
        raise TypeError(f"dequantize_nf4: dtype must be a float dtype, got {to_dtype(dtype).value}")
    size = math.prod(qweight.shape)
    p = qweight.packed.cast(DType.int32)
    # high nibble first: byte = 16 * code[2i] + code[2i + 1]
    codes = view.stack([binary.floor_div(p, 16), binary.mod(p, 16)], axis=-1).reshape(-1)
    n_blocks = qweight.scales.shape[0]
    total = n_blocks * qweight.block_size
    if codes.shape[0] < total:
        pad = creation.full((total - codes.shape[0],), 7, dtype=DType.int32)
        codes = view.concatenate([codes, pad], axis=0)
    levels = indexing.take(creation.constant(NF4_LEVELS), codes[:total], axis=0)
    values = levels.reshape(n_blocks, qweight.block_size) * qweight.scales.reshape(n_blocks, 1)
    out = values.reshape(-1)[:size].reshape(qweight.shape)
    return out if dtype is None else out.cast(dtype)


def qlora_linear(
    x, qweight: NF4Weight, adapter, alpha: float = 1.0, bias=None, *, compute_dtype=None
) -> Tensor:
    """:func:`lora_linear` on an NF4 base: ``x @ dequantize_nf4(qweight) + LoRA delta``.

    Args:
        x: input ``(..., in)``.
        qweight: the frozen base from :func:`quantize_nf4`.
        adapter: ``{"A", "B"}`` from :func:`init_lora_adapter`.
        alpha: LoRA scaling numerator (default 1).
        bias: optional ``(out,)``.
        compute_dtype: the dtype the product is computed in, a float dtype (keyword only,
            as the original nabla's): ``x``, the dequantized weight and the adapter are cast
            to it. Default: ``x``'s dtype, or the default float for an integer ``x``.

    Returns:
        ``(..., out)``, of ``compute_dtype``.

    Raises:
        TypeError: for a ``compute_dtype`` that is not a float dtype.
    """
    x = as_tensor(x, op="qlora_linear")
    if compute_dtype is not None:
        if not to_dtype(compute_dtype).is_float:
            raise TypeError(
                f"qlora_linear: compute_dtype must be a float dtype, got "
                f"{to_dtype(compute_dtype).value} (an integer one would truncate the weight)"
            )
        x = x.cast(compute_dtype)
    elif not x.dtype.is_float:  # (an integer input: the weight is not truncated to it)
        x = x.cast(get_default_dtype())
    dtype = x.dtype  # the adapter (float32 from init_lora_adapter) and bias are cast to it:
    # the result stays compute_dtype (a float32 adapter or bias had promoted it)
    adapter = {k: as_tensor(adapter[k], op="qlora_linear").cast(dtype) for k in ("A", "B")}
    if bias is not None:
        bias = as_tensor(bias, op="qlora_linear").cast(dtype)
    return lora_linear(x, dequantize_nf4(qweight, dtype), adapter, alpha, bias)


# ----------------------------------------------------------------------------- checkpoints
def _flatten_tree(
    prefix: str, tree, out: OrderedDict, op: str = "save_finetune_checkpoint"
) -> None:
    if isinstance(tree, dict):
        for k, v in tree.items():
            if "/" in str(k):  # the file's names join the path with "/": it would split
                raise ValueError(
                    f"{op}: the key {k!r} under {prefix!r} holds a '/', "
                    "which separates the levels of a name in the file; use nested dicts"
                )
            _flatten_tree(f"{prefix}/{k}", v, out, op)
    elif isinstance(tree, list | tuple):
        for i, v in enumerate(tree):
            _flatten_tree(f"{prefix}/{i}", v, out, op)
    elif isinstance(tree, Tensor):
        if prefix in out:
            raise ValueError(f"{op}: two values are both named {prefix!r}")
        out[prefix] = tree
    elif tree is None:  # (``adamw_init`` keeps no moments for a non-float leaf)
        out[prefix] = None
    else:
        raise TypeError(
            f"{op}: {prefix!r} is a {type(tree).__name__}; adapters and "
            "optimizer state must be nested dicts/lists of tensors"
        )


def _unflatten_tree(items: dict):
    root: dict = {}
    for key, v in items.items():
        node = root
        *path, leaf = key.split("/")
        for part in path:
            node = node.setdefault(part, {})
        node[leaf] = v

    def lists(node):
        if not isinstance(node, dict):
            return node
        node = {k: lists(v) for k, v in node.items()}
        if (
            node
            and all(k.isdigit() for k in node)
            and sorted(map(int, node)) == list(range(len(node)))
        ):
            return [node[str(i)] for i in range(len(node))]
        return node

    return lists(root)


def save_finetune_checkpoint(
    path, adapters=None, optimizer_state=None, metadata=None, *, lora_params=None
) -> None:
    """Save LoRA adapters (and optionally the optimizer state) to one safetensors file.

    Args:
        path: the file to write.
        adapters: nested dicts/lists of tensors, e.g. ``{"layer0": {"A": ..., "B": ...}}``.
        optimizer_state: optional state of the functional optimizers (``adamw_init``), or a
            stateful optimizer's ``state_dict()``.
        metadata: optional annotations (rank, alpha, base model name...): JSON values,
            returned by :func:`load_finetune_checkpoint` as they were given.
        lora_params: the original nabla's name of ``adapters`` (keyword only; give one).

    Raises:
        TypeError: for a value that is not a tensor, dict or list, for both or neither of
            ``adapters`` and ``lora_params``, or metadata that JSON cannot hold.
        ValueError: for adapters that hold no tensor.
    """
    if (adapters is None) == (lora_params is None):
        raise TypeError(
            "save_finetune_checkpoint: pass the adapters once: adapters= or lora_params="
        )
    adapters = lora_params if adapters is None else adapters
    flat: OrderedDict = OrderedDict()
    _flatten_tree("adapters", adapters, flat)
    if not any(v is not None for v in flat.values()):  # (the load would refuse the file)
        raise ValueError("save_finetune_checkpoint: the adapters hold no tensors")
    if optimizer_state is not None:
        _flatten_tree("optimizer", dict(optimizer_state), flat)
    header = {}
    nones = [k for k, v in flat.items() if v is None]
    if nones:  # a None leaf has no tensor to write: its place is kept in the metadata
        header[_NONE_KEY] = json.dumps(nones)
    try:  # the user's annotations as JSON, their types kept (as the original's meta.json)
        header[_USER_KEY] = json.dumps(dict(metadata or {}))
    except TypeError as e:
        raise TypeError(f"save_finetune_checkpoint: metadata must be JSON values: {e}") from None
    checkpoint.save({k: v for k, v in flat.items() if v is not None}, path, header)


_NONE_KEY = "nabla.finetune.none_leaves"  # (metadata entries, not the user's)
_USER_KEY = "nabla.finetune.user_metadata"


def load_finetune_checkpoint(path, *, lora_template=None, optimizer_template=None):
    """Load what :func:`save_finetune_checkpoint` wrote.

    Args:
        path: the file.
        lora_template: optional adapters laid out as the result should be (the original
            nabla's keyword): the loaded adapters take its structure (tuples, lists, dicts)
            and each tensor its dtype; every tensor must be in the file with its shape.
        optimizer_template: optional optimizer state laid out the same way (e.g.
            ``adamw_init(lora_template)``), checked and restored like ``lora_template``.

    Returns:
        ``(adapters, optimizer_state, meta)``; ``optimizer_state`` is None when none was
        saved. ``meta`` is the original nabla's: ``{"step": int or None, "has_optimizer":
        bool, "user_metadata": the metadata saved, "tensor_keys": the file's tensor names}``.
        Without a template, nested dicts with keys ``"0"``, ``"1"``, ... come back as lists.

    Raises:
        FileNotFoundError: when ``path`` does not exist.
        ValueError: for a corrupt file, one without adapters, one without optimizer state
            for an ``optimizer_template``, or one that does not hold every tensor of a
            template with its shape (all such problems listed).
    """
    flat = checkpoint.load(path)
    header = dict(checkpoint.load_metadata(path))
    tensor_keys = sorted(flat)
    if _NONE_KEY in header:
        flat.update(dict.fromkeys(json.loads(header.pop(_NONE_KEY))))
    # (a file from before the JSON entry holds the user's strings themselves)
    user = json.loads(header[_USER_KEY]) if _USER_KEY in header else header
    adapters = {k[len("adapters/") :]: v for k, v in flat.items() if k.startswith("adapters/")}
    opt = {k[len("optimizer/") :]: v for k, v in flat.items() if k.startswith("optimizer/")}
    if not adapters:
        raise ValueError(f"load_finetune_checkpoint: {path!r} holds no adapters")
    adapters_out = _unflatten_tree(adapters)
    if lora_template is not None:
        adapters_out = _like_template(path, "adapters", flat, lora_template)
    opt_out = _unflatten_tree(opt) if opt else None
    if optimizer_template is not None:
        if not opt:
            raise ValueError(
                f"load_finetune_checkpoint: {path!r} holds no optimizer state to restore "
                "into optimizer_template (it was saved without optimizer_state)"
            )
        opt_out = _like_template(path, "optimizer", flat, dict(optimizer_template))
    step = flat.get("optimizer/step")
    meta = {
        "step": None if step is None else int(np.asarray(step.numpy()).reshape(-1)[0]),
        "has_optimizer": bool(opt),
        "user_metadata": user,
        "tensor_keys": tensor_keys,
    }
    return adapters_out, opt_out, meta


def _like_template(path, prefix: str, flat: dict, template):
    """``template`` with each tensor replaced by the file's tensor of the same path (cast to
    the template's dtype, within floats or within integers); every missing, misshapen or
    uncastable tensor is listed in one error."""
    wanted: OrderedDict = OrderedDict()
    _flatten_tree(prefix, template, wanted, "load_finetune_checkpoint")
    problems = [f"missing {k!r}" for k in wanted if k not in flat]
    problems += [  # a None leaf (no moments) against a tensor, either way round
        f"{k!r}: {'None' if flat[k] is None else 'a tensor'} in the file, "
        f"{'None' if t is None else 'a tensor'} in the template"
        for k, t in wanted.items()
        if k in flat and (flat[k] is None) != (t is None)
    ]
    wanted = OrderedDict(
        (k, t) for k, t in wanted.items() if t is not None and flat.get(k) is not None
    )
    problems += [
        f"{k!r}: shape {tuple(flat[k].shape)}, template {tuple(t.shape)}"
        for k, t in wanted.items()
        if k in flat and tuple(flat[k].shape) != tuple(t.shape)
    ]
    problems += [  # (cast as load_state_dict casts: float into float, integer into integer)
        f"{k!r}: dtype {flat[k].dtype}, template {t.dtype}"
        for k, t in wanted.items()
        if k in flat and flat[k].dtype is not t.dtype and not castable(flat[k].dtype, t.dtype)
    ]
    if problems:
        raise ValueError(
            f"load_finetune_checkpoint: {path!r} does not fit the template: {'; '.join(problems)}"
        )
    loaded = iter([flat[k].cast(t.dtype) for k, t in wanted.items()])
    return _fill(template, loaded)


def _fill(node, loaded):
    """``node`` (dicts, lists, tuples of tensors) with its tensors taken from ``loaded``, in
    the order ``_flatten_tree`` visits them."""
    if isinstance(node, dict):
        return {k: _fill(v, loaded) for k, v in node.items()}
    if isinstance(node, list | tuple):
        items = [_fill(v, loaded) for v in node]
        return type(node)(*items) if hasattr(node, "_fields") else type(node)(items)
    return None if node is None else next(loaded)

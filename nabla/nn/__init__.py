"""``nabla.nn``: modules, layers, functional layers, initializers, losses and optimizers.

``import nabla as nb`` then ``nb.nn.Linear(4, 3)``, ``nb.nn.functional.cross_entropy_loss``,
``nb.nn.optim.AdamW(model, lr=1e-3)``. See ``README.md`` in this package for the invariants.
"""

from __future__ import annotations

from . import finetune, functional, init, optim, pipeline
from .checkpoint import load, load_metadata, merge_state_dicts, save, split_state_dict
from .data import DataLoader
from .layers import (
    GELU,
    AvgPool2d,
    Conv2d,
    Dropout,
    Embedding,
    Flatten,
    Identity,
    LayerNorm,
    LeakyReLU,
    Linear,
    LogSoftmax,
    MaxPool2d,
    ReLU,
    RMSNorm,
    Sigmoid,
    SiLU,
    Softmax,
    Softplus,
    Tanh,
)
from .module import Module, ModuleDict, ModuleList, Sequential
from .transformer import MultiHeadAttention, TransformerDecoderLayer, TransformerEncoderLayer

__all__ = [
    "AvgPool2d",
    "Conv2d",
    "DataLoader",
    "Dropout",
    "Embedding",
    "Flatten",
    "GELU",
    "Identity",
    "LayerNorm",
    "LeakyReLU",
    "Linear",
    "LogSoftmax",
    "MaxPool2d",
    "Module",
    "ModuleDict",
    "ModuleList",
    "MultiHeadAttention",
    "RMSNorm",
    "ReLU",
    "Sequential",
    "SiLU",
    "Sigmoid",
    "Softmax",
    "Softplus",
    "Tanh",
    "TransformerDecoderLayer",
    "TransformerEncoderLayer",
    "finetune",
    "functional",
    "init",
    "load",
    "load_metadata",
    "merge_state_dicts",
    "optim",
    "pipeline",
    "save",
    "split_state_dict",
]

"""``nabla.nn``: modules, layers, functional layers, initializers, losses and optimizers.

``import nabla as nb`` then ``nb.nn.Linear(4, 3)``, ``nb.nn.functional.cross_entropy_loss``,
``nb.nn.optim.AdamW(model, lr=1e-3)``. See ``README.md`` in this package for the invariants.
"""

from __future__ import annotations

from . import (
    finetune,
    functional,
    init,
    initializers,
    layers,
    optim,
    parametrize,
    pipeline,
    utils,
)
from .checkpoint import load, load_metadata, merge_state_dicts, save, split_state_dict
from .data import DataLoader
from .layers import *  # noqa: F403 - every layer (layers.__all__)
from .lazy import *  # noqa: F403 - PyTorch's lazy layers (lazy.__all__)
from .lazy import __all__ as _lazy_all
from .losses import (
    BCELoss,
    BCEWithLogitsLoss,
    CosineEmbeddingLoss,
    CrossEntropyLoss,
    CTCLoss,
    GaussianNLLLoss,
    HingeEmbeddingLoss,
    HuberLoss,
    KLDivLoss,
    L1Loss,
    MarginRankingLoss,
    MSELoss,
    MultiLabelMarginLoss,
    MultiLabelSoftMarginLoss,
    MultiMarginLoss,
    NLLLoss,
    PoissonNLLLoss,
    SmoothL1Loss,
    SoftMarginLoss,
    TripletMarginLoss,
    TripletMarginWithDistanceLoss,
)
from .module import Module, ModuleDict, ModuleList, ParameterDict, ParameterList, Sequential
from .normalization import (
    BatchNorm1d,
    BatchNorm2d,
    BatchNorm3d,
    GroupNorm,
    InstanceNorm1d,
    InstanceNorm2d,
    InstanceNorm3d,
)
from .recurrent import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNCell
from .sharded_checkpoint import load_sharded, save_sharded
from .transformer import (
    MultiHeadAttention,
    MultiheadAttention,
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)
from .utils import clip_grad_norm_, clip_grad_value_

__all__ = [
    *layers.__all__,
    *_lazy_all,
    "BCELoss",
    "BCEWithLogitsLoss",
    "CrossEntropyLoss",
    "CTCLoss",
    "MultiMarginLoss",
    "MultiLabelMarginLoss",
    "TripletMarginWithDistanceLoss",
    "HuberLoss",
    "KLDivLoss",
    "L1Loss",
    "MSELoss",
    "NLLLoss",
    "SmoothL1Loss",
    "CosineEmbeddingLoss",
    "GaussianNLLLoss",
    "HingeEmbeddingLoss",
    "MarginRankingLoss",
    "MultiLabelSoftMarginLoss",
    "PoissonNLLLoss",
    "SoftMarginLoss",
    "TripletMarginLoss",
    "BatchNorm1d",
    "BatchNorm2d",
    "BatchNorm3d",
    "GroupNorm",
    "InstanceNorm2d",
    "InstanceNorm3d",
    "InstanceNorm1d",
    "DataLoader",
    "GRU",
    "GRUCell",
    "LSTM",
    "LSTMCell",
    "RNN",
    "RNNCell",
    "Module",
    "ModuleDict",
    "ParameterList",
    "ParameterDict",
    "ModuleList",
    "MultiHeadAttention",
    "MultiheadAttention",
    "Sequential",
    "Transformer",
    "TransformerDecoder",
    "TransformerDecoderLayer",
    "TransformerEncoder",
    "TransformerEncoderLayer",
    "clip_grad_norm_",
    "clip_grad_value_",
    "finetune",
    "functional",
    "init",
    "initializers",
    "load",
    "load_metadata",
    "load_sharded",
    "merge_state_dicts",
    "optim",
    "pipeline",
    "save",
    "save_sharded",
    "split_state_dict",
    "utils",
    "parametrize",
]

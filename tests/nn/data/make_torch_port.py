"""Record PyTorch modules' weights, inputs and outputs for tests/nn/test_nn_torch_port.py
(needs torch):

    python tests/nn/data/make_torch_port.py

Each case is a PyTorch module whose layouts differ from nabla's (a square ``Linear`` and
``Conv2d``, where a weight of the other layout loads without a shape error, and the
transformer layers and ``Transformer``, whose attention PyTorch packs): its
``state_dict()``, an input, and its output in eval mode. ``CASES`` is shared with the
test: each builds the module from a ``torch.nn``-like namespace.
"""

from pathlib import Path

import numpy as np

HERE = Path(__file__).parent

CASES = {
    "linear": lambda T: T.Linear(5, 5),
    "conv2d": lambda T: T.Conv2d(3, 3, 3, padding=1),
    "encoder": lambda T: T.TransformerEncoderLayer(8, 2, 16, 0.0),
    "encoder_pre_gelu": lambda T: T.TransformerEncoderLayer(
        8, 2, 16, 0.0, activation="gelu", norm_first=True
    ),
    "decoder": lambda T: T.TransformerDecoderLayer(8, 2, 16, 0.0),
    "stack": lambda T: T.TransformerEncoder(
        T.TransformerEncoderLayer(8, 2, 16, 0.0, batch_first=True),
        2,
        norm=T.LayerNorm(8),
        enable_nested_tensor=False,
    ),
    "transformer": lambda T: T.Transformer(8, 2, 2, 2, 16, 0.0),
}

INPUTS = {  # PyTorch's layouts: (N, C, H, W) images, (L, N, E) sequences unless batch_first
    "linear": (3, 5),
    "conv2d": (2, 3, 6, 6),
    "encoder": (4, 2, 8),
    "encoder_pre_gelu": (4, 2, 8),
    "decoder": (4, 2, 8),
    "stack": (2, 4, 8),
    "transformer": (5, 2, 8),
}
# the second argument where there is one (a memory, a target), and the transformer's
# decoder self-attention mask: causal, PyTorch's generate_square_subsequent_mask(4)
SECOND = {"decoder": (3, 2, 8), "transformer": (4, 2, 8)}


def main():
    import torch

    torch.manual_seed(0)
    out = {}
    for name, make in CASES.items():
        m = make(torch.nn).eval()
        x = torch.randn(*INPUTS[name])
        args = (x, torch.randn(*SECOND[name])) if name in SECOND else (x,)
        kwargs = {}
        if name == "transformer":
            kwargs["tgt_mask"] = torch.nn.Transformer.generate_square_subsequent_mask(4)
        with torch.no_grad():
            y = m(*args, **kwargs)
        for k, v in m.state_dict().items():
            out[f"{name}/sd/{k}"] = v.numpy()
        for i, a in enumerate(args):
            out[f"{name}/in{i}"] = a.numpy()
        out[f"{name}/out"] = y.numpy()
    np.savez_compressed(HERE / "torch_port.npz", **out)
    print(f"wrote {len(CASES)} cases to {HERE / 'torch_port.npz'} (torch {torch.__version__})")


if __name__ == "__main__":
    main()

"""Record PyTorch's results for tests/nn/test_nn_conv_rnn.py into conv_rnn.npz.

Run with torch installed: ``python tests/nn/data/make_conv_rnn.py``. Inputs and outputs are
stored in PyTorch's layouts (channels first); the tests move the channels last.
"""

import os

import numpy as np
import torch

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "conv_rnn.npz")
# the configurations the tests read by index: keep in step with the test file
CONV1D = [  # in, out, kernel, stride, padding, dilation, groups, length
    (4, 6, 3, 1, 1, 1, 1, 10),
    (4, 6, 3, 2, 0, 2, 2, 11),
    (4, 8, 4, 1, "same", 2, 4, 9),
]
CONVT = [  # in, out, kernel, stride, padding, output_padding, groups, dilation
    (4, 6, 3, 1, 0, 0, 1, 1),
    (4, 6, 3, 2, 1, 1, 2, 1),
    (4, 6, (3, 2), (2, 3), (1, 0), (1, 2), 1, 1),
    (2, 4, 3, 2, 2, 1, 2, 2),
]
INTERP = [  # mode, align_corners, size, scale_factor
    ("nearest", None, (7, 9), None),
    ("nearest", None, None, 1.7),
    ("nearest", None, (3, 2), None),
    ("nearest-exact", None, None, (0.6, 2.3)),
    ("bilinear", False, (7, 9), None),
    ("bilinear", False, None, 2),
    ("bilinear", False, None, (0.6, 2.3)),
    ("bilinear", True, (7, 9), None),
    ("bilinear", True, None, 1.7),
    ("bilinear", True, (3, 1), None),
]
RNN = [("LSTM", False), ("LSTM", True), ("GRU", False), ("GRU", True)]  # kind, batch_first
INTERP_MORE = [  # as INTERP; recorded last, so the earlier draws keep their values
    ("bicubic", False, (7, 9), None),
    ("bicubic", False, None, (0.6, 2.3)),
    ("bicubic", True, None, 1.7),
    ("bicubic", True, (3, 1), None),
    ("area", None, (3, 4), None),
    ("area", None, None, 1.7),
    ("bicubic", False, None, 1.1),  # 5 * 1.1 and 6 * 1.1 keep the sizes, not the samples
]


def main():
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    rec = {}

    def arr(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    def grads(prefix, loss, named):
        loss.backward()
        for name, t in named.items():
            rec[f"{prefix}_d{name}"] = t.grad.numpy()

    for i, (cin, cout, k, s, p, d, g, n) in enumerate(CONV1D):
        x, w, b = arr(2, cin, n), arr(cout, cin // g, k), arr(cout)
        tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
        y = torch.nn.functional.conv1d(tx, tw, tb, s, p, d, g)
        ct = arr(*y.shape)
        rec.update({f"c1_{i}_x": x, f"c1_{i}_w": w, f"c1_{i}_b": b, f"c1_{i}_ct": ct})
        rec[f"c1_{i}_y"] = y.detach().numpy()
        grads(f"c1_{i}", (y * torch.tensor(ct)).sum(), {"x": tx, "w": tw, "b": tb})

    for i, (cin, cout, k, s, p, op, g, d) in enumerate(CONVT):
        kk = k if isinstance(k, tuple) else (k, k)
        x, w, b = arr(2, cin, 5, 6), arr(cin, cout // g, *kk), arr(cout)
        tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
        y = torch.nn.functional.conv_transpose2d(tx, tw, tb, s, p, op, g, d)
        ct = arr(*y.shape)
        rec.update({f"ct_{i}_x": x, f"ct_{i}_w": w, f"ct_{i}_b": b, f"ct_{i}_ct": ct})
        rec[f"ct_{i}_y"] = y.detach().numpy()
        grads(f"ct_{i}", (y * torch.tensor(ct)).sum(), {"x": tx, "w": tw, "b": tb})

    def interpolations(prefix, configs):
        for i, (mode, ac, size, sf) in enumerate(configs):
            x = arr(2, 3, 5, 6)
            tx = torch.tensor(x, requires_grad=True)
            y = torch.nn.functional.interpolate(
                tx, size=size, scale_factor=sf, mode=mode, align_corners=ac
            )
            ct = arr(*y.shape)
            name = f"{prefix}_{i}"
            rec.update({f"{name}_x": x, f"{name}_y": y.detach().numpy(), f"{name}_ct": ct})
            grads(name, (y * torch.tensor(ct)).sum(), {"x": tx})

    interpolations("up", INTERP)

    for i, (kind, batch_first) in enumerate(RNN):
        cls = getattr(torch.nn, kind)
        m = cls(5, 7, num_layers=2, bidirectional=True, batch_first=batch_first)
        for name, p in m.state_dict().items():
            rec[f"rnn_{i}_p_{name}"] = p.numpy()
        x = arr(3, 6, 5) if batch_first else arr(6, 3, 5)
        h0, c0 = arr(4, 3, 7), arr(4, 3, 7)
        tx, th0, tc0 = (torch.tensor(a, requires_grad=True) for a in (x, h0, c0))
        if kind == "LSTM":
            y, (h, c) = m(tx, (th0, tc0))
            rec[f"rnn_{i}_c"] = c.detach().numpy()
            extra = (c * c).sum()
        else:
            y, h = m(tx, th0)
            extra = 0.0
        ct = arr(*y.shape)
        rec.update({f"rnn_{i}_x": x, f"rnn_{i}_h0": h0, f"rnn_{i}_c0": c0, f"rnn_{i}_ct": ct})
        rec[f"rnn_{i}_y"], rec[f"rnn_{i}_h"] = y.detach().numpy(), h.detach().numpy()
        loss = (y * torch.tensor(ct)).sum() + h.sum() + extra
        named = {"x": tx, "h0": th0, **({"c0": tc0} if kind == "LSTM" else {})}
        named.update({f"p_{n}": p for n, p in m.named_parameters()})
        grads(f"rnn_{i}", loss, named)

    interpolations("up2", INTERP_MORE)  # (after the others: their draws keep their values)

    np.savez_compressed(OUT, **rec)
    print(f"wrote {len(rec)} arrays to {OUT}")


if __name__ == "__main__":
    main()

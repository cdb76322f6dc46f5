"""A transformer-block training step (forward, backward, AdamW) with ``nabla.nn`` beside
``jax.jit`` and PyTorch eager, when those import.

The block is ``nn.TransformerEncoderLayer`` (post-norm, ReLU, no dropout) followed by a mean
squared error against a fixed target. Every peer starts from the same weights, and the
first-step losses are checked to agree before anything is timed.

Rows:
- nabla functional: ``value_and_grad`` + ``adamw_update`` inside ``nb.compile`` (one graph per
  step);
- nabla PyTorch style: a compiled forward, ``loss.backward()``, ``AdamW.step()``;
- nabla compile_step: ``AdamW(model).compile_step(loss_fn)``, PyTorch-style in-place updates
  with forward, backward and update in one compiled graph;
- JAX: the same math written with ``jax.numpy``, ``jax.jit`` of the whole step;
- PyTorch: ``torch.nn.TransformerEncoderLayer`` + ``torch.optim.AdamW``, eager.

With ``--lstm``: an ``nn.LSTM`` forward + backward (sum of the outputs; no optimizer) with
``nb.compile(nb.grad(...))`` beside the same layer written by hand in NumPy (``numpy_lstm``,
its gradients checked against nabla's) and PyTorch eager, from the same weights.
Under ``auto`` the LSTM row is timed once its programs are past MAX's compile and the
executor race, as in ``bench_peers.py``. The CNN row is not: its step's MAX compile (over
15 minutes here, cold) would hold the run, and the step runs on NumPy meanwhile (and that
compile shares the cores with every row's timing: use ``--backend numpy`` to compare).

With ``--cnn``: a BatchNorm CNN training step (``examples/digits_cnn.py``'s model: two 3x3
convolutions with BatchNorm, max pooling, a linear head; batch 64 of 8x8 images;
cross-entropy, Adam) with ``opt.compile_step`` beside PyTorch eager and ``torch.compile``
(when it works here) and the same step written by hand in NumPy (``numpy_cnn``, its
gradients checked against nabla's), from the same weights, first-step losses checked equal.

Every row runs in a process of its own, built first, then timed one at a time while the
others wait (``_timing.isolated_rounds_ms``): each row's median over ``--reps`` steps, best
of three rounds. In one process, each library's helper threads (OpenBLAS's, OpenMP's) kept
polling for work while the other library ran, and took its second core: PyTorch's LSTM
step took 77 ms there against 37-42 ms in its own process.

Run: ``python benchmarks/bench_nn.py [--backend numpy|max|auto] [--reps N] [--batch B]
[--seq L] [--d-model D] [--lstm] [--cnn]``.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import NamedTuple

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _timing import blas_kernel, isolated_rounds_ms, serve  # noqa: E402
from bench_peers import _settle  # noqa: E402 - under auto: past MAX's compile and the race

import nabla as nb  # noqa: E402

try:  # optional peers
    import jax
    import jax.numpy as jnp
except Exception:  # noqa: BLE001 - any import problem: no JAX row
    jax = None
try:
    import torch
except Exception:  # noqa: BLE001
    torch = None

nn = nb.nn
LR, BETAS, EPS, WD = 1e-3, (0.9, 0.999), 1e-8, 1e-2


# ----------------------------------------------------------------------------- nabla
def nabla_rows(layer, x, y):
    def loss_fn(m, x, y):
        return nn.functional.mse_loss(m(x), y)

    model = nb.tree_map(nb.detach, layer)  # own copies: the PyTorch-style row updates in place
    state = {"model": model, "opt": nn.optim.adamw_init(model)}

    @nb.compile
    def step(m, s, x, y):
        loss, g = nb.value_and_grad(loss_fn)(m, x, y)
        m, s = nn.optim.adamw_update(m, g, s, lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)
        return m, s, loss

    def functional():
        state["model"], state["opt"], loss = step(state["model"], state["opt"], x, y)
        nb.realize(loss, *nb.tree_leaves(state["model"]))
        return loss

    torch_style = nb.tree_map(nb.detach, layer).requires_grad_(True)
    opt = nn.optim.AdamW(torch_style, lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)
    forward = nb.compile(loss_fn)

    def pytorch_style():
        opt.zero_grad()
        loss = forward(torch_style, x, y)
        loss.backward()
        opt.step()
        return loss

    compiled_style = nb.tree_map(nb.detach, layer).requires_grad_(True)
    compiled_step = nn.optim.AdamW(
        compiled_style, lr=LR, betas=BETAS, eps=EPS, weight_decay=WD
    ).compile_step(loss_fn)

    rows = {
        "nabla functional": functional,
        "nabla PyTorch style": pytorch_style,
        "nabla compile_step": lambda: compiled_step(x, y),
    }
    return rows, step


# ----------------------------------------------------------------------------- JAX
def jax_row(sd, x, y, nhead):
    p = {k: jnp.asarray(v) for k, v in sd.items()}

    def ln(h, w, b):
        mu = h.mean(-1, keepdims=True)
        var = ((h - mu) ** 2).mean(-1, keepdims=True)
        return (h - mu) / jnp.sqrt(var + 1e-5) * w + b

    def block(p, x):
        n, length, d = x.shape

        def proj(name, h):
            return h @ p[f"self_attn.{name}.weight"] + p[f"self_attn.{name}.bias"]

        def heads(h):
            return h.reshape(n, length, nhead, -1).transpose(0, 2, 1, 3)

        q, k, v = (heads(proj(nm, x)) for nm in ("q_proj", "k_proj", "v_proj"))
        att = jax.nn.softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(d // nhead), axis=-1)
        a = proj("out_proj", (att @ v).transpose(0, 2, 1, 3).reshape(n, length, d))
        h = ln(x + a, p["norm1.weight"], p["norm1.bias"])
        f = jax.nn.relu(h @ p["linear1.weight"] + p["linear1.bias"])
        f = f @ p["linear2.weight"] + p["linear2.bias"]
        return ln(h + f, p["norm2.weight"], p["norm2.bias"])

    def loss_fn(p, x, y):
        return ((block(p, x) - y) ** 2).mean()

    @jax.jit
    def step(p, m, v, t, x, y):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        t = t + 1
        m = jax.tree_util.tree_map(lambda a, b: BETAS[0] * a + (1 - BETAS[0]) * b, m, g)
        v = jax.tree_util.tree_map(lambda a, b: BETAS[1] * a + (1 - BETAS[1]) * b * b, v, g)
        c1, c2 = 1 - BETAS[0] ** t, 1 - BETAS[1] ** t

        def upd(w, a, b):
            return w - LR * WD * w - LR * (a / c1) / (jnp.sqrt(b / c2) + EPS)

        return jax.tree_util.tree_map(upd, p, m, v), m, v, t, loss

    zeros = jax.tree_util.tree_map(jnp.zeros_like, p)
    state = [p, zeros, zeros, jnp.zeros((), jnp.float32)]
    xj, yj = jnp.asarray(x), jnp.asarray(y)

    def run():
        *rest, loss = step(*state, xj, yj)
        state[:] = rest
        return jax.block_until_ready(loss)

    return run


# ----------------------------------------------------------------------------- PyTorch
def torch_row(sd, x, y, d_model, nhead, ff):
    layer = torch.nn.TransformerEncoderLayer(d_model, nhead, ff, dropout=0.0, batch_first=True)
    t = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in sd.items()}
    with torch.no_grad():
        qkv = [t[f"self_attn.{n}.weight"].T for n in ("q_proj", "k_proj", "v_proj")]
        layer.self_attn.in_proj_weight.copy_(torch.cat(qkv, 0))
        layer.self_attn.in_proj_bias.copy_(
            torch.cat([t[f"self_attn.{n}.bias"] for n in ("q_proj", "k_proj", "v_proj")])
        )
        layer.self_attn.out_proj.weight.copy_(t["self_attn.out_proj.weight"].T)
        layer.self_attn.out_proj.bias.copy_(t["self_attn.out_proj.bias"])
        for name in ("linear1", "linear2"):
            getattr(layer, name).weight.copy_(t[f"{name}.weight"].T)
            getattr(layer, name).bias.copy_(t[f"{name}.bias"])
        for name in ("norm1", "norm2"):
            getattr(layer, name).weight.copy_(t[f"{name}.weight"])
            getattr(layer, name).bias.copy_(t[f"{name}.bias"])
    opt = torch.optim.AdamW(layer.parameters(), lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)

    def run():
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(layer(xt), yt)
        loss.backward()
        opt.step()
        return loss.detach()

    return run


# ----------------------------------------------------------------------------- rows
# The rows compare libraries step for step, so each row runs in a process of its own
# (``_timing.isolated_rounds_ms``): in one process each library's helper threads took the
# other's second core (PyTorch's LSTM step ran 77 ms beside ours, 37-42 ms alone).
NABLA_ROWS = ("nabla functional", "nabla PyTorch style", "nabla compile_step")


def transformer_step(name: str, args):
    """Row ``name``'s transformer-block training step, returning the loss as a float, and
    (for ``nabla functional``) a function giving its compiled step's cache stats."""
    d, ff = args.d_model, 4 * args.d_model
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.batch, args.seq, d)).astype(np.float32)
    y = rng.standard_normal((args.batch, args.seq, d)).astype(np.float32)
    layer = nn.TransformerEncoderLayer(d, args.nhead, ff, dropout=0.0, key=nb.random.key(0))
    if name in NABLA_ROWS:
        rows, compiled = nabla_rows(layer, nb.constant(x), nb.constant(y))
        fn = rows[name]
        stats = (lambda: compiled.stats) if name == "nabla functional" else None
        return lambda: float(fn().numpy()), stats
    sd = {k: v.numpy() for k, v in layer.state_dict().items()}
    if name == "JAX jit":
        fn = jax_row(sd, x, y, args.nhead)
    else:
        fn = torch_row(sd, x, y, d, args.nhead, ff)
    return lambda: float(np.asarray(fn())), None


# ----------------------------------------------------------------------------- LSTM, CNN
class LSTMShape(NamedTuple):
    """The LSTM rows' layer and input: steps, batch, hidden and input features."""

    seq: int = 64
    batch: int = 32
    hidden: int = 256
    features: int = 256


class CNNShape(NamedTuple):
    """The CNN rows' batch of 8x8 images and the first convolution's channels."""

    batch: int = 64
    channels: int = 16


LSTM_SHAPE, CNN_SHAPE = LSTMShape(), CNNShape()
LSTM_ROWS = {
    "nabla LSTM fwd+bwd": "nabla",
    "NumPy by hand fwd+bwd": "numpy",
    "PyTorch LSTM fwd+bwd": "torch",
}
CNN_ROWS = {
    "nabla compile_step": "nabla",
    "NumPy by hand": "numpy",
    "PyTorch eager": "torch",
    "torch.compile": "torch.compile",
}
ROUNDS = 3


def lstm_step(lib: str, backend: str):
    """``nn.LSTM`` forward + backward (the outputs' sum) as a step returning the loss:
    nabla's compiled gradient, or from the same weights the layer by hand in NumPy
    (``numpy_lstm``) or PyTorch eager. ``backend``: nabla's (``auto`` waits for it to
    settle)."""
    seq, batch, hidden, features = LSTM_SHAPE
    x = np.random.default_rng(1).standard_normal((seq, batch, features)).astype(np.float32)
    lstm = nn.LSTM(features, hidden, key=nb.random.key(1))
    if lib == "nabla":
        grad = nb.compile(nb.value_and_grad(lambda m, x: m(x)[0].sum()))
        xn, functional = nb.constant(x), nb.tree_map(nb.detach, lstm)

        def nabla_step():
            loss, g = grad(functional, xn)
            nb.realize(loss, *nb.tree_leaves(g))
            return float(loss.numpy())

        _settle(nabla_step, backend, grad)  # past MAX's compile and the executor race
        return nabla_step
    weights = {k: v.numpy() for k, v in lstm.state_dict().items()}
    if lib == "numpy":
        by_hand = numpy_lstm(weights, x)
        # its gradients checked against nabla's before it is timed
        _, g = nb.value_and_grad(lambda m, x: m(x)[0].sum())(nb.tree_map(nb.detach, lstm), x)
        got = by_hand()[1]
        for k, v in g.state_dict().items():
            np.testing.assert_allclose(got[k], v.numpy(), rtol=1e-3, atol=1e-3, err_msg=k)
        return lambda: by_hand()[0]
    t = torch.nn.LSTM(features, hidden)
    t.load_state_dict({k: torch.tensor(v) for k, v in weights.items()})
    xt = torch.from_numpy(x)

    def torch_step():
        t.zero_grad()
        loss = t(xt)[0].sum()
        loss.backward()
        return float(loss.detach())

    return torch_step


def numpy_lstm(weights: dict, x: np.ndarray):
    """One LSTM layer's forward and backward (the outputs' sum) written by hand in NumPy,
    as a NumPy programmer would: the input projection as one GEMM, a loop over the steps
    that keeps every step's gate activations, a reverse loop that reads them (nothing
    recomputed), the weights' gradients as one GEMM each. PyTorch's weight layout and gate
    order (i, f, g, o). Returns ``step() -> (loss, gradients by state_dict name)``: what
    NumPy itself does, beside which our NumPy backend is measured."""
    w_ih, w_hh = weights["weight_ih_l0"], weights["weight_hh_l0"]
    bias = weights["bias_ih_l0"] + weights["bias_hh_l0"]
    steps, batch, features = x.shape
    hidden = w_hh.shape[1]
    w_ih_t, w_hh_t = np.ascontiguousarray(w_ih.T), np.ascontiguousarray(w_hh.T)
    rows = x.reshape(steps * batch, features)
    i_, f_, g_, o_ = (slice(k * hidden, (k + 1) * hidden) for k in range(4))

    def sigmoid(a, out):
        np.negative(a, out=out)
        np.exp(out, out=out)
        out += 1
        return np.reciprocal(out, out=out)

    def step():
        pre = (rows @ w_ih_t).reshape(steps, batch, 4 * hidden)
        pre += bias
        acts = np.empty_like(pre)  # i, f, g, o after their activations
        hs = np.zeros((steps + 1, batch, hidden), np.float32)
        cs = np.zeros((steps + 1, batch, hidden), np.float32)
        tanh_c = np.empty((steps, batch, hidden), np.float32)
        gates = np.empty((batch, 4 * hidden), np.float32)
        for t in range(steps):
            np.matmul(hs[t], w_hh_t, out=gates)
            gates += pre[t]
            a = acts[t]
            sigmoid(gates[:, i_.start : f_.stop], a[:, i_.start : f_.stop])
            np.tanh(gates[:, g_], out=a[:, g_])
            sigmoid(gates[:, o_], a[:, o_])
            np.multiply(a[:, f_], cs[t], out=cs[t + 1])
            cs[t + 1] += a[:, i_] * a[:, g_]
            np.tanh(cs[t + 1], out=tanh_c[t])
            np.multiply(a[:, o_], tanh_c[t], out=hs[t + 1])
        loss = float(hs[1:].sum(dtype=np.float64))
        d_gates = np.empty_like(pre)
        dh = np.zeros((batch, hidden), np.float32)
        dc = np.zeros((batch, hidden), np.float32)
        for t in range(steps - 1, -1, -1):
            dh += 1.0  # the loss's cotangent of h_t
            a, d = acts[t], d_gates[t]
            i, f, g, o = a[:, i_], a[:, f_], a[:, g_], a[:, o_]
            np.multiply(dh, tanh_c[t], out=d[:, o_])
            d[:, o_] *= o * (1 - o)
            dc += dh * o * (1 - tanh_c[t] * tanh_c[t])
            np.multiply(dc, g, out=d[:, i_])
            d[:, i_] *= i * (1 - i)
            np.multiply(dc, cs[t], out=d[:, f_])
            d[:, f_] *= f * (1 - f)
            np.multiply(dc, i, out=d[:, g_])
            d[:, g_] *= 1 - g * g
            dc *= f
            dh = d @ w_hh
        flat = d_gates.reshape(steps * batch, 4 * hidden)
        d_bias = flat.sum(0)
        grads = {
            "weight_ih_l0": flat.T @ rows,
            "weight_hh_l0": flat.T @ hs[:-1].reshape(steps * batch, hidden),
            "bias_ih_l0": d_bias,
            "bias_hh_l0": d_bias,
        }
        return loss, grads

    return step


def cnn_step(lib: str, backend: str):
    """``examples/digits_cnn.py``'s model, one training step (cross-entropy, Adam) returning
    the loss: nabla's ``compile_step``, or from the same weights the step by hand in NumPy
    (``numpy_cnn``), PyTorch eager or ``torch.compile`` (None when ``torch.compile``
    cannot build here). ``backend``: nabla's."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
    from digits_cnn import DigitsCNN  # noqa: PLC0415 - the example's model, benchmarks only

    batch, channels = CNN_SHAPE
    rng = np.random.default_rng(2)
    x = rng.random((batch, 8, 8, 1), dtype=np.float32)
    y = rng.integers(0, 10, batch).astype(np.int32)
    model = DigitsCNN(channels, key=nb.random.key(3))
    if lib == "nabla":
        opt = nn.optim.Adam(model, lr=1e-3)
        step = opt.compile_step(lambda m, x, y: nn.functional.cross_entropy_loss(m(x), y))
        xn, yn = nb.constant(x), nb.constant(y)
        return lambda: float(step(xn, yn).numpy())
    weights = {k: v.numpy() for k, v in model.state_dict().items()}
    if lib == "numpy":
        by_hand = numpy_cnn(weights, x, y)
        # its gradients checked against nabla's before it is timed
        model.requires_grad_(True)
        nn.functional.cross_entropy_loss(model(nb.constant(x)), nb.constant(y)).backward()
        got = by_hand()[1]
        for k, param in model.named_parameters():
            np.testing.assert_allclose(got[k], param.grad.numpy(), rtol=1e-3, atol=1e-5, err_msg=k)
        by_hand = numpy_cnn(weights, x, y)  # (afresh: the check took an Adam step)
        return lambda: by_hand()[0]
    return _torch_cnn(weights, x, y, channels, compiled=lib == "torch.compile")


def numpy_cnn(weights: dict, x: np.ndarray, y: np.ndarray, lr=1e-3, betas=(0.9, 0.999), eps=1e-8):
    """``examples/digits_cnn.py``'s training step written by hand in NumPy, as a NumPy
    programmer would: NHWC, each convolution an im2col and one GEMM (its input gradient a
    GEMM and a col2im), BatchNorm's closed-form backward (its running statistics updated),
    max pooling by a reshape, Adam. Returns ``step() -> (loss, gradients by state_dict
    name)``; ``lr``, ``betas`` and ``eps`` are Adam's."""
    names = ["conv1.weight", "bn1.weight", "bn1.bias", "conv2.weight"]
    names += ["bn2.weight", "bn2.bias", "head.weight", "head.bias"]
    p = {k: np.array(weights[k], np.float32) for k in names}
    stats = ("bn1.running_mean", "bn1.running_var", "bn2.running_mean", "bn2.running_var")
    run = {k: np.array(weights[k], np.float32) for k in stats}
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros_like(v) for k, v in p.items()}
    count = [0]
    n = x.shape[0]
    onehot = np.eye(10, dtype=np.float32)[y]

    def im2col(a):  # (N, H, W, C) -> (N*H*W, 9*C), 3x3 windows, padding 1
        padded = np.pad(a, ((0, 0), (1, 1), (1, 1), (0, 0)))
        win = sliding_window_view(padded, (3, 3), axis=(1, 2))  # N, H, W, C, 3, 3
        return win.transpose(0, 1, 2, 4, 5, 3).reshape(-1, 9 * a.shape[-1])

    def col2im(cols, shape):  # the adjoint of im2col
        nb_, h, w, c = shape
        out = np.zeros((nb_, h + 2, w + 2, c), np.float32)
        taps = cols.reshape(nb_, h, w, 3, 3, c)
        for i in range(3):
            for j in range(3):
                out[:, i : i + h, j : j + w] += taps[:, :, :, i, j]
        return out[:, 1:-1, 1:-1]

    def bn_forward(z, gamma, beta, key):
        mean = z.mean(0)
        var = z.var(0)
        inv = 1.0 / np.sqrt(var + 1e-5)
        xhat = (z - mean) * inv
        rows = z.shape[0]
        run[f"{key}.running_mean"] = 0.9 * run[f"{key}.running_mean"] + 0.1 * mean
        run[f"{key}.running_var"] = 0.9 * run[f"{key}.running_var"] + 0.1 * var * rows / (rows - 1)
        return xhat * gamma + beta, xhat, inv

    def bn_backward(dy, xhat, inv, gamma):
        dbeta = dy.sum(0)
        dgamma = (dy * xhat).sum(0)
        dz = (gamma * inv / dy.shape[0]) * (dy.shape[0] * dy - dbeta - xhat * dgamma)
        return dz, dgamma, dbeta

    def step():
        c1 = im2col(x)
        z1 = c1 @ p["conv1.weight"].reshape(9, -1)
        y1, xh1, inv1 = bn_forward(z1, p["bn1.weight"], p["bn1.bias"], "bn1")
        a1 = np.maximum(y1, 0)
        ch = a1.shape[-1]
        c2 = im2col(a1.reshape(n, 8, 8, ch))
        z2 = c2 @ p["conv2.weight"].reshape(9 * ch, -1)
        y2, xh2, inv2 = bn_forward(z2, p["bn2.weight"], p["bn2.bias"], "bn2")
        a2 = np.maximum(y2, 0).reshape(n, 4, 2, 4, 2, -1)
        pooled = a2.max(axis=(2, 4))
        flat = pooled.reshape(n, -1)
        logits = flat @ p["head.weight"] + p["head.bias"]
        shift = logits - logits.max(1, keepdims=True)
        e = np.exp(shift)
        s = e.sum(1, keepdims=True)
        loss = float((np.log(s[:, 0]) - shift[np.arange(n), y]).mean())
        dlogits = (e / s - onehot) / n
        g = {"head.weight": flat.T @ dlogits, "head.bias": dlogits.sum(0)}
        dpool = (dlogits @ p["head.weight"].T).reshape(pooled.shape)
        mask = a2 == pooled[:, :, None, :, None]  # (a tie below 0 gets no gradient: ReLU)
        da2 = (mask * dpool[:, :, None, :, None]).reshape(-1, pooled.shape[-1])
        dz2, g["bn2.weight"], g["bn2.bias"] = bn_backward(
            da2 * (y2 > 0), xh2, inv2, p["bn2.weight"]
        )
        g["conv2.weight"] = (c2.T @ dz2).reshape(p["conv2.weight"].shape)
        da1 = col2im(dz2 @ p["conv2.weight"].reshape(9 * ch, -1).T, (n, 8, 8, ch)).reshape(-1, ch)
        dz1, g["bn1.weight"], g["bn1.bias"] = bn_backward(
            da1 * (y1 > 0), xh1, inv1, p["bn1.weight"]
        )
        g["conv1.weight"] = (c1.T @ dz1).reshape(p["conv1.weight"].shape)
        count[0] += 1
        t = count[0]
        for k in names:  # Adam
            m[k] = betas[0] * m[k] + (1 - betas[0]) * g[k]
            v[k] = betas[1] * v[k] + (1 - betas[1]) * g[k] * g[k]
            mh = m[k] / (1 - betas[0] ** t)
            vh = v[k] / (1 - betas[1] ** t)
            p[k] -= lr * mh / (np.sqrt(vh) + eps)
        return loss, g

    return step


def _worker(args) -> None:
    """``--worker ROW``: build that row's step in this process and serve its timing."""
    kind, name = args.worker.split(":", 1)
    after = None
    if kind == "lstm":
        step = lstm_step(LSTM_ROWS[name], args.backend)
    elif kind == "cnn":
        step = cnn_step(CNN_ROWS[name], args.backend)
    else:
        step, stats = transformer_step(name, args)
        if stats is not None:
            after = lambda: f"{name}: nabla compile stats {stats()}"  # noqa: E731
    if step is not None:
        serve(step, after)


def _isolated(kind: str, rows: list, args) -> tuple:
    """``isolated_rounds_ms`` of ``rows`` (names of the ``kind`` of row: ``transformer``,
    ``lstm`` or ``cnn``), each in a worker running this script."""
    me = os.path.abspath(__file__)
    shape = ["--batch", args.batch, "--seq", args.seq, "--d-model", args.d_model]
    shape = [str(v) for v in shape + ["--nhead", args.nhead]]
    workers = {
        name: [me, "--worker", f"{kind}:{name}", "--backend", args.backend, *shape] for name in rows
    }
    return isolated_rounds_ms(workers, args.reps, ROUNDS)


def _available(lib: str) -> bool:
    """Whether a row of ``lib`` (``nabla``, ``numpy``, ``torch``, ``torch.compile``) can run:
    PyTorch's rows need it installed."""
    return not lib.startswith("torch") or torch is not None


def _agree(firsts: dict, what: str) -> None:
    ref = firsts[next(iter(firsts))]["value"]
    for name, first in firsts.items():
        if abs(first["value"] - ref) > 1e-3 * max(1.0, abs(ref)):
            raise SystemExit(f"{what} first-step loss differs: {name} {first['value']} vs {ref}")


def lstm_rows(args):
    """``nn.LSTM`` forward + backward: nabla (compiled gradient), the layer by hand in NumPy
    and PyTorch eager."""
    seq, batch, hidden, features = LSTM_SHAPE
    print(
        f"\nLSTM input {features}, hidden {hidden}, seq {seq} x batch {batch}; forward + backward"
    )
    rows = [name for name, lib in LSTM_ROWS.items() if _available(lib)]
    firsts, ms = _isolated("lstm", rows, args)
    _agree(firsts, "LSTM")
    print(f"(median of {args.reps} steps, best of {ROUNDS} rounds, each row in its own process)")
    for name in ms:
        print(f"{name:<22}{ms[name]:>12.2f} ms")
    ours = ms["nabla LSTM fwd+bwd"]
    for name in ("NumPy by hand fwd+bwd", "PyTorch LSTM fwd+bwd"):
        if name in ms:
            print(f"nabla / {name.split(' fwd')[0]}: {ours / ms[name]:.2f}x")
    print(f"load average {os.getloadavg()[0]:.2f}")


def cnn_rows(args):
    """A BatchNorm CNN training step: nabla ``compile_step``, the step by hand in NumPy and
    PyTorch (eager, compiled); the ratios are to the fastest PyTorch row."""
    print(
        f"\nBatchNorm CNN, batch {CNN_SHAPE.batch} of 8x8, channels {CNN_SHAPE.channels}; "
        "forward + backward + Adam"
    )
    rows = [name for name, lib in CNN_ROWS.items() if _available(lib)]
    firsts, times = _isolated("cnn", rows, args)
    _agree(firsts, "CNN")
    peers = [ms for name, ms in times.items() if CNN_ROWS[name].startswith("torch")]
    best = min(peers) if peers else None
    print(f"(median of {args.reps} steps, best of {ROUNDS} rounds, each row in its own process)")
    for name, ms in times.items():
        ratio = f"{ms / best:10.2f}x" if best else ""
        print(f"{name:<22}{ms:>12.2f} ms{ratio}")
    if best:
        print("(ratios: to the fastest of PyTorch eager and torch.compile)")
    print(f"load average {os.getloadavg()[0]:.2f}")


def _torch_cnn(weights, x, y, channels, compiled):
    """The same model and step in PyTorch (NCHW), from nabla's weights; None when
    ``torch.compile`` cannot build here."""
    tnn = torch.nn

    class Net(tnn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = tnn.Conv2d(1, channels, 3, padding=1, bias=False)
            self.bn1 = tnn.BatchNorm2d(channels)
            self.conv2 = tnn.Conv2d(channels, 2 * channels, 3, padding=1, bias=False)
            self.bn2 = tnn.BatchNorm2d(2 * channels)
            self.head = tnn.Linear(2 * channels * 16, 10)

        def forward(self, v):
            v = torch.relu(self.bn1(self.conv1(v)))
            v = torch.relu(self.bn2(self.conv2(v)))
            v = torch.nn.functional.max_pool2d(v, 2)  # NCHW -> flatten as NHWC for the head
            return self.head(v.permute(0, 2, 3, 1).reshape(v.shape[0], -1))

    net = Net()
    state = {}
    for k, v in weights.items():
        v = torch.tensor(v)
        if k.endswith(("conv1.weight", "conv2.weight")):
            v = v.permute(3, 2, 0, 1)  # HWIO -> OIHW
        elif k == "head.weight":
            v = v.T  # nabla's Linear keeps (in, out)
        state[k] = v
    net.load_state_dict(state)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    xt = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))
    yt = torch.from_numpy(y.astype(np.int64))

    def step():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(xt), yt)
        loss.backward()
        opt.step()
        return float(loss.detach())

    if not compiled:
        return step
    try:
        fast = torch.compile(step)
        fast()  # builds here or fails here
        net.load_state_dict(state)  # the build step moved the weights: start again
        opt.state.clear()
        return fast
    except Exception as e:  # noqa: BLE001 - no C++ toolchain, unsupported platform, ...
        print(f"(torch.compile unavailable here: {type(e).__name__})")
        return None


# ----------------------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="auto", choices=["auto", "numpy", "max"])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--nhead", type=int, default=4)
    ap.add_argument("--lstm", action="store_true", help="also time an nn.LSTM step")
    ap.add_argument("--cnn", action="store_true", help="also time a BatchNorm CNN step")
    ap.add_argument("--worker", help=argparse.SUPPRESS)  # ``kind:row``, one row's process
    args = ap.parse_args()
    nb.set_backend(args.backend)
    if args.worker:
        return _worker(args)
    rows = list(NABLA_ROWS) + ["JAX jit"] * (jax is not None)
    rows += ["PyTorch eager"] * (torch is not None)
    print(
        f"transformer block d_model={args.d_model} heads={args.nhead} ff={4 * args.d_model}, "
        f"batch {args.batch} x seq {args.seq}; backend={args.backend}; forward + backward + AdamW"
    )
    print(blas_kernel())
    firsts, times = _isolated("transformer", rows, args)
    _agree(firsts, "transformer")
    peers = [times[n] for n in ("JAX jit", "PyTorch eager") if n in times]
    best = min(peers) if peers else None
    print(f"(median of {args.reps} steps, best of {ROUNDS} rounds, each row in its own process)")
    print(f"{'':<22}{'first call s':>14}{'median ms':>12}{'vs fastest peer':>17}")
    for name, ms in times.items():
        ratio = f"{ms / best:16.2f}x" if best else f"{'-':>17}"
        print(f"{name:<22}{firsts[name]['first_s']:>14.2f}{ms:>12.2f}{ratio}")
    print(f"first-step loss {firsts['nabla functional']['value']:.6f} (all rows agree)")
    if args.lstm:
        lstm_rows(args)
    if args.cnn:
        cnn_rows(args)


if __name__ == "__main__":
    main()

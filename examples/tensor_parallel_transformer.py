"""A tensor-parallel transformer block on a simulated (dp, tp) = (2, 2) mesh, written twice.

The block is pre-norm: causal multi-head self-attention, then a GELU MLP, each with a
residual. Megatron's layout splits both halves over ``tp`` so that each needs one
``all_reduce`` forward:

- attention: ``wq``/``wk``/``wv`` column-parallel (each device computes its own heads),
  ``wo`` row-parallel (each device's heads give a partial sum of the output);
- MLP: ``w1`` column-parallel (each device a slice of the hidden units), ``w2`` row-parallel;
- layer norms and output biases replicated; the batch split over ``dp``.

Written two ways, both checked against the unsharded block, forward and under ``nb.grad``:

1. ``nb.shard_map``: the per-device program, with the two ``nb.all_reduce(..., axes="tp")``
   written out;
2. automatic propagation: the unsharded code itself, run on weights laid out with
   ``nb.shard``; the ops pick layouts and insert the collectives, and
   ``nb.communication_report`` lists them.

Run: python examples/tensor_parallel_transformer.py
"""

import numpy as np

import nabla as nb
from nabla import P

F = nb.nn.functional

# Megatron's layout: which dim of each weight is split over tp (P() = replicated)
SPECS = {
    "ln1_g": P(),
    "ln1_b": P(),
    "wq": P(None, "tp"),
    "wk": P(None, "tp"),
    "wv": P(None, "tp"),
    "wo": P("tp"),
    "bo": P(),
    "ln2_g": P(),
    "ln2_b": P(),
    "w1": P(None, "tp"),
    "b1": P("tp"),
    "w2": P("tp"),
    "b2": P(),
}


def init_params(d_model, n_heads, d_ff, seed=0):
    rng = np.random.default_rng(seed)

    def w(fan_in, fan_out):
        return (rng.normal(size=(fan_in, fan_out)) / np.sqrt(fan_in)).astype(np.float32)

    def vec(n, mean=0.0):
        return (mean + 0.1 * rng.normal(size=n)).astype(np.float32)

    assert d_model % n_heads == 0
    return {
        "ln1_g": vec(d_model, 1.0),
        "ln1_b": vec(d_model),
        "wq": w(d_model, d_model),
        "wk": w(d_model, d_model),
        "wv": w(d_model, d_model),
        "wo": w(d_model, d_model),
        "bo": vec(d_model),
        "ln2_g": vec(d_model, 1.0),
        "ln2_b": vec(d_model),
        "w1": w(d_model, d_ff),
        "b1": vec(d_ff),
        "w2": w(d_ff, d_model),
        "b2": vec(d_model),
    }


def attention_heads(p, h, head_dim):
    """Causal self-attention of the heads whose projections ``p`` holds, concatenated.

    The head count comes from ``wq``'s width, so the same code runs all heads (unsharded) or
    one device's share of them (inside ``shard_map``, where ``wq`` is a column block).
    """
    b, t, _ = h.shape
    n_heads = p["wq"].shape[1] // head_dim

    def split_heads(z):  # (b, t, heads * head_dim) -> (b, heads, t, head_dim)
        return z.reshape((b, t, n_heads, head_dim)).permute(0, 2, 1, 3)

    q, k, v = (split_heads(h @ p[name]) for name in ("wq", "wk", "wv"))
    a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return a.permute(0, 2, 1, 3).reshape((b, t, n_heads * head_dim))


def mlp_hidden(p, h):
    return F.gelu(h @ p["w1"] + p["b1"])


def block(p, x, head_dim):
    """The unsharded block; run on sharded weights, propagation parallelizes it."""
    d = x.shape[-1]
    h = x + attention_heads(p, F.layer_norm(x, d, p["ln1_g"], p["ln1_b"]), head_dim) @ p["wo"]
    h = h + p["bo"]
    return h + mlp_hidden(p, F.layer_norm(h, d, p["ln2_g"], p["ln2_b"])) @ p["w2"] + p["b2"]


def tp_block_body(p, x, head_dim):
    """One device's program: its heads and hidden units, then a sum over tp per half."""
    d = x.shape[-1]
    heads = attention_heads(p, F.layer_norm(x, d, p["ln1_g"], p["ln1_b"]), head_dim)
    # row-parallel wo: each device's heads give a partial sum of the projection
    h = x + nb.all_reduce(heads @ p["wo"], "sum", axes="tp") + p["bo"]
    hidden = mlp_hidden(p, F.layer_norm(h, d, p["ln2_g"], p["ln2_b"]))
    return h + nb.all_reduce(hidden @ p["w2"], "sum", axes="tp") + p["b2"]


def mse(out, y):
    return nb.mean((out - y) ** 2)


def max_error(got, want):
    return float(np.max(np.abs(np.asarray(got) - np.asarray(want))))


def main(batch=4, seq_len=8, d_model=32, n_heads=4, d_ff=64, seed=0, verbose: bool = True) -> dict:
    say = print if verbose else (lambda *a, **k: None)
    mesh = nb.DeviceMesh("dp_tp", (2, 2), ("dp", "tp"))
    head_dim = d_model // n_heads
    assert n_heads % mesh.axis_size("tp") == 0, "whole heads per tp device"

    weights = init_params(d_model, n_heads, d_ff, seed)
    rng = np.random.default_rng(seed + 1)
    x_np = rng.normal(size=(batch, seq_len, d_model)).astype(np.float32)
    y_np = rng.normal(size=(batch, seq_len, d_model)).astype(np.float32)

    # the reference: every weight whole, one device
    params = {k: nb.constant(v) for k, v in weights.items()}
    x, y = nb.constant(x_np), nb.constant(y_np)
    want = block(params, x, head_dim).numpy()
    want_grads = nb.grad(lambda p: mse(block(p, x, head_dim), y))(params)

    # 1. shard_map: the arguments are laid out by in_specs on entry
    tp_block = nb.shard_map(
        lambda p, x: tp_block_body(p, x, head_dim),
        mesh=mesh,
        in_specs=(SPECS, P("dp")),
        out_specs=P("dp"),
    )
    out_map = tp_block(params, x)
    grads_map = nb.grad(lambda p: mse(tp_block(p, x), y))(params)

    # 2. propagation: the same unsharded code on sharded weights and a sharded batch
    sharded = {k: nb.shard(v, mesh, SPECS[k]) for k, v in weights.items()}
    x_dp, y_dp = nb.shard(x_np, mesh, P("dp")), nb.shard(y_np, mesh, P("dp"))
    out_prop = block(sharded, x_dp, head_dim)
    grads_prop = nb.grad(lambda p: mse(block(p, x_dp, head_dim), y_dp))(sharded)

    errors = {
        "shard_map forward": max_error(out_map.numpy(), want),
        "propagation forward": max_error(out_prop.numpy(), want),
        "shard_map grad": max(
            max_error(grads_map[k].numpy(), want_grads[k].numpy()) for k in SPECS
        ),
        "propagation grad": max(
            max_error(grads_prop[k].numpy(), want_grads[k].numpy()) for k in SPECS
        ),
    }
    say(
        f"block: batch {batch}, seq {seq_len}, d_model {d_model}, {n_heads} heads, d_ff {d_ff}, "
        f"mesh {dict(zip(mesh.axis_names, mesh.shape, strict=True))}"
    )
    for name, err in errors.items():
        say(f"  {name:<22} max |error| vs unsharded {err:.2e}")
        assert err < 1e-4, (name, err)
    # the outputs keep the batch split; each gradient is laid out like its weight
    assert out_map.sharding.to_partition_spec() == P("dp")
    assert out_prop.sharding.to_partition_spec() == P("dp")
    for k, spec in SPECS.items():
        assert grads_prop[k].sharding.to_partition_spec() == spec, (k, grads_prop[k].sharding)

    forward_report = nb.communication_report(lambda p, x: block(p, x, head_dim))(sharded, x_dp)
    grad_report = nb.communication_report(nb.grad(lambda p, x, y: mse(block(p, x, head_dim), y)))(
        sharded, x_dp, y_dp
    )
    say("\ncollectives that propagation inserted, forward:")
    say(forward_report)
    say("\nand for the gradient (forward + backward):")
    say(grad_report)
    return {
        "errors": errors,
        "forward_collectives": [(e.op, e.axes) for e in forward_report.entries],
        "grad_collectives": [(e.op, e.axes) for e in grad_report.entries],
        "forward_bytes": forward_report.total_bytes,
        "grad_bytes": grad_report.total_bytes,
    }


if __name__ == "__main__":
    main()

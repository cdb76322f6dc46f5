"""A tour of tensors and ops: creation, dtypes, broadcasting, indexing, reductions, laziness.

Run: python examples/tensors_ops.py
"""

import numpy as np

import nabla as nb


def main(verbose: bool = True) -> dict:
    say = print if verbose else (lambda *a, **k: None)

    # Creation: from Python, NumPy, or the usual factories; shapes and dtypes are known at once.
    a = nb.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    b = nb.arange(3, dtype=nb.float32)
    z = nb.zeros((2, 3), dtype=nb.float16)
    r = nb.random.normal(nb.random.key(0), (2, 3))  # reproducible draw from a key
    say("shapes", a.shape, b.shape, z.dtype, r.shape)

    # Broadcasting, type promotion and Python scalars, as in NumPy.
    c = a * b + 1  # (2, 3) * (3,) + scalar
    say("c =\n", c.numpy())
    say("promotion float16 + float32 ->", (z + a).dtype)

    # Indexing: ints, slices with steps, None, boolean masks, integer arrays.
    say("a[:, ::2] =", a[:, ::2].numpy().tolist())
    say("a[a > 2] =", a[a > 2].numpy().tolist())
    say("a[[1, 0]] =", a[nb.constant([1, 0])].numpy().tolist())
    d = a.at[0, 1].set(-1.0)  # functional update
    say("a.at[0, 1].set(-1) =", d.numpy().tolist())

    # Reductions and shape ops.
    say("sum over rows", a.sum(axis=0).numpy(), "mean", a.mean().item())
    say("softmax rows", nb.softmax(a, axis=-1).numpy().round(3))
    e = a.reshape(3, 2).T
    say("reshape + transpose", e.shape, nb.concatenate([a, a], axis=0).shape)
    m = a @ a.T  # matmul
    say("a @ a.T =", m.numpy().tolist())

    # Laziness: nothing is computed until a value is needed; then one graph runs.
    y = nb.exp(a) * 2.0 + a.sum(axis=0)
    say("lazy until printed:", not y.is_realized)
    y.realize()
    say("realized:", y.is_realized)
    ref = np.exp(a.numpy()) * 2.0 + a.numpy().sum(0)
    return {"matches_numpy": bool(np.allclose(y.numpy(), ref)), "matmul": m.numpy()}


if __name__ == "__main__":
    main()

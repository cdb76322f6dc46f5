"""Golden traces: the recorded graphs of representative programs, pinned as text.

A change to how ops, transforms or the printer record a program shows up here as a text
diff. If the change is intended, regenerate the snapshots with
``python tests/transforms/test_golden_traces.py`` and review the diff.
"""

import difflib

import numpy as np
import pytest

import nabla as nb

PROGRAMS = {}


def program(fn):
    PROGRAMS[fn.__name__] = fn
    return fn


def _w(*shape, seed=0):
    return nb.constant(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


@program
def mlp_loss():
    w1, w2, x = _w(3, 4), _w(4, 1, seed=1), _w(5, 3, seed=2)
    return nb.trace(lambda x: (nb.relu(x @ w1) @ w2).mean())(x)


@program
def grad_of_mlp_loss():
    w1, w2, x = _w(3, 4), _w(4, 1, seed=1), _w(5, 3, seed=2)
    return nb.trace(nb.grad(lambda w1: (nb.relu(x @ w1) @ w2).mean()))(w1)


@program
def vmap_of_attention():
    q, k, v = _w(2, 4, 8), _w(2, 6, 8, seed=1), _w(2, 6, 8, seed=2)

    def attn(q, k, v):
        return nb.softmax(q @ k.T * 0.125) @ v

    return nb.trace(nb.vmap(attn))(q, k, v)


@program
def jvp_of_sin_times_x():
    return nb.trace(lambda x: nb.jvp(lambda y: nb.sin(y) * y, (x,), (nb.ones_like(x),))[1])(_w(3))


@program
def per_example_grads():
    w = _w(3, 2)

    def loss(w, x):
        return nb.tanh(x @ w).sum()

    return nb.trace(lambda xs: nb.vmap(nb.grad(loss), in_axes=(None, 0))(w, xs))(_w(4, 3, seed=1))


GOLDEN = {
    "mlp_loss": """\
{ lambda b:f32[3,4], e:f32[4,1], h:f32[] ; a:f32[5,3]. let
    c:f32[5,4] = matmul a b
    d:f32[5,4] = relu c
    f:f32[5,1] = matmul d e
    g:f32[] = reduce_sum[axes=(0, 1), keepdims=False] f
    i:f32[] = mul g h
  in (i) }""",
    "grad_of_mlp_loss": """\
{ lambda c:f32[5,3], f:f32[], i:f32[4,1], l:f32[] ; a:f32[3,4]. let
    b:f32[3,4] = identity a
    d:f32[5,4] = matmul c b
    e:f32[5,4] = relu d
    g:bool[5,4] = greater e f
    h:f32[5,4] = cast[dtype=float32] g
    j:f32[1,4] = transpose[perm=(1, 0)] i
    k:f32[] = full[shape=(), value=1.0, dtype=float32]
    m:f32[] = mul k l
    n:f32[1,1] = reshape[shape=(1, 1)] m
    o:f32[5,1] = broadcast_to[shape=(5, 1)] n
    p:f32[5,4] = matmul o j
    q:f32[5,4] = mul p h
    r:f32[3,5] = transpose[perm=(1, 0)] c
    s:f32[3,4] = matmul r q
  in (s) }""",
    "vmap_of_attention": """\
{ lambda i:f32[] ; a:f32[2,4,8], b:f32[2,6,8], c:f32[2,6,8]. let
    d:f32[6,8]@vmap[1] = to_batch[axis=0, level=1, levels=(1,)] c
    e:f32[6,8]@vmap[1] = to_batch[axis=0, level=1, levels=(1,)] b
    f:f32[8,6]@vmap[1] = transpose[perm=(1, 0)] e
    g:f32[4,8]@vmap[1] = to_batch[axis=0, level=1, levels=(1,)] a
    h:f32[4,6]@vmap[1] = matmul g f
    j:f32[4,6]@vmap[1] = mul h i
    k:f32[4,1]@vmap[1] = reduce_max[axes=(1,), keepdims=True] j
    l:f32[4,1]@vmap[1] = stop_gradient k
    m:f32[4,6]@vmap[1] = sub j l
    n:f32[4,6]@vmap[1] = exp m
    o:f32[4,1]@vmap[1] = reduce_sum[axes=(1,), keepdims=True] n
    p:f32[4,6]@vmap[1] = div n o
    q:f32[4,8]@vmap[1] = matmul p d
    r:f32[2,4,8] = from_batch[axis=0, level=1, levels=()] q
  in (r) }""",
    "jvp_of_sin_times_x": """\
{ lambda  ; a:f32[3]. let
    b:f32[3] = identity a
    c:f32[3] = sin b
    d:f32[3] = full[shape=(3,), value=1.0, dtype=float32]
    e:f32[3] = mul d c
    f:f32[3] = cos b
    g:f32[3] = mul d f
    h:f32[3] = mul g b
    i:f32[3] = add h e
  in (i) }""",
    "per_example_grads": """\
{ lambda b:f32[3,2], h:f32[] ; a:f32[4,3]. let
    c:f32[3,2] = identity b
    d:f32[3]@vmap[1] = to_batch[axis=0, level=1, levels=(1,)] a
    e:f32[2]@vmap[1] = matmul d c
    f:f32[2]@vmap[1] = tanh e
    g:f32[2]@vmap[1] = mul f f
    i:f32[2]@vmap[1] = sub h g
    j:f32[] = full[shape=(), value=1.0, dtype=float32]
    k:f32[1] = reshape[shape=(1,)] j
    l:f32[2] = broadcast_to[shape=(2,)] k
    m:f32[2]@vmap[1] = mul l i
    n:f32[1,2]@vmap[1] = reshape[shape=(1, 2)] m
    o:f32[3,1]@vmap[1] = reshape[shape=(3, 1)] d
    p:f32[3,2]@vmap[1] = matmul o n
    q:f32[4,3,2] = from_batch[axis=0, level=1, levels=()] p
  in (q) }""",
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_golden_trace(name):
    got = str(PROGRAMS[name]())
    want = GOLDEN[name]
    if got != want:
        diff = "\n".join(
            difflib.unified_diff(want.splitlines(), got.splitlines(), "golden", "now", lineterm="")
        )
        pytest.fail(f"trace of {name} changed:\n{diff}")


if __name__ == "__main__":
    for name, fn in PROGRAMS.items():
        print(f"    {name!r}: '''\\\n{fn()}''',")

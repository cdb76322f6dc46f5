"""BatchNorm1d/2d, GroupNorm, InstanceNorm2d and their functional forms against PyTorch.

The references (``data/normalization.npz``) were recorded by ``data/make_normalization.py``
from ``torch.nn`` on the channels-first transposes of the stored channels-last inputs:
forward values, gradients of the input, weight and bias, and running statistics after 20
training steps followed by an evaluation-mode forward.
"""

from pathlib import Path

import numpy as np
import pytest

import nabla as nb
from nabla.core.sharding import P

nn, F = nb.nn, nb.nn.functional
REF = np.load(Path(__file__).parent / "data" / "normalization.npz")
TOL = dict(rtol=2e-5, atol=2e-5)


def _t(a):
    return nb.constant(np.asarray(a, np.float32))


def _grads(m, prefix):
    """Forward and gradients of ``sum(m(x) * g)`` w.r.t. x, weight and bias."""
    x, g = _t(REF[f"{prefix}.x"]), _t(REF[f"{prefix}.g"])

    def loss(x, w, b):
        m.weight, m.bias = w, b
        return (m(x) * g).sum()

    y = m(x)
    dx, dw, db = nb.grad(loss, argnums=(0, 1, 2))(x, m.weight, m.bias)
    return y, dx, dw, db


CASES = [
    ("bn1d_2", lambda: nn.BatchNorm1d(5)),
    ("bn1d_3", lambda: nn.BatchNorm1d(4)),
    ("bn2d", lambda: nn.BatchNorm2d(3)),
    ("gn", lambda: nn.GroupNorm(2, 6)),
    ("gn_1d", lambda: nn.GroupNorm(3, 6)),
    ("in2d", lambda: nn.InstanceNorm2d(3, affine=True)),
]


@pytest.mark.parametrize("prefix,make", CASES)
def test_forward_and_gradients_match_pytorch(prefix, make):
    m = make()
    c = REF[f"{prefix}.dw"].shape[0]
    m.weight, m.bias = _t(REF[f"{prefix}.w"]), _t(REF[f"{prefix}.b"])
    assert m.weight.shape == (c,)
    y, dx, dw, db = _grads(m, prefix)
    np.testing.assert_allclose(y.numpy(), REF[f"{prefix}.y"], **TOL)
    np.testing.assert_allclose(dx.numpy(), REF[f"{prefix}.dx"], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dw.numpy(), REF[f"{prefix}.dw"], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(db.numpy(), REF[f"{prefix}.db"], rtol=1e-4, atol=1e-4)


RUN_CASES = [
    ("run_bn1d", lambda: nn.BatchNorm1d(4)),
    ("run_bn1d_cum", lambda: nn.BatchNorm1d(4, momentum=None)),
    ("run_bn2d", lambda: nn.BatchNorm2d(4, momentum=0.3)),
    ("run_in2d", lambda: nn.InstanceNorm2d(4, affine=True, track_running_stats=True)),
]


def _start(prefix, make):
    """A fresh module with the reference's (trained, unchanged) weight and bias."""
    m = make()
    m.weight, m.bias = _t(REF[f"{prefix}.sd.weight"]), _t(REF[f"{prefix}.sd.bias"])
    return m


def _check_state(m, prefix):
    sd = m.state_dict()
    keys = sorted(k[len(prefix) + 4 :] for k in REF.files if k.startswith(f"{prefix}.sd."))
    assert sorted(sd) == keys
    for k in keys:
        want = REF[f"{prefix}.sd.{k}"]
        got = sd[k].numpy()
        assert got.dtype == want.dtype, k
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=k)


@pytest.mark.parametrize("prefix,make", RUN_CASES)
def test_running_stats_20_steps_then_eval(prefix, make):
    m = _start(prefix, make)
    buffers = [id(b) for b in m.buffers()]
    for x in REF[f"{prefix}.xs"]:
        m(_t(x))
    assert [id(b) for b in m.buffers()] == buffers  # updated in place
    _check_state(m, prefix)
    m.eval()
    np.testing.assert_allclose(m(_t(REF[f"{prefix}.xe"])).numpy(), REF[f"{prefix}.ye"], **TOL)


@pytest.mark.parametrize("prefix,make", RUN_CASES)
def test_running_stats_compiled_match_eager_and_pytorch(prefix, make):
    m = _start(prefix, make)
    f = nb.compile(m)
    with nb.no_grad():  # the fast path: one program per call
        for x in REF[f"{prefix}.xs"]:
            f(_t(x))
    assert f.stats.misses == 1 and f.stats.hits == 19 and f.stats.replays == 0
    _check_state(m, prefix)
    m.eval()
    np.testing.assert_allclose(f(_t(REF[f"{prefix}.xe"])).numpy(), REF[f"{prefix}.ye"], **TOL)
    assert f.stats.misses == 2  # eval() traced once more


def test_compiled_training_step_updates_buffers_like_eager():
    xs = np.random.default_rng(1).standard_normal((20, 8, 4)).astype(np.float32)
    ys = np.random.default_rng(2).standard_normal((20, 8, 1)).astype(np.float32)

    def model():
        return nn.Sequential(
            nn.Linear(4, 3, key=nb.random.key(1)),
            nn.BatchNorm1d(3),
            nn.ReLU(),
            nn.Linear(3, 1, key=nb.random.key(2)),
        )

    def train(m, fwd):
        opt = nn.optim.SGD(m, lr=0.1)
        for x, y in zip(xs, ys):
            opt.zero_grad()
            F.mse_loss(fwd(_t(x)), _t(y)).backward()
            opt.step()
        return m

    a = model()
    train(a, a)
    b = model()
    fwd = nb.compile(b)
    train(b, fwd)
    assert fwd.stats.misses == 1 and fwd.stats.hits == 19
    for k, v in a.state_dict().items():
        np.testing.assert_allclose(b.state_dict()[k].numpy(), v.numpy(), rtol=1e-5, atol=1e-6)
    assert int(b[1].num_batches_tracked.item()) == 20


def test_compiled_with_module_argument_writes_back():
    xs = REF["run_bn1d.xs"]
    m = _start("run_bn1d", lambda: nn.BatchNorm1d(4))
    f = nb.compile(lambda mod, x: mod(x))
    for x in xs:
        f(m, _t(x))
    assert f.stats.misses == 1
    _check_state(m, "run_bn1d")


def test_load_pytorch_state_dict():
    sd = {k[len("run_bn2d.sd.") :]: REF[k] for k in REF.files if k.startswith("run_bn2d.sd.")}
    assert sd["num_batches_tracked"].dtype == np.int64
    m = nn.BatchNorm2d(4, momentum=0.3)
    ids = [id(t) for t in m.state_dict().values()]
    m.load_state_dict(sd)
    assert [id(t) for t in m.state_dict().values()] == ids
    assert m.num_batches_tracked.dtype is nb.int64
    m.eval()
    np.testing.assert_allclose(m(_t(REF["run_bn2d.xe"])).numpy(), REF["run_bn2d.ye"], **TOL)
    seq = nn.Sequential(nn.BatchNorm2d(4))
    seq.load_state_dict({f"0.{k}": v for k, v in sd.items()})
    assert list(seq.state_dict()) == [f"0.{k}" for k in sd]


def test_train_eval_and_no_running_stats():
    x = _t(REF["run_bn1d.xe"])
    m = nn.BatchNorm1d(4, track_running_stats=False)
    assert list(m.state_dict()) == ["weight", "bias"]
    y_train = m(x).numpy()
    m.eval()  # no running statistics: batch statistics in both modes, as PyTorch
    np.testing.assert_allclose(m(x).numpy(), y_train)
    np.testing.assert_allclose(y_train.mean(0), 0, atol=1e-5)
    m = nn.BatchNorm1d(4, affine=False)
    assert list(m.state_dict()) == ["running_mean", "running_var", "num_batches_tracked"]
    m.eval()
    np.testing.assert_allclose(m(x).numpy(), x.numpy() / np.sqrt(1 + 1e-5), rtol=1e-6)
    assert int(m.num_batches_tracked.item()) == 0
    # PyTorch's bias=False (a scale without a shift) and positional device
    m = nn.BatchNorm1d(4, 1e-5, 0.1, True, True, "cpu", bias=False)
    assert list(m.state_dict()) == ["weight", "running_mean", "running_var", "num_batches_tracked"]
    m.weight = nb.constant(np.array([1.0, 2.0, 3.0, 4.0], np.float32))
    y = m(x).numpy()
    np.testing.assert_allclose(y / [1, 2, 3, 4], y_train, rtol=1e-5, atol=1e-6)
    assert list(nn.GroupNorm(2, 4, bias=False).state_dict()) == ["weight"]
    assert list(nn.InstanceNorm2d(4, affine=True, bias=False).state_dict()) == ["weight"]
    m.reset_parameters()
    np.testing.assert_array_equal(m.weight.numpy(), 1.0)


def test_functional_forms_match_modules():
    x = _t(REF["bn1d_3.x"])
    w, b = _t(REF["bn1d_3.w"]), _t(REF["bn1d_3.b"])
    np.testing.assert_allclose(
        F.batch_norm(x, None, None, w, b, training=True).numpy(), REF["bn1d_3.y"], **TOL
    )
    rm, rv = nb.zeros((4,)), nb.ones((4,))
    ids = (id(rm), id(rv))
    m = nn.BatchNorm1d(4)
    for xb in REF["run_bn1d.xs"][:5]:
        F.batch_norm(_t(xb), rm, rv, training=True)
        m(_t(xb))
    assert (id(rm), id(rv)) == ids
    np.testing.assert_allclose(rm.numpy(), m.running_mean.numpy(), rtol=1e-6)
    np.testing.assert_allclose(rv.numpy(), m.running_var.numpy(), rtol=1e-6)
    y = F.batch_norm(x, rm, rv, w, b)  # evaluation: the running statistics
    m.weight, m.bias = w, b
    np.testing.assert_allclose(y.numpy(), m.eval()(x).numpy(), rtol=1e-6)
    gx = _t(REF["gn.x"])
    np.testing.assert_allclose(
        F.group_norm(gx, 2, _t(REF["gn.w"]), _t(REF["gn.b"])).numpy(), REF["gn.y"], **TOL
    )
    ix = _t(REF["in2d.x"])
    np.testing.assert_allclose(
        F.instance_norm(ix, weight=_t(REF["in2d.w"]), bias=_t(REF["in2d.b"])).numpy(),
        REF["in2d.y"],
        **TOL,
    )


def test_unbatched_instance_norm():
    x = REF["in2d.x"]
    m = nn.InstanceNorm2d(3)
    batched = m(_t(x)).numpy()
    np.testing.assert_allclose(m(_t(x[1])).numpy(), batched[1], rtol=1e-6, atol=1e-6)


def test_vmap_eval_per_example_matches_batch():
    m = _start("run_bn1d", lambda: nn.BatchNorm1d(4))
    for x in REF["run_bn1d.xs"][:3]:
        m(_t(x))
    m.eval()
    x = _t(REF["run_bn1d.xe"])
    per_example = nb.vmap(lambda xi: m(xi.reshape((1, 4))).reshape((4,)))(x)
    np.testing.assert_allclose(per_example.numpy(), m(x).numpy(), rtol=1e-6)


def test_vmap_train_mode():
    xs = _t(np.stack([REF["run_bn1d.xs"][0], REF["run_bn1d.xs"][1]]))  # (2, 6, 4)
    m = nn.BatchNorm1d(4)
    with pytest.raises(ValueError, match="under vmap"):
        nb.vmap(m)(xs)
    assert int(m.num_batches_tracked.item()) == 0
    # without running statistics each mapped element normalizes with its own batch
    m = nn.BatchNorm1d(4, track_running_stats=False)
    got = nb.vmap(m)(xs).numpy()
    for i in range(2):
        np.testing.assert_allclose(got[i], m(xs[i]).numpy(), rtol=1e-5, atol=1e-6)


def test_data_parallel_batch_stats_are_global():
    mesh = nb.DeviceMesh("mesh", (4,), ("dp",))
    x = np.concatenate([REF["run_bn2d.xs"][0], REF["run_bn2d.xs"][1]])  # (4, 3, 3, 4)
    ref = nn.BatchNorm2d(4)
    y_ref = ref(_t(x)).numpy()
    m = nn.BatchNorm2d(4)
    y = m(nb.shard(x, mesh, P("dp")))
    assert y.sharding.to_partition_spec() == P("dp")  # the batch stays split over dp
    assert m.running_mean.sharding.to_partition_spec() == P()  # reduced: replicated
    np.testing.assert_allclose(y.numpy(), y_ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m.running_mean.numpy(), ref.running_mean.numpy(), rtol=1e-6)
    np.testing.assert_allclose(m.running_var.numpy(), ref.running_var.numpy(), rtol=1e-6)
    # each device's shard alone would give other statistics (what SyncBatchNorm avoids)
    local = nn.BatchNorm2d(4)
    local(_t(x[:1]))
    assert not np.allclose(local.running_mean.numpy(), ref.running_mean.numpy())


@pytest.mark.parametrize(
    "make,shape,match",
    [
        (lambda: nn.BatchNorm1d(3), (2, 3, 4, 3), r"BatchNorm1d\(3.*\(N, C\) or \(N, L, C\)"),
        (lambda: nn.BatchNorm1d(3), (4, 5), r"BatchNorm1d\(3.*5 channels.*expected 3"),
        (lambda: nn.BatchNorm2d(3), (2, 4, 3), r"BatchNorm2d\(3.*\(N, H, W, C\)"),
        (lambda: nn.BatchNorm2d(3), (2, 4, 4, 2), r"2 channels.*expected 3"),
        (lambda: nn.BatchNorm1d(3), (1, 3), r"more than 1 value per channel"),
        (lambda: nn.GroupNorm(2, 4), (2, 3), r"GroupNorm\(2, 4.*\(N, \.\.\., 4\)"),
        (lambda: nn.InstanceNorm2d(3), (2, 3), r"InstanceNorm2d\(3.*\(N, H, W, C\)"),
        (lambda: nn.InstanceNorm2d(3), (2, 4, 4, 5), r"5 channels.*expected 3"),
    ],
)
def test_bad_inputs_name_the_layer(make, shape, match):
    with pytest.raises(ValueError, match=match):
        make()(nb.ones(shape))


def test_bad_arguments():
    with pytest.raises(ValueError, match="num_channels=5 is not divisible by num_groups=2"):
        nn.GroupNorm(2, 5)
    with pytest.raises(ValueError, match="BatchNorm1d: num_features must be a positive int"):
        nn.BatchNorm1d(0)
    with pytest.raises(ValueError, match="momentum must be in"):
        nn.BatchNorm2d(3, momentum=1.5)
    with pytest.raises(TypeError, match="floating-point"):
        nn.BatchNorm1d(3)(nb.ones((2, 3), dtype=nb.int32))
    with pytest.raises(ValueError, match=r"batch_norm: weight has shape \(4,\), expected \(3,\)"):
        F.batch_norm(nb.ones((2, 3)), None, None, weight=nb.ones((4,)), training=True)
    with pytest.raises(ValueError, match="both running_mean and running_var"):
        F.batch_norm(nb.ones((2, 3)), nb.zeros((3,)), None)
    with pytest.raises(ValueError, match="6 channels.*num_groups=4"):
        F.group_norm(nb.ones((2, 6)), 4)
    with pytest.raises(ValueError, match="use_input_stats=False needs"):
        F.instance_norm(nb.ones((2, 3, 3, 2)), use_input_stats=False)

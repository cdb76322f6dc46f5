"""Module: registration, qualified names, pytree behaviour, state dicts, modes, repr."""

from collections import OrderedDict

import numpy as np
import pytest

import nabla as nb

nn = nb.nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 4, key=nb.random.key(0))
        self.layers = [nn.Linear(4, 4, key=nb.random.key(i)) for i in range(2)]
        self.register_buffer("scale", nb.ones((4,)))
        self.name = "block"

    def forward(self, x):
        h = self.fc(x)
        for layer in self.layers:
            h = nb.relu(layer(h))
        return h * self.scale


def test_qualified_names_parameters_buffers_and_modules():
    m = Block()
    names = [n for n, _ in m.named_parameters()]
    assert names == [
        "fc.weight",
        "fc.bias",
        "layers.0.weight",
        "layers.0.bias",
        "layers.1.weight",
        "layers.1.bias",
    ]
    assert [n for n, _ in m.named_buffers()] == ["scale"]
    assert len(list(m.modules())) == 5  # Block, fc, ModuleList, two Linear
    assert [n for n, _ in m.named_children()] == ["fc", "layers"]
    assert isinstance(m.layers, nn.ModuleList)
    assert all(p.requires_grad for p in m.parameters())
    assert not m.scale.requires_grad
    assert m.num_parameters() == 3 * 4 + 4 + 2 * (16 + 4)


def test_module_is_a_pytree_with_static_config():
    m = Block()
    leaves, tree = nb.tree_flatten(m)
    assert len(leaves) == 7  # 6 parameters + 1 buffer
    m2 = nb.tree_unflatten(tree, leaves)
    assert type(m2) is Block and m2.name == "block" and m2.layers[1].weight is m.layers[1].weight
    doubled = nb.tree_map(lambda a: a * 2, m)
    np.testing.assert_allclose(doubled.fc.weight.numpy(), 2 * m.fc.weight.numpy())
    assert nb.tree_structure(m) == nb.tree_structure(doubled)
    assert hash(nb.tree_structure(m)) == hash(nb.tree_structure(doubled))


def test_grad_of_a_module_is_a_module_like_it():
    m = Block()
    x = nb.constant(np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32))
    g = nb.grad(lambda mod: mod(x).sum())(m)
    assert type(g) is Block
    assert g.layers[0].weight.shape == (4, 4)
    # same as backward()
    m(x).sum().backward()
    np.testing.assert_allclose(g.fc.weight.numpy(), m.fc.weight.grad.numpy(), rtol=1e-5)
    m.zero_grad()
    assert m.fc.weight.grad is None


def test_vmap_takes_a_module():
    m = nn.Linear(3, 2, key=nb.random.key(1))
    xs = nb.constant(np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32))
    out = nb.vmap(lambda x: m(x))(xs)
    np.testing.assert_allclose(out.numpy(), m(xs).numpy(), rtol=1e-5)
    # a module as a vmapped argument: unmapped, and an ensemble of stacked modules
    out2 = nb.vmap(lambda mod, x: mod(x), in_axes=(None, 0))(m, xs)
    np.testing.assert_allclose(out2.numpy(), out.numpy(), rtol=1e-6)
    members = [nn.Linear(3, 2, key=nb.random.key(i)) for i in range(3)]
    ensemble = nb.tree_map(lambda *ts: nb.stack(ts), *members)
    assert ensemble.weight.shape == (3, 3, 2)
    preds = nb.vmap(lambda mod: mod(xs))(ensemble)
    assert preds.shape == (3, 4, 2)
    np.testing.assert_allclose(preds.numpy()[2], members[2](xs).numpy(), rtol=1e-5)


def test_state_dict_round_trip_and_errors():
    a, b = Block(), Block()
    b.fc.weight = nb.zeros((3, 4))
    b.load_state_dict(a.state_dict())
    np.testing.assert_array_equal(b.fc.weight.numpy(), a.fc.weight.numpy())
    assert b.fc.weight.requires_grad
    # PyTorch's order: each module's own parameters, its own buffers, then its submodules'
    assert list(a.state_dict()) == ["scale"] + [n for n, _ in a.named_parameters()]

    before = b.fc.bias.numpy().copy()
    sd = dict(a.state_dict())
    sd["fc.bias"] = nb.zeros((4,))
    sd["fc.weight"] = nb.zeros((5, 4))  # wrong shape
    sd["layers.0.bias"] = nb.zeros((4,), dtype=nb.int32)  # wrong dtype (a float is cast)
    del sd["scale"]
    sd["extra"] = nb.zeros((1,))
    with pytest.raises(ValueError) as e:
        b.load_state_dict(sd)
    msg = str(e.value)
    for part in (
        "missing keys ['scale']",
        "unexpected keys ['extra']",
        "fc.weight: shape (5, 4)",
        "layers.0.bias: dtype",
        "nothing loaded",
    ):
        assert part in msg, msg
    np.testing.assert_array_equal(b.fc.bias.numpy(), before)  # nothing modified
    del sd["extra"]
    sd["fc.weight"] = a.fc.weight
    sd["layers.0.bias"] = a.layers[0].bias
    sd["extra"] = a.fc.bias
    skipped = b.load_state_dict(sd, strict=False)  # PyTorch's named tuple of skipped keys
    assert skipped.unexpected_keys == ["extra"] and skipped.missing_keys == ["scale"]
    np.testing.assert_array_equal(b.fc.bias.numpy(), 0.0)


def test_load_state_dict_names_the_key_of_a_value_that_is_not_a_tensor():
    m = nn.Linear(3, 2)
    before = m.bias.numpy().copy()
    with pytest.raises(
        ValueError,
        match=r"Linear.load_state_dict: weight: a str 'abcd' is not a tensor \(unsupported "
        r"dtype dtype\('<U4'\).*nothing loaded",
    ):
        m.load_state_dict({"weight": "abcd", "bias": np.zeros(2, np.float32)})
    np.testing.assert_array_equal(m.bias.numpy(), before)
    m.load_state_dict({"weight": np.ones((3, 2), np.float32), "bias": np.zeros(2, np.float32)})


def test_sequential_and_module_list_mutate_as_pytorch():
    s = nn.Sequential(nn.Linear(2, 3), nn.ReLU())
    s.append(nn.Linear(3, 1))
    s.insert(0, nn.Tanh())
    assert [n for n, _ in s.named_parameters()] == ["1.weight", "1.bias", "3.weight", "3.bias"]
    assert isinstance(s.pop(0), nn.Tanh) and len(s) == 3
    del s[1]
    s[1] = nn.Linear(3, 2)
    assert s(nb.ones((1, 2))).shape == (1, 2)
    assert len(s.extend([nn.ReLU()])) == 3
    layers = nn.ModuleList([nn.Linear(1, 1)])
    layers.insert(0, nn.ReLU())
    assert [type(m).__name__ for m in layers] == ["ReLU", "Linear"]
    with pytest.raises(TypeError, match="Sequential.append: expected a Module, got int"):
        s.append(3)


def test_train_eval_and_requires_grad():
    m = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5))
    assert m.training and m[1].training
    m.eval()
    assert not m.training and not m[1].training
    assert nb.tree_structure(m) != nb.tree_structure(m.train())
    m.requires_grad_(False)
    assert not any(p.requires_grad for p in m.parameters())
    assert nn.module.trainable_mask(m) == [False, False]
    m.requires_grad_(True)
    assert nn.module.trainable_mask(m) == [True, True]


def test_sequential_from_ordered_dict_and_repr():
    seq = nn.Sequential(OrderedDict([("proj", nn.Linear(2, 3)), ("act", nn.GELU())]))
    assert [n for n, _ in seq.named_parameters()] == ["proj.weight", "proj.bias"]
    assert isinstance(seq["act"], nn.GELU) and len(seq) == 2
    text = repr(Block())
    assert "(fc): Linear(in_features=3, out_features=4, bias=True)" in text
    assert "(scale): float32 (4,)" in text
    assert "(layers): ModuleList(" in text


def test_setting_attributes_before_init_is_a_clear_error():
    class Bad(nn.Module):
        def __init__(self):
            self.w = nb.ones((2,))

    with pytest.raises(RuntimeError, match="super"):
        Bad()


def test_compiled_training_step_compiles_once():
    model = nn.Sequential(nn.Linear(3, 8, key=nb.random.key(0)), nn.Tanh(), nn.Linear(8, 1))
    rng = np.random.default_rng(0)
    x = nb.constant(rng.standard_normal((16, 3)).astype(np.float32))
    y = nb.constant(rng.standard_normal((16, 1)).astype(np.float32))
    state = nn.optim.adamw_init(model)

    @nb.compile
    def step(m, s, x, y):
        loss, g = nb.value_and_grad(lambda m: nn.functional.mse_loss(m(x), y))(m)
        m, s = nn.optim.adamw_update(m, g, s, lr=1e-2)
        return m, s, loss

    losses = []
    for _ in range(10):
        model, state, loss = step(model, state, x, y)
        losses.append(loss.item())
    assert step.stats.misses == 1 and step.stats.replays == 0
    assert losses[-1] < losses[0]


def test_module_dict_and_module_list_slicing():
    heads = nn.ModuleDict({"cls": nn.Linear(4, 3), "reg": nn.Linear(4, 1)})
    assert list(heads.keys()) == ["cls", "reg"] and len(heads) == 2
    assert [n for n, _ in heads.named_parameters()] == [
        "cls.weight",
        "cls.bias",
        "reg.weight",
        "reg.bias",
    ]
    g = nb.grad(lambda h: h["cls"](nb.ones((2, 4))).sum() + h["reg"](nb.ones((2, 4))).sum())(heads)
    assert type(g) is nn.ModuleDict and g["reg"].weight.shape == (4, 1)
    layers = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
    assert len(layers[1:]) == 2 and layers[-1] is list(layers)[2]
    with pytest.raises(TypeError, match="expected a Module"):
        layers.append(nb.ones((2,)))


def test_a_module_used_twice_is_listed_once_but_saved_under_each_name():
    """PyTorch's rules for a shared (tied) submodule: parameters() lists its tensors once,
    state_dict() under every name; the stateful path trains it as one set of weights."""
    lin = nn.Linear(2, 2, key=nb.random.key(0))
    m = nn.Sequential(lin, nn.Tanh(), lin)
    assert [n for n, _ in m.named_parameters()] == ["0.weight", "0.bias"]
    assert [n for n, _ in m.named_parameters(remove_duplicate=False)] == [
        "0.weight",
        "0.bias",
        "2.weight",
        "2.bias",
    ]
    assert m.num_parameters() == 6
    assert list(m.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    x = nb.constant(np.array([[1.0, -1.0], [0.5, 2.0]], np.float32))
    opt = nn.optim.SGD(m.parameters(), lr=0.1)
    before = lin.weight.numpy().copy()
    (m(x) ** 2).mean().backward()
    g = lin.weight.grad.numpy()
    opt.step()
    assert m[0] is m[2]
    np.testing.assert_allclose(lin.weight.numpy(), before - 0.1 * g, rtol=1e-6)


def test_module_bookkeeping_as_pytorch_keeps_it():
    """A buffer reset to None stays a buffer (and a tensor assigned again is one, not a
    parameter the optimizer would train); an ``add_module(name, None)`` slot is skipped; a
    module under two names is listed once (``apply`` runs once on it); ``train()`` calls
    each child's own ``train`` (an override that keeps BatchNorm frozen holds) and wants a
    bool; a deleted non-persistent buffer's name is saved again when reused."""
    bn = nb.nn.BatchNorm1d(3)
    bn.running_mean = None
    bn.running_mean = nb.zeros((3,))
    assert [n for n, _ in bn.named_buffers()][0] == "running_mean"
    assert [n for n, _ in bn.named_parameters()] == ["weight", "bias"]

    m = nb.nn.Linear(2, 2)
    m.add_module("extra", None)
    assert len(list(m.parameters())) == 2 and len(m.state_dict()) == 2
    m.train()

    class Tied(nb.nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = nb.nn.Linear(2, 2)
            self.dec = self.enc

    t = Tied()
    assert [n for n, _ in t.named_modules()] == ["", "enc"] and len(list(t.children())) == 1
    seen = []
    t.apply(lambda mod: seen.append(type(mod).__name__))
    assert seen == ["Linear", "Tied"]

    class Frozen(nb.nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = nb.nn.BatchNorm1d(2)

        def train(self, mode=True):
            super().train(mode)
            self.bn.eval()
            return self

    class Net(nb.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = Frozen()

    net = Net().train()
    assert net.training and net.body.training and not net.body.bn.training
    with pytest.raises(ValueError, match="mode must be a bool"):
        net.train("yes")

    class Stat(nb.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("stat", nb.zeros((2,)), persistent=False)
            self.stat2 = nb.ones((2,))

    s = Stat()
    del s.stat
    s.stat = nb.ones((2,))
    assert sorted(s.state_dict()) == ["stat", "stat2"]


def test_a_module_held_twice_in_a_sequential_runs_twice():
    lin = nn.Linear(2, 2, key=nb.random.key(0))
    m = nn.Sequential(lin, nn.Tanh(), lin)
    x = nb.constant(np.array([[1.0, -1.0]], np.float32))
    np.testing.assert_allclose(m(x).numpy(), lin(nb.tanh(lin(x))).numpy(), rtol=1e-6)
    assert repr(m).count("Linear") == 2


def test_module_dict_update_pop_clear_and_del():
    d = nn.ModuleDict({"a": nn.Linear(2, 2)})
    d.update({"b": nn.ReLU()})
    assert list(d.keys()) == ["a", "b"]
    assert isinstance(d.pop("a"), nn.Linear) and list(d.keys()) == ["b"]
    d["c"] = nn.Tanh()
    del d["b"]
    assert list(d.keys()) == ["c"]
    d.clear()
    assert len(d) == 0


def test_pytorchs_lookups_state_dict_keywords_error_type_and_hook_context():
    m = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    assert m.get_parameter("0.weight") is m[0].weight
    assert m.get_buffer("1.running_mean") is m[1].running_mean
    with pytest.raises(AttributeError, match="no parameter '1.running_mean'"):
        m.get_parameter("1.running_mean")
    assert list(m.state_dict(prefix="model.", keep_vars=True))[0] == "model.0.weight"
    with pytest.raises(RuntimeError, match="load_state_dict: missing keys"):  # PyTorch's type
        m.load_state_dict({})
    with pytest.raises(ValueError):  # and ours
        m.load_state_dict({})
    calls = []
    with m.register_forward_hook(lambda mod, args, out: calls.append(1)):
        m(nb.ones((3, 2)))
    m(nb.ones((3, 2)))
    assert calls == [1]


def test_load_state_dict_casts_and_reads_as_pytorch_does():
    """As PyTorch's copy: a float value of another width is cast (a float64 or bfloat16
    checkpoint into a float32 model), an int count too; a 0-d buffer saved as (1,) loads;
    a checkpoint without BatchNorm's num_batches_tracked (PyTorch's older format, or a
    file without its metadata) keeps the count; a PyTorch-style tensor that requires grad
    is read through its detach."""
    bn = nn.BatchNorm1d(3)
    sd = {k: v.numpy() for k, v in bn.state_dict().items()}
    sd["weight"] = np.full(3, 2.0, np.float64)
    sd["running_var"] = np.full(3, 4.0, np.float16)
    sd["num_batches_tracked"] = np.array([7], np.int32)
    bn.load_state_dict(sd)
    assert bn.weight.dtype is nb.float32 and bn.weight.numpy().tolist() == [2.0] * 3
    assert bn.running_var.dtype is nb.float32 and bn.num_batches_tracked.dtype is nb.int64
    assert bn.num_batches_tracked.shape == () and bn.num_batches_tracked.item() == 7
    del sd["num_batches_tracked"]
    assert bn.load_state_dict(sd).missing_keys == []
    assert bn.num_batches_tracked.item() == 7

    class Detachable:  # what a torch tensor with requires_grad offers
        def __init__(self, a):
            self.a = a

        def __array__(self, dtype=None, copy=None):
            raise RuntimeError("Can't call numpy() on Tensor that requires grad")

        def detach(self):
            return self.a

    sd["bias"] = Detachable(np.full(3, 0.5, np.float32))
    bn.load_state_dict(sd)
    assert bn.bias.numpy().tolist() == [0.5] * 3
    with pytest.raises(ValueError, match=r"weight: dtype nb.int32, expected nb.float32"):
        bn.load_state_dict({**sd, "weight": np.ones(3, np.int32)})


def test_a_parameter_assigned_a_value_computed_from_parameters_keeps_training():
    """``m.w = nb.shard(m.w, mesh, spec)`` (how a model's weight is laid out on a mesh) or
    ``m.w = m.w * 1.0``: the value has history, and it became a parameter that trained for
    one optimizer step and then stopped (its update was detached). It is now a parameter
    of its own, as ``nn.Parameter(x)``: every step trains it, sharded as assigned."""
    x = nb.constant(np.array([[1, 2], [3, 1], [0, 1], [2, 2]], np.float32))
    y = nb.zeros((4, 1))
    mesh = nb.DeviceMesh("m", (2, 2), ("dp", "tp"))
    ends = []
    for how in ("plain", "shard", "scaled"):
        lin = nn.Linear(2, 1, bias=False)
        lin.weight = nb.constant(np.array([[0.5], [-0.5]], np.float32))
        if how == "shard":
            lin.weight = nb.shard(lin.weight, mesh, nb.P("tp", None))
        elif how == "scaled":
            lin.weight = lin.weight * 1.0
        step = nn.optim.SGD(lin, lr=0.1).compile_step(
            lambda m, x, y: nn.functional.mse_loss(m(x), y)
        )
        for _ in range(3):
            step(x, y)
        assert lin.weight.requires_grad, how
        ends.append(lin.weight.numpy().ravel())
    np.testing.assert_allclose(ends[1], ends[0], rtol=1e-6)
    np.testing.assert_allclose(ends[2], ends[0], rtol=1e-6)
    np.testing.assert_allclose(ends[0], [0.2806875, -0.3499375], rtol=1e-5)


def test_a_reassigned_parameter_keeps_its_place_and_a_loaded_value_its_layout():
    """``m.weight = nb.shard(m.weight, ...)`` keeps ``weight`` first, as PyTorch does: an
    optimizer's state is by position, and a reordered module swapped the moments of two
    same-shaped parameters on restore. A value loaded with ``load_state_dict`` takes the
    parameter's layout (a tensor-parallel weight stays split), whatever layout it came in."""
    mesh = nb.DeviceMesh("m", (2, 2), ("dp", "tp"))
    ln = nn.LayerNorm(4)
    ln.weight = nb.shard(ln.weight, mesh, nb.P())
    assert [n for n, _ in ln.named_parameters()] == ["weight", "bias"]
    assert list(ln.state_dict()) == ["weight", "bias"]
    seq = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    seq[0] = nn.Linear(2, 2)
    assert list(seq.state_dict()) == ["0.weight", "0.bias"]

    lin = nn.Linear(4, 8)
    lin.weight = nb.shard(lin.weight, mesh, nb.P(None, "tp"))
    spec = lin.weight.sharding
    w = np.arange(32, dtype=np.float32).reshape(4, 8)
    for given in (w, nb.shard(nb.constant(w), mesh, nb.P("dp", None)), nb.constant(w)):
        lin.load_state_dict({"weight": given, "bias": np.zeros(8, np.float32)})
        assert lin.weight.sharding == spec and lin.weight.requires_grad
        np.testing.assert_array_equal(lin.weight.numpy(), w)
    lin.load_state_dict({"weight": w, "bias": nb.shard(nb.zeros(8), mesh, nb.P("tp"))})
    assert lin.bias.sharding is None  # an unsharded parameter stays whole


def test_a_pytorch_bfloat16_state_dict_loads_bit_exactly():
    torch = pytest.importorskip("torch")
    t = torch.nn.LayerNorm(5)
    with torch.no_grad():
        t.weight.copy_(torch.linspace(-3, 3, 5))
    sd = t.bfloat16().state_dict()
    m = nn.LayerNorm(5, dtype=nb.bfloat16)
    m.load_state_dict(sd)
    want = sd["weight"].view(torch.int16).numpy()
    np.testing.assert_array_equal(m.weight.numpy().view(np.int16), want)
    nn.LayerNorm(5).load_state_dict(sd)  # and cast into a float32 model


def test_module_attribute_rules_follow_pytorch():
    """A frozen ``nn.Parameter`` set on a module had been made trainable (the optimizer
    updated it); a parameter or submodule set to None lost its place in the order;
    ``add_module`` took any name (``"training"`` replaced the flag); ``half()`` left
    ``.grad`` in float32; a reshaped parameter met its old moments inside Adam."""

    class Frozen(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(nb.ones((2,)), requires_grad=False)
            self.v = nb.ones((2,))

    m = Frozen()
    assert not m.w.requires_grad and m.v.requires_grad
    opt = nn.optim.SGD(m, lr=0.1)
    (m.w * m.v).sum().backward()
    opt.step()
    np.testing.assert_array_equal(m.w.numpy(), [1.0, 1.0])
    lin = nn.Linear(2, 2)
    lin.weight.requires_grad = False
    with nb.no_grad():
        lin.weight = lin.weight * 2.0  # stays frozen
    assert not lin.weight.requires_grad

    class Ordered(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nb.ones((1,)), nb.ones((2,))
            self.l1, self.l2 = nn.Linear(2, 2), nn.Linear(2, 2)

    o = Ordered()
    o.a = None
    o.a = nb.zeros((1,))
    o.l1 = None
    assert o.l1 is None
    o.l1 = nn.Linear(2, 2)
    assert list(o.state_dict()) == ["a", "b", "l1.weight", "l1.bias", "l2.weight", "l2.bias"]
    with pytest.raises(KeyError, match="without '.'"):
        nn.Module().add_module("a.b", nn.Linear(2, 2))
    with pytest.raises(KeyError, match="attribute 'training' already exists"):
        nn.Module().add_module("training", nn.Linear(2, 2))
    half = nn.Linear(2, 2)
    half(nb.ones((4, 2))).sum().backward()
    half.half()
    assert half.weight.grad.dtype == nb.float16
    adam_lin = nn.Linear(2, 2)
    adam = nn.optim.Adam(adam_lin, lr=0.1)
    adam_lin(nb.ones((4, 2))).sum().backward()
    adam.step()
    adam_lin.weight = nn.Parameter(nb.ones((2, 3)))
    adam_lin.bias = nn.Parameter(nb.zeros((3,)))
    adam_lin(nb.ones((4, 2))).sum().backward()
    with pytest.raises(ValueError, match=r"parameter 0 now has shape \(2, 3\).*new optimizer"):
        adam.step()


def test_submodule_slots_take_modules_and_a_dict_of_modules_registers_them():
    """As PyTorch: a non-module assigned to a submodule's name is a TypeError (the
    submodule and its parameters had silently gone); a dict of modules becomes a
    ModuleDict (as a list becomes a ModuleList: they were static data no optimizer saw).
    Two structures that differ only in a setting say which (``(eval)``)."""

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.sub = nn.Linear(2, 2)
            self.heads = {"a": nn.Linear(2, 1), "b": nn.Linear(2, 1)}

    m = M()
    with pytest.raises(TypeError, match=r"M.sub: cannot assign a int as child module 'sub'"):
        m.sub = 3
    assert isinstance(m.heads, nn.ModuleDict)
    names = [k for k, _ in m.named_parameters()]
    assert names == ["sub.weight", "sub.bias", "heads.a.weight", "heads.a.bias"] + [
        "heads.b.weight",
        "heads.b.bias",
    ]
    m.sub = None
    assert [k for k, _ in m.named_parameters()][0] == "heads.a.weight"
    with pytest.raises(ValueError, match=r"\(eval\)"):
        nb.tree_map(lambda a, b: a + b, nn.Linear(2, 2), nn.Linear(2, 2).eval())


def test_named_modules_lists_a_tied_module_under_each_name_on_request():
    """PyTorch's ``named_modules(remove_duplicate=False)`` and ``register_module``."""

    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)
            self.tied = self.lin

    t = Tied()
    assert [n for n, _ in t.named_modules()] == ["", "lin"]
    assert [n for n, _ in t.named_modules(remove_duplicate=False)] == ["", "lin", "tied"]
    t.register_module("act", nn.ReLU())
    assert [n for n, _ in t.named_modules()] == ["", "lin", "act"]


def test_parameter_list_and_dict_are_pytorch_s():
    """``nn.ParameterList``/``ParameterDict``: parameters under ``"0"``, ``"1"`` or their
    keys, in ``state_dict`` as PyTorch names them, trained by optimizers and ``grad``."""

    class Mixer(nn.Module):
        def __init__(self):
            super().__init__()
            self.scales = nn.ParameterList([nb.ones(2), np.full(2, 2.0, np.float32)])
            self.bias = nn.ParameterDict({"a": nb.zeros(2)})

        def forward(self, x):
            for s in self.scales:
                x = x * s
            return x + self.bias["a"]

    m = Mixer()
    assert list(m.state_dict()) == ["scales.0", "scales.1", "bias.a"]  # PyTorch's keys
    assert all(p.requires_grad for p in m.parameters())
    assert len(m.scales) == 2 and m.scales[-1] is m.scales[1]
    assert [p.shape for p in m.scales[:1]] == [(2,)]
    m.scales.append(nb.ones(2))
    m.bias["b"] = nb.zeros(2)
    assert "b" in m.bias and list(m.bias.keys()) == ["a", "b"] and len(list(m.parameters())) == 5
    x = nb.constant([1.0, 3.0])
    np.testing.assert_allclose(m(x).numpy(), [2.0, 6.0])
    g = nb.grad(lambda mod: mod(x).sum())(m)
    np.testing.assert_allclose(g.scales[0].numpy(), [2.0, 6.0])
    np.testing.assert_allclose(g.bias["a"].numpy(), [1.0, 1.0])
    opt = nn.optim.SGD(m.parameters(), lr=0.5)
    m(x).sum().backward()
    opt.step()
    np.testing.assert_allclose(m.bias["a"].numpy(), [-0.5, -0.5])
    twin = Mixer()
    twin.scales.append(nb.ones(2))
    twin.bias["b"] = nb.zeros(2)
    twin.load_state_dict(m.state_dict())
    np.testing.assert_allclose(twin(x).numpy(), m(x).numpy())
    with pytest.raises(IndexError, match="out of range for 3 parameters"):
        m.scales[3]
    with pytest.raises(KeyError, match="attribute 'training' already exists"):
        m.bias["training"] = nb.zeros(2)
    with pytest.raises(TypeError, match="ParameterList/ParameterDict"):
        m.plain = [nb.ones(2)]


def test_registering_over_an_attribute_or_a_dotted_module_key_is_refused_as_pytorch():
    """register_buffer/register_parameter over a setting replaced it (the layer then failed
    unclearly); a ModuleDict key with a dot broke state_dict later with a bare KeyError."""
    m = nn.Linear(2, 2)
    with pytest.raises(KeyError, match="Linear.register_buffer: attribute 'in_features' already"):
        m.register_buffer("in_features", nb.zeros((1,)))
    with pytest.raises(KeyError, match="attribute 'forward' already exists"):
        m.register_parameter("forward", nb.zeros((1,)))
    assert m.in_features == 2
    m.register_buffer("scale", nb.ones(1))
    m.register_buffer("scale", nb.zeros(1))  # a buffer again: replaced, as PyTorch's
    with pytest.raises(KeyError, match="without '.'"):
        nn.ModuleDict({"x.y": nn.Linear(1, 1)})
    with pytest.raises(KeyError, match="attribute 'training' already exists"):
        nn.ModuleDict()["training"] = nn.Linear(1, 1)


def test_pytorch_container_operators_activation_reprs_and_assign_loads():
    a = nn.Sequential(nn.Linear(2, 3), nn.ReLU())
    joined = a + nn.Sequential(nn.Linear(3, 1))
    assert type(joined) is nn.Sequential and len(joined) == 3 and len(a) == 2
    assert list(joined.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert joined(nb.ones((4, 2))).shape == (4, 1)
    layers = nn.ModuleList([nn.Linear(1, 1)])
    layers += [nn.Linear(1, 2)]
    assert len(layers) == 2 and len(layers + nn.ModuleList([nn.ReLU()])) == 3
    assert a.insert(0, nn.ReLU()) is a and len(a) == 3
    assert repr(nn.LeakyReLU(0.2)) == "LeakyReLU(negative_slope=0.2)"
    assert repr(nn.Hardtanh(-2.0, 2.0)) == "Hardtanh(min_val=-2.0, max_val=2.0)"
    m = nn.Linear(2, 2)
    wide = {k: v.numpy().astype(np.float64) for k, v in m.state_dict().items()}
    copied, assigned = nn.Linear(2, 2), nn.Linear(2, 2)
    copied.load_state_dict(wide)
    assert copied.weight.dtype == nb.float32  # cast into the current parameter
    assigned.load_state_dict(wide, assign=True)  # PyTorch's: the loaded value's own dtype
    assert assigned.weight.dtype == nb.float64 and assigned.weight.requires_grad
    np.testing.assert_array_equal(assigned.weight.numpy(), wide["weight"])
    with pytest.raises(ValueError, match=r"shape \(3,\), expected \(2,\)"):
        assigned.load_state_dict({**wide, "bias": np.zeros(3)}, assign=True)

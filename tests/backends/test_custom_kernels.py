"""Custom Mojo kernels (``nb.custom_op`` / ``nb.call_custom_kernel``) on NumPy and MAX.

The NumPy-backend tests need no compiler. The MAX tests compile as little as possible: ONE
parity program (forward, grad through the kernels' rules, jvp, vmap both ways, a compiled
function, realized with one ``nb.realize``) in this process, then a new process that runs the
same workload and must find everything in the caches (no ``mojo precompile``, no MAX
compile), plus two error cases that fail fast. Cold (empty cache) ~1-2 min on 2 busy cores;
warm a few seconds plus the error cases.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import nabla as nb
from nabla.backends.kernels import KernelError, KernelNotFoundError, KernelPackage
from nabla.backends.numpy import UnsupportedOp
from nabla.core.config import CONFIG

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
KERNELS = ROOT / "examples" / "custom_kernels"


# ----------------------------------------------------------------------------- the ops
def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


softplus_jvp = nb.custom_op("softplus_jvp", KERNELS, numpy_fn=lambda x, t: t * _sigmoid(x))
softplus = nb.custom_op(
    "softplus",
    KERNELS,
    numpy_fn=lambda x: np.logaddexp(0, x),
    vjp=lambda p, ct, out: [softplus_jvp(p[0], ct[0])],
    jvp=lambda p, t, out: [softplus_jvp(p[0], t[0])],
)


def _row_sum_vjp(primals, cotangents, outputs):
    (x,), (ct,) = primals, cotangents
    return [nb.broadcast_to(nb.unsqueeze(ct, -1), x.shape)]


row_sum = nb.custom_op(
    "row_sum",
    KERNELS,
    out_types=lambda x: (x.shape[:-1], x.dtype),
    numpy_fn=lambda x: x.sum(-1),
    vjp=_row_sum_vjp,
    jvp=lambda p, t, out: [nb.sum(t[0], axis=-1)],
)
# the same kernel, batched by a loop over the vmap batch
row_sum_loop = nb.custom_op(
    "row_sum_loop",
    KERNELS,
    kernel="row_sum",
    out_types=lambda x: (x.shape[:-1], x.dtype),
    numpy_fn=lambda x: x.sum(-1),
    vjp=_row_sum_vjp,
    batching="loop",
)
# no NumPy reference: the numpy backend refuses it, auto sends it to MAX
softplus_maxonly = nb.custom_op("softplus_maxonly", KERNELS, kernel="softplus")


class SoftplusProtocol(nb.ops.UnaryOperation):
    """softplus as an op in the original Nabla's protocol: ``kernel`` builds the kernel call
    on MAX graph values, ``_derivative`` gives dy/dx."""

    @property
    def name(self) -> str:
        return "softplus_protocol"

    def kernel(self, args, kwargs):
        x = args[0]
        return [nb.ops.call_custom_kernel("softplus", KERNELS, x, x.type)]

    def _derivative(self, primals, output):
        return nb.sigmoid(primals)


softplus_protocol = SoftplusProtocol()


def loss(x):
    return nb.sum(row_sum(softplus(x)) ** 2)


@nb.compile
def compiled_step(x):
    return row_sum(softplus(x)) * 2.0


def workload(x):
    """Everything the parity test checks, as one list of tensors (one program)."""
    y = row_sum(softplus(x))
    g = nb.grad(loss)(x)
    _, t = nb.jvp(lambda a: row_sum(softplus(a)), (x,), (nb.ones_like(x),))
    v = nb.vmap(lambda a: row_sum(softplus(a)))(x)
    vl = nb.vmap(row_sum_loop)(softplus(x))
    gl = nb.grad(lambda a: nb.sum(nb.vmap(row_sum_loop)(a) ** 2))(x)
    compiled_step(x)  # the first call traces (unrealized, dropped) ...
    # ... later ones on a lazy argument are one compiled_call node: the same program always
    c = compiled_step(x * 1.0)
    return [y, g, t, v, vl, gl, c]


def reference(xn):
    sp = np.logaddexp(0, xn)
    rows = sp.sum(-1)
    grad = 2 * rows[..., None] * _sigmoid(xn)
    return [
        rows,
        grad,
        _sigmoid(xn).sum(-1),
        rows,
        rows,
        2 * xn.sum(-1)[..., None] + 0 * xn,
        2 * rows,
    ]


def finite_difference_grad(xn, eps=1e-6):
    x64 = xn.astype(np.float64)
    f = lambda a: float((np.logaddexp(0, a).sum(-1) ** 2).sum())  # noqa: E731
    g = np.zeros_like(x64)
    for i in np.ndindex(x64.shape):
        d = np.zeros_like(x64)
        d[i] = eps
        g[i] = (f(x64 + d) - f(x64 - d)) / (2 * eps)
    return g


X = np.random.default_rng(0).standard_normal((3, 4, 5)).astype(np.float32)


def _check(outs, xn, rtol, atol):
    for k, (got, want) in enumerate(zip(outs, reference(xn), strict=True)):
        np.testing.assert_allclose(np.asarray(got), want, rtol=rtol, atol=atol, err_msg=f"#{k}")
    np.testing.assert_allclose(
        np.asarray(outs[1]), finite_difference_grad(xn), rtol=1e-3, atol=1e-3
    )


@pytest.fixture
def numpy_backend():
    old = CONFIG.backend
    nb.set_backend("numpy")
    yield
    nb.set_backend(old)


# ----------------------------------------------------------------------------- NumPy backend
def test_numpy_backend_runs_the_reference(numpy_backend):
    outs = workload(nb.asarray(X))
    nb.realize(*outs)
    _check([o.numpy() for o in outs], X, 1e-5, 1e-5)


def test_numpy_backend_several_outputs_and_parameters(numpy_backend):
    x = nb.asarray(X)
    a, b = nb.call_custom_kernel(
        "softplus",
        KERNELS,
        [x],
        [(X.shape, nb.float32), (X.shape[:-1], nb.float32)],
        numpy_fn=lambda v, scale: (v * scale, v.sum(-1)),
        scale=2.0,
    )
    np.testing.assert_allclose(a.numpy(), X * 2.0)
    np.testing.assert_allclose(b.numpy(), X.sum(-1), rtol=1e-6)
    y = softplus(x)  # the custom op named like the kernel keeps its own reference
    np.testing.assert_allclose(y.numpy(), np.logaddexp(0, X), rtol=1e-6)
    bad = nb.call_custom_kernel(
        "softplus", KERNELS, [x], (X.shape, nb.float32), numpy_fn=lambda v: v[0]
    )
    with pytest.raises(UnsupportedOp, match=r"shape \(4, 5\) for output 0.*\(3, 4, 5\)"):
        bad.numpy()


def test_numpy_backend_without_reference_names_op_and_backend(numpy_backend):
    y = softplus_maxonly(nb.asarray(X))
    with pytest.raises(UnsupportedOp, match=r"'softplus_maxonly'.*numpy backend"):
        y.numpy()


def test_protocol_op_records_elementwise_and_numpy_names_it(numpy_backend):
    """The original's protocol: op([x], {}) -> [y] of x's shape and dtype, under vmap too;
    the numpy backend cannot run a kernel() lowering and says so naming the op."""
    from nabla.backends import numpy as np_backend
    from nabla.backends.max import cache
    from nabla.core.ir import TensorSpec, build_program
    from nabla.ops.kernels import ProtocolOp

    x = nb.asarray(X)
    (y,) = softplus_protocol([x], {})
    assert isinstance(softplus_protocol._op, ProtocolOp)
    assert (y.shape, y.dtype) == (x.shape, x.dtype)
    v = nb.vmap(lambda a: softplus_protocol([a])[0])(x)
    assert v.shape == x.shape
    op = softplus_protocol._op
    kw = {
        "op": op.name,
        "kernel": op.kernel,
        "package": None,
        "digest": None,
        "out_types": ((nb.float32, (2,)),),
        "params": (),
        "lower": op.lowering,
    }
    spec = TensorSpec(nb.float32, (2,), nb.CPU())
    prog = build_program(
        "k", (spec,), [("custom_kernel", (0,), kw, (kw["out_types"][0],))], [(0, 0)]
    )
    assert not np_backend.supports(prog)  # auto compiles it with MAX
    assert cache.content_digest(prog) is None  # user code: compiled here, not cached on disk
    with pytest.raises(UnsupportedOp, match=r"'softplus_protocol' is lowered by its kernel\(\)"):
        y.numpy()
    with pytest.raises(nb.OpError, match=r"softplus_protocol: a unary op is called as op\(\[x\]"):
        softplus_protocol([x, x], {})

    class Nameless(nb.ops.UnaryOperation):
        name = ""

        def kernel(self, args, kwargs):
            return list(args)

    with pytest.raises(
        TypeError, match="Nameless: an op in the original Nabla's op-class protocol needs a name"
    ):
        Nameless()


def test_call_custom_kernel_refuses_max_values_outside_a_kernel():
    graph = pytest.importorskip("max.graph")
    from max.dtype import DType

    t = graph.TensorType(DType.float32, (2,), graph.DeviceRef.CPU())
    with graph.Graph("g", input_types=[t]) as g:
        with pytest.raises(TypeError, match="MAX graph value .* outside an op's kernel"):
            nb.ops.call_custom_kernel("softplus", KERNELS, g.inputs[0].tensor, t)


def test_auto_sends_a_kernel_without_reference_to_max():
    from nabla.backends import max_backend
    from nabla.backends import numpy as np_backend
    from nabla.core.ir import TensorSpec, build_program
    from nabla.runtime import executor

    pkg = KernelPackage.load(KERNELS)
    kw = {
        "op": "softplus_maxonly",
        "kernel": "softplus",
        "package": str(pkg.path),
        "digest": pkg.digest,
        "out_types": ((nb.float32, (2,)),),
        "params": (),
    }
    spec = TensorSpec(nb.float32, (2,), nb.CPU())
    prog = build_program(
        "k", (spec,), [("custom_kernel", (0,), kw, ((nb.float32, (2,)),))], [(0, 0)]
    )
    assert not np_backend.supports(prog)
    old = CONFIG.backend
    try:
        nb.set_backend("auto")
        want = "max" if max_backend() is not None else "numpy"
        assert executor.select_backend(prog, 0) == want
    finally:
        nb.set_backend(old)


def test_only_programs_with_kernels_get_extensions():
    from nabla.backends.kernels import kernel_instructions
    from nabla.backends.max.kernels import extensions_for
    from nabla.core.ir import TensorSpec, build_program

    spec = TensorSpec(nb.float32, (2,), nb.CPU())
    plain = build_program("p", (spec,), [("exp", (0,), {}, ((nb.float32, (2,)),))], [(0, 0)])
    assert extensions_for(plain) == []  # no package is precompiled or loaded
    kw = {
        "op": "softplus",
        "kernel": "softplus",
        "package": str(KERNELS),
        "digest": "d",
        "out_types": ((nb.float32, (2,)),),
        "params": (),
    }
    inner = build_program(
        "i", (spec,), [("custom_kernel", (0,), kw, ((nb.float32, (2,)),))], [(0, 0)]
    )
    outer = build_program(
        "o", (spec,), [("compiled_call", (0,), {"program": inner}, ((nb.float32, (2,)),))], [(0, 0)]
    )
    assert [i.kwargs["kernel"] for i in kernel_instructions(outer)] == ["softplus"]


def test_kernel_not_found_lists_paths_and_registered_names():
    with pytest.raises(KernelNotFoundError) as info:
        nb.call_custom_kernel("softpuls", KERNELS, [nb.asarray(X)], (X.shape, nb.float32))
    msg = str(info.value)
    assert "'softpuls'" in msg and "softplus.mojo" in msg and "row_sum.mojo" in msg
    assert "row_sum, softplus, softplus_jvp" in msg


def test_bad_calls_raise_at_the_call(tmp_path):
    x = nb.asarray(X)
    with pytest.raises(TypeError, match="out_types"):
        nb.call_custom_kernel("softplus", KERNELS, [x], "float32")
    with pytest.raises(TypeError, match="kernel parameter"):
        nb.call_custom_kernel("softplus", KERNELS, [x], (X.shape, nb.float32), scale=[1])
    with pytest.raises(nb.OpError, match=r"softplus_jvp.*float32\(3, 4, 5\), float32\(5,\)"):
        softplus_jvp(x, nb.asarray(X[0, 0]))
    with pytest.raises(KernelError, match="no __init__.mojo"):
        nb.call_custom_kernel("softplus", tmp_path, [x], (X.shape, nb.float32))
    with pytest.raises(NotImplementedError, match="'softplus_jvp'.*no vjp rule"):
        nb.grad(lambda a: nb.sum(softplus_jvp(a, a)))(x)


def test_package_digest_follows_the_sources(tmp_path, monkeypatch):
    from nabla.backends import kernels as kernels_mod

    pkg = tmp_path / "k"
    pkg.mkdir()
    (pkg / "__init__.mojo").write_text("")
    src = (KERNELS / "softplus.mojo").read_text()
    (pkg / "a.mojo").write_text(src)
    d1 = KernelPackage.load(pkg).digest
    (pkg / "a.mojo").write_text(src + "\n# edited\n")
    os.utime(pkg / "a.mojo", ns=(1, 1))  # a new mtime, whatever the clock's resolution
    assert KernelPackage.load(pkg).digest == d1  # not looked at again within RECHECK_SECONDS
    monkeypatch.setattr(kernels_mod, "RECHECK_SECONDS", 0.0)
    d2 = KernelPackage.load(pkg).digest
    assert d1 != d2 and KernelPackage.load(pkg).names == ("softplus", "softplus_jvp")


def test_example_runs_on_the_numpy_references():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "custom_kernel.py"), "--numpy"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "compiled step" in proc.stdout and "backend: numpy" in proc.stdout


# ----------------------------------------------------------------------------- MAX
needs_max = pytest.mark.max


def _max_or_skip():
    from nabla.backends import max_backend

    mx = max_backend()
    if mx is None:
        pytest.skip("MAX is not installed")
    return mx


@pytest.fixture
def max_backend():
    mx = _max_or_skip()
    old = CONFIG.backend
    nb.set_backend("max")
    yield mx
    nb.set_backend(old)


@needs_max
def test_max_parity_grad_vmap_compile(max_backend):
    outs = workload(nb.asarray(X))
    nb.realize(*outs)
    _check([o.numpy() for o in outs], X, 2e-5, 2e-5)


@needs_max
def test_max_protocol_op_forward_grad_jvp_vmap(max_backend):
    """One program: the protocol op's kernel() lowered on MAX, with its _derivative."""
    x = nb.asarray(X)
    (y,) = softplus_protocol([x], {})
    g = nb.grad(lambda a: nb.sum(softplus_protocol([a], {})[0] * a))(x)
    _, t = nb.jvp(lambda a: softplus_protocol([a], {})[0], (x,), (nb.ones_like(x),))
    v = nb.vmap(lambda a: softplus_protocol([a], {})[0])(x)
    nb.realize(y, g, t, v)
    sp, sig = np.logaddexp(0, X), _sigmoid(X)
    np.testing.assert_allclose(y.numpy(), sp, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(g.numpy(), sig * X + sp, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(t.numpy(), sig, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(v.numpy(), sp, rtol=2e-5, atol=2e-5)


CHILD = """
import json, sys
sys.path.insert(0, {root!r}); sys.path.insert(0, {here!r})
import nabla as nb
import test_custom_kernels as t
nb.set_backend("max")
outs = t.workload(nb.asarray(t.X))
nb.realize(*outs)
t._check([o.numpy() for o in outs], t.X, 2e-5, 2e-5)
stats = nb.backend_stats()  # the program came from the .mef cache: no graph was built
# a graph built in this process would find the package precompiled by the parent:
from nabla.backends.kernels import KernelPackage
from nabla.backends.max.kernels import extension_for
pkg = KernelPackage.load(t.KERNELS)
stats["mojoc"] = str(extension_for(str(pkg.path), pkg.digest))
stats["after"] = nb.backend_stats()
print("STATS" + json.dumps(stats))
"""


@needs_max
def test_max_new_process_hits_the_caches(max_backend):
    from nabla.backends.max.kernels import extension_for

    outs = workload(nb.asarray(X))  # in the caches already when the parity test ran
    nb.realize(*outs)
    pkg = KernelPackage.load(KERNELS)
    mojoc = extension_for(str(pkg.path), pkg.digest)  # precompiled (once, ever) by now
    mtime = mojoc.stat().st_mtime_ns
    code = CHILD.format(root=str(ROOT), here=str(HERE))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    stats = json.loads(proc.stdout.split("STATS", 1)[1])
    assert stats["max_compiles"] == 0 and stats["max_disk_hits"] >= 1, stats
    assert stats["max_kernel_builds"] == 0, stats  # no `mojo precompile`
    after = stats["after"]
    assert after["max_kernel_builds"] == 0 and after["max_kernel_cache_hits"] == 1, after
    assert Path(stats["mojoc"]) == mojoc and mojoc.stat().st_mtime_ns == mtime  # not rebuilt


@needs_max
def test_max_wrong_output_type_reports_the_kernel_message(max_backend):
    y = nb.call_custom_kernel("softplus", KERNELS, [nb.asarray(X)], (X.shape, nb.float64))
    with pytest.raises(KernelError) as info:
        y.numpy()
    msg = str(info.value)
    assert "softplus" in msg and "float64" in msg and "execute" in msg, msg


@needs_max
def test_mojo_compile_error_is_reported_with_the_compiler_message(tmp_path):
    _max_or_skip()
    from nabla.backends.max.kernels import extension_for

    pkg = tmp_path / "broken"
    pkg.mkdir()
    (pkg / "__init__.mojo").write_text("")
    (pkg / "bad.mojo").write_text(
        'from extensibility import register\n\n@register("bad")\nstruct Bad:\n'
        "    @staticmethod\n    def execute() raises:\n        var x: Int = undefined_name\n"
    )
    digest = KernelPackage.load(pkg).digest
    with pytest.raises(KernelError) as info:
        extension_for(str(pkg), digest)
    msg = str(info.value)
    assert "bad.mojo" in msg and "undefined_name" in msg, msg


BUILDER = """
import json, sys
sys.path.insert(0, {root!r})
import nabla as nb
from nabla.backends.kernels import KernelPackage
from nabla.backends.max.kernels import extension_for
pkg = KernelPackage.load({pkg!r})
path = extension_for(str(pkg.path), pkg.digest)
print("OUT" + json.dumps([str(path), nb.backend_stats()["max_kernel_builds"]]))
"""


@needs_max
def test_concurrent_processes_precompile_a_package_once(tmp_path):
    _max_or_skip()
    import shutil

    pkg = tmp_path / "pkg"
    shutil.copytree(KERNELS, pkg)
    (pkg / "softplus.mojo").write_text((KERNELS / "softplus.mojo").read_text() + "\n# copy\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT), NABLA_CACHE_DIR=str(tmp_path / "cache"))
    code = BUILDER.format(root=str(ROOT), pkg=str(pkg))
    procs = [
        subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
        for _ in range(2)
    ]
    outs = [json.loads(p.communicate(timeout=600)[0].split("OUT", 1)[1]) for p in procs]
    assert outs[0][0] == outs[1][0] and Path(outs[0][0]).is_file()
    assert sorted(n for _, n in outs) == [0, 1]  # one built it, the other waited and used it

"""``communication_report`` and ``Trace.collectives``: which collectives a sharded function
runs and the bytes each device sends, checked against the ring formulas by hand."""

import numpy as np
import pytest

import nabla as nb
from nabla import P

M22 = nb.DeviceMesh("m22", (2, 2), ("dp", "tp"))


def arr(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def mlp(x, w1, w2, b):
    return nb.relu(x @ w1) @ w2 + b


def megatron_args():
    x, w1, w2, b = arr(8, 16), arr(16, 32, seed=1), arr(32, 16, seed=2), arr(16, seed=3)
    return (
        nb.shard(x, M22, P("dp")),
        nb.shard(w1, M22, P(None, "tp")),  # column-parallel
        nb.shard(w2, M22, P("tp")),  # row-parallel
        nb.shard(b, M22, P()),
    )


def test_megatron_mlp_reports_one_all_reduce_of_the_output_block():
    report = nb.communication_report(mlp)(*megatron_args())
    assert [e.op for e in report.entries] == ["all_reduce"]
    (e,) = report.entries
    assert e.axes == ("tp",)
    assert e.input_spec == "[dp, -]{tp:sum}" and e.output_spec == "[dp, -]"
    # each device holds an (8/2, 16) float32 block of partial sums; ring over n = 2 devices
    n, local_bytes = 2, (8 // 2) * 16 * 4
    assert e.bytes == 2 * (n - 1) / n * local_bytes
    assert report.total_bytes == e.bytes
    assert len(report) == 1


def test_report_prints_a_table_with_estimated_seconds():
    report = nb.communication_report(mlp, bandwidth=1e9)(*megatron_args())
    text = str(report)
    assert "all_reduce" in text and "[dp, -]{tp:sum}" in text and "seconds" in text
    assert text.splitlines()[-1].startswith("total")
    assert report.estimated_seconds() == pytest.approx(256 / 1e9)
    assert report.estimated_seconds(2e9) == pytest.approx(128 / 1e9)
    with pytest.raises(ValueError, match="positive bandwidth"):
        nb.communication_report(mlp)(*megatron_args()).estimated_seconds()


def test_reshard_that_drops_an_axis_reports_an_all_gather():
    x = nb.shard(arr(4, 6), M22, P("dp", "tp"))
    report = nb.communication_report(lambda v: nb.reshard(v, M22, P(None, "tp")))(x)
    assert [e.op for e in report.entries] == ["all_gather"]
    (e,) = report.entries
    assert e.axes == ("dp",) and e.input_spec == "[dp, tp]" and e.output_spec == "[-, tp]"
    # (n - 1) blocks of (4/2, 6/2) float32 each
    assert e.bytes == (2 - 1) * (2 * 3 * 4)


def test_elementwise_on_equally_sharded_inputs_communicates_nothing():
    a = nb.shard(arr(4, 6), M22, P("dp", "tp"))
    b = nb.shard(arr(4, 6, seed=1), M22, P("dp", "tp"))
    report = nb.communication_report(lambda u, v: nb.tanh(u) * v + u)(a, b)
    assert report.entries == [] and report.total_bytes == 0
    assert str(report).splitlines()[-1].split() == ["total", "0"]


def test_trace_collectives_lists_local_slices_and_the_gradient_reductions():
    args = megatron_args()
    records = nb.trace(nb.grad(lambda *a: nb.sum(mlp(*a) ** 2), argnums=(1, 2)))(
        *args
    ).collectives()
    ops = [r.op for r in records]
    assert "shard" in ops  # a constant sliced locally: listed, nothing sent
    assert all(r.bytes == 0 for r in records if r.op == "shard")
    # data parallelism: each weight's gradient is summed over dp
    grads = [r for r in records if r.op == "all_reduce" and r.axes == ("dp",)]
    assert sorted(r.input_spec for r in grads) == ["[-, tp]{dp:sum}", "[tp, -]{dp:sum}"]
    report = nb.communication_report(nb.grad(lambda *a: nb.sum(mlp(*a) ** 2), argnums=(1, 2)))(
        *args
    )
    assert report.total_bytes == sum(r.bytes for r in records)
    assert report.local == sum(1 for r in records if r.bytes == 0)

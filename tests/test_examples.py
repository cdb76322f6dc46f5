"""Every example runs at a small size; training examples' losses fall by a stated factor, their
step compiles once, and they save a loss-curve PNG."""

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
sys.path.insert(0, str(EXAMPLES))

pytest.importorskip("matplotlib")


def _example(name):
    return importlib.import_module(name)


def _mean(values):
    return float(np.mean(values))


def test_tensors_ops_tour():
    out = _example("tensors_ops").main(verbose=False)
    assert out["matches_numpy"]
    np.testing.assert_allclose(out["matmul"], [[14, 32], [32, 77]])


def test_autodiff_tour():
    out = _example("autodiff_tour").main(verbose=False)
    assert out["grad_ok"] and out["third"] == 48.0 and out["backward"] == [3.0, -4.0]
    assert out["per_example_shape"] == (4, 3, 2)


def test_graph_tracing():
    out = _example("graph_tracing").main(verbose=False)
    assert "tanh" in out["forward"] and "matmul" in out["mlp_grad"]
    assert out["grad"].count("\n") > out["forward"].count("\n")


def test_transforms_compile():
    out = _example("transforms_compile").main(steps=15, verbose=False)
    assert out["misses"] == 1 and out["dyn_misses"] == 1 and out["jac_shape"] == (3, 2, 4, 2)
    assert out["losses"][-1] < out["losses"][0]


# (module, kwargs, factor): mean of the last 5 losses <= mean of the first 5 / factor
TRAINING = [
    ("mlp_pytorch", {"steps": 100}, 4.0),
    ("mlp_jax", {"steps": 100}, 4.0),
    ("transformer_training", {"style": "jax", "steps": 40}, 4.0),
    ("transformer_training", {"style": "pytorch", "steps": 40}, 4.0),
    ("transformer_training", {"style": "compile_step", "steps": 40}, 4.0),
    ("cnn_training", {"steps": 50}, 4.0),
    ("lora_finetune", {"steps": 80, "pretrain_steps": 80}, 2.0),
    ("qlora_finetune", {"steps": 80, "pretrain_steps": 80}, 2.0),
]


@pytest.mark.parametrize(
    "name,kwargs,factor", TRAINING, ids=[f"{n}-{k.get('style', '')}" for n, k, _ in TRAINING]
)
def test_training_example_loss_falls(tmp_path, name, kwargs, factor):
    plot = tmp_path / "loss.png"
    out = _example(name).main(**kwargs, plot_path=plot, progress=False)
    losses = out["losses"]
    assert len(losses) == kwargs["steps"]
    first, last = _mean(losses[:5]), _mean(losses[-5:])
    assert last <= first / factor, f"{name}: loss {first:.4f} -> {last:.4f}, wanted {factor}x"
    assert out["misses"] == 1  # one trace for the whole loop
    assert plot.exists() and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_lora_merge_and_checkpoint(tmp_path):
    ckpt = tmp_path / "adapters.safetensors"
    out = _example("lora_finetune").main(
        steps=10, pretrain_steps=10, plot_path=None, checkpoint_path=ckpt, progress=False
    )
    assert out["merge_error"] < 1e-4 and out["trainable"] < out["base"]
    import nabla as nb

    adapters, state, meta = nb.nn.finetune.load_finetune_checkpoint(ckpt)
    np.testing.assert_array_equal(adapters["l1"]["A"].numpy(), out["adapters"]["l1"]["A"].numpy())
    assert state["step"].item() == 10.0 and meta["user_metadata"]["rank"] == 4


def test_cnn_learns_the_task():
    out = _example("cnn_training").main(steps=60, plot_path=None, progress=False)
    assert out["accuracy"] > 0.6


def test_pipeline_mlp_trains_like_the_unpipelined_model():
    out = _example("pipeline_mlp").main(steps=3, verbose=False)
    for schedule in ("gpipe", "1f1b"):
        np.testing.assert_allclose(out["losses"][schedule], out["reference"], rtol=1e-10)
    assert out["reference"][-1] < out["reference"][0]
    assert out["bubble"]["gpipe"] == out["bubble"]["1f1b"] == pytest.approx(3 / 7)
    assert out["peak_activations"]["1f1b"] == [4, 3, 2, 1]


def test_pipeline_dp_trains_like_the_single_device_model():
    out = _example("pipeline_dp").main(steps=2, verbose=False)
    for schedule in ("gpipe", "1f1b"):
        np.testing.assert_allclose(out["losses"][schedule], out["reference"], rtol=1e-10)


def test_pipeline_inference_matches_for_every_microbatch_count():
    out = _example("pipeline_inference").main(batches=2, microbatch_counts=(1, 4), verbose=False)
    assert [r["microbatches"] for r in out["rows"]] == [1, 4]
    assert out["rows"][0]["bubble"] > out["rows"][1]["bubble"]
    assert all(r["max_error"] < 1e-12 for r in out["rows"])


def test_tensor_parallel_transformer_block():
    out = _example("tensor_parallel_transformer").main(verbose=False)
    assert all(err < 1e-4 for err in out["errors"].values())
    # Megatron: one all_reduce over tp per half of the block forward
    assert out["forward_collectives"] == [("all_reduce", ("tp",))] * 2


# the README's first command installs no extras: MAX (and mpi4py) are then absent
WITHOUT_MAX = """
import importlib.abc, runpy, sys

class NoMax(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("max", "mpi4py"):
            raise ImportError(f"{name} is not installed (hidden by the test)")
        return None

sys.meta_path.insert(0, NoMax())
runpy.run_path(sys.argv[1], run_name="__main__")
import nabla as nb
assert nb.backends.max_backend() is None
assert not any(k.startswith("max_") for k in nb.backend_stats())
print("ran without MAX")
"""


def test_quickstart_runs_without_max_installed():
    import subprocess

    res = subprocess.run(
        [sys.executable, "-c", WITHOUT_MAX, str(EXAMPLES / "quickstart.py")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "ran without MAX" in res.stdout


def test_digits_cnn_reaches_97_percent_on_held_out_digits(tmp_path):
    """Real data: scikit-learn's bundled digits, a held-out 20%, BatchNorm in the model."""
    pytest.importorskip("sklearn")  # in the test extra; skipped only outside it
    plot = tmp_path / "digits.png"
    out = _example("digits_cnn").main(epochs=4, plot_path=plot, progress=False)
    assert out["test_accuracy"] >= 0.97, out["test_curve"]
    assert out["retraces"] == 1  # one compiled step for every batch, BatchNorm included
    assert out["losses"][-1] < out["losses"][0] / 10
    assert plot.exists() and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_char_lstm_beats_the_unigram_entropy():
    out = _example("char_lstm").main(
        steps=150, hidden=64, batch_size=16, seq_len=48, plot_path=None, progress=False
    )
    assert out["final_loss"] < out["unigram_entropy"] - 0.5, out["final_loss"]

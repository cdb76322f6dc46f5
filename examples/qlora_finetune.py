"""QLoRA finetuning: quantize a frozen pretrained MLP to 4-bit NormalFloat (NF4) and train LoRA
adapters on top; the quantized base is dequantized inside the compiled step and never changes.

Run: python examples/qlora_finetune.py
"""

import numpy as np

import nabla as nb

try:
    from ._common import save_loss_curve
    from .lora_finetune import finetune, forward, pretrain, teacher_data
except ImportError:  # run as a script
    from _common import save_loss_curve
    from lora_finetune import finetune, forward, pretrain, teacher_data

nn = nb.nn
ft = nn.finetune


def main(
    steps=150,
    pretrain_steps=150,
    rank=4,
    alpha=8.0,
    lr=1e-2,
    batch_size=64,
    block_size=64,
    plot_path="qlora_loss.png",
    checkpoint_path=None,
    progress=True,
    seed=0,
) -> dict:
    base = pretrain(pretrain_steps, seed)
    qbase = dict(base)
    qbase["w1"] = ft.quantize_nf4(base["w1"], block_size)
    qbase["w2"] = ft.quantize_nf4(base["w2"], block_size)
    fp32_bytes = 4 * sum(int(np.prod(base[k].shape)) for k in ("w1", "w2"))
    nf4_bytes = qbase["w1"].nbytes + qbase["w2"].nbytes
    deq = ft.dequantize_nf4(qbase["w1"]).numpy()
    rel_error = float(np.abs(deq - base["w1"].numpy()).mean() / np.abs(base["w1"].numpy()).mean())

    x, y = teacher_data(2048, shift_rank=2, seed=seed)
    xt, yt = nb.constant(x[:512]), nb.constant(y[:512])
    base_loss = float(nn.functional.mse_loss(forward(base, xt), yt).item())
    adapters, state, losses, step = finetune(
        qbase,
        x,
        y,
        steps,
        rank,
        alpha,
        lr,
        seed,
        batch_size,
        progress,
        ft.qlora_linear,
        "QLoRA finetune",
    )
    if progress:
        print(
            f"NF4 weights {nf4_bytes} bytes vs {fp32_bytes} in float32 "
            f"({fp32_bytes / nf4_bytes:.1f}x smaller), mean relative error {rel_error:.3f}; "
            f"loss {losses[0]:.4f} -> {losses[-1]:.4f} (full-precision base on task B: "
            f"{base_loss:.4f})"
        )
    if plot_path:
        save_loss_curve(losses, plot_path, f"QLoRA finetuning (NF4 base, rank {rank})")
    if checkpoint_path:
        ft.save_finetune_checkpoint(
            checkpoint_path, adapters, state, metadata={"rank": rank, "alpha": alpha, "base": "nf4"}
        )
    return {
        "losses": losses,
        "misses": step.stats.misses,
        "compression": fp32_bytes / nf4_bytes,
        "rel_error": rel_error,
        "adapters": adapters,
    }


if __name__ == "__main__":
    main(checkpoint_path="qlora_adapters.safetensors")

"""Record PyTorch's ``F.multi_head_attention_forward`` for tests/nn/test_nn_torch_port.py
(needs torch):

    python tests/nn/data/make_mha_functional.py

Each case of ``CASES`` is the call's keyword settings; the inputs and weights come from
``arrays()`` (NumPy, seeded), shared with the test. Recorded per case: the output, the
weights (when returned) and the gradients of ``sum(output * probe)`` in the query, the
key and the input projection weight.
"""

from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
L, S, N, E, H, KDIM = 4, 5, 3, 8, 2, 6

CASES = {
    "plain": {},
    "bias_kv_zero_attn_masks": {
        "bias_kv": True,
        "add_zero_attn": True,
        "key_padding_mask": "bool",
        "attn_mask": "bool",
    },
    "float_masks_per_head": {
        "key_padding_mask": "float",
        "attn_mask": "float_per_head",
        "average_attn_weights": False,
    },
    "separate_kdim_no_weights": {"separate": True, "need_weights": False},
    "unbatched": {"unbatched": True},
}


def arrays() -> dict:
    """The inputs, weights, masks and the output probe, float32 (masks bool)."""
    rng = np.random.default_rng(0)

    def normal(*shape, scale=1.0):
        return (scale * rng.standard_normal(shape)).astype(np.float32)

    a = {
        "query": normal(L, N, E),
        "key": normal(S, N, E),
        "value": normal(S, N, E),
        "key_k": normal(S, N, KDIM),
        "in_proj_weight": normal(3 * E, E, scale=0.3),
        "in_proj_bias": normal(3 * E, scale=0.3),
        "bias_k": normal(1, 1, E, scale=0.3),
        "bias_v": normal(1, 1, E, scale=0.3),
        "out_proj_weight": normal(E, E, scale=0.3),
        "out_proj_bias": normal(E, scale=0.3),
        "q_proj_weight": normal(E, E, scale=0.3),
        "k_proj_weight": normal(E, KDIM, scale=0.3),
        "v_proj_weight": normal(E, KDIM, scale=0.3),
        "probe": normal(L, N, E),
    }
    kpm = np.zeros((N, S), bool)
    kpm[1, -2:] = True
    a["kpm_bool"] = kpm
    a["kpm_float"] = np.where(kpm, -1e4, 0.0).astype(np.float32)
    a["mask_bool"] = np.triu(np.ones((L, S), bool), 1)
    a["mask_float_per_head"] = normal(N * H, L, S)
    return a


def call(F, conv, a: dict, case: dict, query=None, key=None, w=None):
    """``F.multi_head_attention_forward`` with ``case``'s settings; ``conv`` makes the
    library's tensors from arrays; ``query``/``key``/``w`` (the input projection weight,
    or the query projection's with separate weights) replace theirs when given."""
    c = lambda name: conv(a[name])  # noqa: E731
    q = c("query") if query is None else query
    separate = case.get("separate", False)
    k = (c("key_k") if separate else c("key")) if key is None else key
    v = c("key_k") if separate else c("value")
    kw = {"training": False, "need_weights": case.get("need_weights", True)}
    if "average_attn_weights" in case:
        kw["average_attn_weights"] = case["average_attn_weights"]
    if "key_padding_mask" in case:
        kw["key_padding_mask"] = c(f"kpm_{case['key_padding_mask']}")
    if "attn_mask" in case:
        kw["attn_mask"] = c(f"mask_{case['attn_mask']}")
    packed = None
    if separate:
        kw.update(
            use_separate_proj_weight=True,
            q_proj_weight=c("q_proj_weight") if w is None else w,
            k_proj_weight=c("k_proj_weight"),
            v_proj_weight=c("v_proj_weight"),
        )
    else:
        packed = c("in_proj_weight") if w is None else w
    if case.get("unbatched"):
        q, k, v = q[:, 0], k[:, 0], v[:, 0]
    bias_kv = case.get("bias_kv", False)
    return F.multi_head_attention_forward(
        q,
        k,
        v,
        E,
        H,
        packed,
        c("in_proj_bias"),
        c("bias_k") if bias_kv else None,
        c("bias_v") if bias_kv else None,
        case.get("add_zero_attn", False),
        0.0,
        c("out_proj_weight"),
        c("out_proj_bias"),
        **kw,
    )


def main():
    import torch

    a = arrays()
    out = {}
    for name, case in CASES.items():
        conv = torch.tensor
        q = torch.tensor(a["query"], requires_grad=True)
        k = torch.tensor(a["key_k" if case.get("separate") else "key"], requires_grad=True)
        w_name = "q_proj_weight" if case.get("separate") else "in_proj_weight"
        w = torch.tensor(a[w_name], requires_grad=True)
        y, weights = call(torch.nn.functional, conv, a, case, q, k, w)
        probe = torch.tensor(a["probe"][:, 0] if case.get("unbatched") else a["probe"])
        (y * probe).sum().backward()
        out[f"{name}/out"] = y.detach().numpy()
        if weights is not None:
            out[f"{name}/weights"] = weights.detach().numpy()
        out[f"{name}/grad_query"] = q.grad.numpy()
        out[f"{name}/grad_key"] = k.grad.numpy()
        out[f"{name}/grad_w"] = w.grad.numpy()
    np.savez_compressed(HERE / "mha_functional.npz", **out)
    print(f"wrote {len(CASES)} cases to {HERE / 'mha_functional.npz'} (torch {torch.__version__})")


if __name__ == "__main__":
    main()

"""User mistakes raise at the op call, before anything is computed, with a useful message.

Every case builds its inputs as *promise* tensors (an op on a constant, not yet computed), calls
the op wrongly, and checks that

- the expected exception type (``ValueError`` / ``TypeError`` / ``IndexError``) is raised,
- no evaluation happened (``GRAPH.stats["evaluations"]`` unchanged, inputs still promises),
- the message names the op and the shapes/dtypes the user passed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

import nabla as nb
from nabla.core import config
from nabla.core.config import CONFIG
from nabla.runtime.graph import GRAPH


@pytest.fixture(autouse=True)
def _numpy_backend():
    with nb.backend("numpy"):
        yield


def lazy(*shape, dtype=np.float32):
    """A promise tensor of ``shape`` (its value is not computed yet)."""
    t = nb.stop_gradient(nb.constant(np.ones(shape, dtype=dtype)))
    assert not t.is_realized and t.dtype is nb.DType(np.dtype(dtype).name)
    return t


def concrete(value):
    return nb.constant(np.asarray(value))


def check(exc, fn, *fragments):
    """``fn()`` raises ``exc`` without evaluating anything; the message has every fragment."""
    before = GRAPH.stats["evaluations"]
    with pytest.raises(exc) as info:
        fn()
    assert GRAPH.stats["evaluations"] == before, "the error was raised only after evaluating"
    msg = str(info.value)
    for frag in fragments:
        assert frag in msg, f"{frag!r} missing from message: {msg!r}"
    return msg


# (id, exception, thunk, fragments the message must contain)
CASES = [
    # --- broadcasting and matmul
    ("add_broadcast", ValueError, lambda: nb.add(lazy(2, 3), lazy(4)), ["add", "(2, 3)", "(4,)"]),
    ("mul_operator", ValueError, lambda: lazy(2, 3) * lazy(3, 2), ["mul", "(2, 3)", "(3, 2)"]),
    (
        "where_broadcast",
        ValueError,
        lambda: nb.where(lazy(3, dtype=bool), lazy(3), lazy(2)),
        ["where", "(3,)", "(2,)"],
    ),
    (
        "matmul_contracted",
        ValueError,
        lambda: nb.matmul(lazy(2, 3), lazy(4, 5)),
        ["matmul", "(2, 3)", "(4, 5)"],
    ),
    ("matmul_operator", ValueError, lambda: lazy(2, 3) @ lazy(2, 3), ["matmul", "(2, 3)"]),
    ("matmul_0d", ValueError, lambda: nb.matmul(lazy(), lazy(3)), ["matmul", "()", "(3,)"]),
    # 1-D operands are named as passed, not as the matrices they become
    ("matmul_vectors", ValueError, lambda: nb.matmul(lazy(3), lazy(4)), ["(3,) and (4,)"]),
    ("matmul_matrix_vector", ValueError, lambda: lazy(2, 3) @ lazy(4), ["(2, 3) and (4,)"]),
    (
        "matmul_batch",
        ValueError,
        lambda: nb.matmul(lazy(2, 2, 3), lazy(3, 3, 4)),
        ["matmul", "(2, 2, 3)", "(3, 3, 4)"],
    ),
    # --- reshape
    (
        "reshape_size",
        ValueError,
        lambda: nb.reshape(lazy(2, 3), (4, 2)),
        ["reshape", "(2, 3)", "(4, 2)"],
    ),
    ("reshape_method", ValueError, lambda: lazy(2, 3).reshape(5, -1), ["reshape", "(2, 3)"]),
    ("reshape_two_minus_one", ValueError, lambda: nb.reshape(lazy(2, 3), (-1, -1)), ["reshape"]),
    ("reshape_float", TypeError, lambda: nb.reshape(lazy(2, 3), (2.0, 3)), ["reshape", "2.0"]),
    (
        "reshape_str_entry",
        TypeError,
        lambda: lazy(2, 3).reshape("a", 3),
        ["reshape", "('a', 3)", "(2, 3)"],
    ),
    ("reshape_str_shape", TypeError, lambda: lazy(2, 3).reshape("6"), ["reshape", "'6'", "(2, 3)"]),
    (
        "reshape_str_fn",
        TypeError,
        lambda: nb.reshape(lazy(2, 3), "12"),
        ["reshape", "'12'", "(2, 3)"],
    ),
    ("zeros_str_shape", TypeError, lambda: nb.zeros("12"), ["shape", "'12'"]),
    # --- reductions and axes
    ("sum_axis_range", IndexError, lambda: nb.sum(lazy(2, 3), axis=2), ["sum", "2", "(2, 3)"]),
    ("sum_axis_neg", IndexError, lambda: lazy(2, 3).sum(axis=-3), ["sum", "-3", "(2, 3)"]),
    ("mean_axis_range", IndexError, lambda: nb.mean(lazy(2, 3), axis=5), ["mean", "(2, 3)"]),
    ("max_axis_range", IndexError, lambda: nb.max(lazy(2, 3), axis=(0, 7)), ["max", "(2, 3)"]),
    ("argmax_axis_range", IndexError, lambda: nb.argmax(lazy(2, 3), axis=5), ["argmax", "(2, 3)"]),
    ("cumsum_axis_range", IndexError, lambda: nb.cumsum(lazy(2, 3), axis=3), ["cumsum"]),
    ("softmax_axis_range", IndexError, lambda: nb.softmax(lazy(2, 3), axis=4), ["softmax"]),
    (
        "sum_repeated_axis",
        ValueError,
        lambda: nb.sum(lazy(2, 3), axis=(1, 1)),
        ["sum", "repeated", "(2, 3)"],
    ),
    (
        "sum_repeated_axis_negative",
        ValueError,
        lambda: nb.sum(lazy(2, 3), axis=(1, -1)),
        ["sum", "repeated", "(2, 3)"],
    ),
    ("sum_axis_float", TypeError, lambda: nb.sum(lazy(2, 3), axis=1.0), ["sum", "1.0", "(2, 3)"]),
    ("var_axis_float", TypeError, lambda: nb.var(lazy(2, 3), axis=0.5), ["var", "0.5"]),
    # --- shape ops
    (
        "squeeze_non_one",
        ValueError,
        lambda: nb.squeeze(lazy(2, 3), 0),
        ["squeeze", "(2, 3)", "size 2"],
    ),
    ("permute_repeat", ValueError, lambda: nb.permute(lazy(2, 3), (0, 0)), ["permute", "(2, 3)"]),
    (
        "permute_length",
        ValueError,
        lambda: lazy(2, 3).permute(0, 1, 2),
        ["permute", "(2, 3)"],
    ),
    ("permute_range", IndexError, lambda: nb.permute(lazy(2, 3), (0, 2)), ["permute"]),
    (
        "concatenate_shapes",
        ValueError,
        lambda: nb.concatenate([lazy(2, 3), lazy(2, 4)], axis=0),
        ["concatenate", "(2, 3)", "(2, 4)"],
    ),
    (
        "concatenate_ranks",
        ValueError,
        lambda: nb.concatenate([lazy(2, 3), lazy(3)]),
        ["concatenate", "(2, 3)", "(3,)"],
    ),
    (
        "concatenate_mixed_dtype_shapes",
        ValueError,
        lambda: nb.concatenate([lazy(2, 3), lazy(2, 4, dtype=np.float64)]),
        ["concatenate", "(2, 3)", "(2, 4)"],
    ),
    (
        "stack_shapes",
        ValueError,
        lambda: nb.stack([lazy(2, 3), lazy(2, 4)]),
        ["stack", "(2, 3)", "(2, 4)"],
    ),
    ("stack_ranks", ValueError, lambda: nb.stack([lazy(2, 3), lazy(3)]), ["stack", "(3,)"]),
    (
        "split_count",
        ValueError,
        lambda: nb.split(lazy(5, 3), 2),
        ["split", "(5, 3)", "2"],
    ),
    (
        "split_sizes",
        ValueError,
        lambda: nb.split(lazy(5, 3), [2, 2]),
        ["split", "(2, 2)", "(5, 3)"],
    ),
    ("split_axis", IndexError, lambda: nb.split(lazy(4), 2, axis=1), ["split"]),
    (
        "broadcast_to",
        ValueError,
        lambda: nb.broadcast_to(lazy(2, 3), (4, 3)),
        ["broadcast_to", "(2, 3)", "(4, 3)"],
    ),
    (
        "pad_pairs",
        ValueError,
        lambda: nb.pad(lazy(2, 3), ((1, 1), (1, 1), (1, 1))),
        ["pad", "(2, 3)"],
    ),
    ("pad_negative", ValueError, lambda: nb.pad(lazy(2, 3), ((-1, 1), (1, 1))), ["pad", "(2, 3)"]),
    ("einsum_equation_not_str", TypeError, lambda: nb.einsum(3, lazy(2)), ["einsum", "3 (int)"]),
    ("arange_str", TypeError, lambda: nb.arange("a"), ["arange", "stop", "'a'"]),
    (
        "split_float_count",
        TypeError,
        lambda: nb.split(lazy(2, 3), 1.5, axis=1),
        ["split", "1.5", "(2, 3)"],
    ),
    (
        "pad_value_with_reflect",
        ValueError,
        lambda: nb.pad(lazy(2, 3), 1, mode="reflect", value=2.0),
        ["pad", "'reflect'", "fill value"],
    ),
    # --- indexing
    (
        "getitem_too_many",
        IndexError,
        lambda: lazy(2, 3)[0, 0, 0],
        ["too many indices", "(2, 3)"],
    ),
    (
        "getitem_out_of_bounds",
        IndexError,
        lambda: lazy(2, 3)[5],
        ["index 5", "size 2", "(2, 3)"],
    ),
    ("getitem_out_of_bounds_neg", IndexError, lambda: lazy(2, 3)[:, -4], ["-4", "(2, 3)"]),
    ("getitem_float", IndexError, lambda: lazy(2, 3)[1.0], ["1.0", "float", "(2, 3)"]),
    ("getitem_python_bool", IndexError, lambda: lazy(2, 3)[[0, 1], True], ["bool", "(2, 3)"]),
    ("getitem_0d", IndexError, lambda: lazy()[0], ["0-d"]),
    (
        "getitem_float_tensor",
        IndexError,
        lambda: lazy(2, 3)[concrete([0.0, 1.0])],
        ["getitem", "float64", "(2, 3)"],
    ),
    (
        "gather_out_of_range",
        IndexError,
        lambda: nb.gather(lazy(2, 3), concrete([0, 5]), axis=1),
        ["gather", "5", "(2, 3)"],
    ),
    (
        "take_out_of_range_negative",
        IndexError,
        lambda: nb.take(lazy(3), concrete([-4])),
        ["gather", "-4", "(3,)"],
    ),
    (
        "gather_float_indices",
        TypeError,
        lambda: nb.gather(lazy(3), concrete([0.0])),
        ["gather", "float64"],
    ),
    (
        "scatter_update_shape",
        ValueError,
        lambda: nb.scatter(lazy(4, 3), concrete([0, 1]), lazy(3, 3)),
        ["scatter", "(3, 3)", "(2, 3)", "(4, 3)"],
    ),
    (
        "scatter_out_of_range",
        IndexError,
        lambda: nb.scatter(lazy(4, 3), concrete([0, 4]), lazy(2, 3)),
        ["scatter", "4", "(4, 3)"],
    ),
    (
        "slice_update_region",
        ValueError,
        lambda: nb.slice_update(lazy(4, 4), lazy(3, 3), [0, 0], stop=[2, 2]),
        ["slice_update", "(3, 3)", "(2, 2)", "(4, 4)"],
    ),
    (
        "setitem_value_shape",
        ValueError,
        lambda: lazy(2, 3).__setitem__(0, lazy(4)),
        ["setitem", "(4,)", "(3,)"],
    ),
    (
        "at_set_value_shape",
        ValueError,
        lambda: lazy(2, 3).at[0].set(lazy(2)),
        ["(2,)", "(3,)"],
    ),
    # --- convolution and pooling
    (
        "conv2d_channels",
        ValueError,
        lambda: nb.conv2d(lazy(1, 5, 5, 3), lazy(3, 3, 4, 8)),
        ["conv2d", "3", "(3, 3, 4, 8)"],
    ),
    (
        "conv2d_groups",
        ValueError,
        lambda: nb.conv2d(lazy(1, 5, 5, 4), lazy(3, 3, 2, 6), groups=3),
        ["conv2d", "groups=3", "(3, 3, 2, 6)"],
    ),
    (
        "conv2d_too_small",
        ValueError,
        lambda: nb.conv2d(lazy(1, 2, 2, 3), lazy(3, 3, 3, 8)),
        ["conv2d", "(1, 2, 2, 3)", "(3, 3, 3, 8)"],
    ),
    (
        "conv2d_float_stride",
        ValueError,
        lambda: nb.conv2d(lazy(1, 5, 5, 3), lazy(3, 3, 3, 8), stride=1.5),
        ["conv2d", "stride", "1.5"],
    ),
    (
        "conv2d_padding_none",
        ValueError,
        lambda: nb.conv2d(lazy(1, 5, 5, 3), lazy(3, 3, 3, 8), padding=None),
        ["conv2d", "padding", "None"],
    ),
    (
        "conv2d_padding_triples",
        ValueError,
        lambda: nb.conv2d(lazy(1, 5, 5, 3), lazy(3, 3, 3, 8), padding=((1, 2, 3), (1, 1))),
        ["conv2d", "padding", "((1, 2, 3), (1, 1))"],
    ),
    (
        "conv2d_negative_padding",
        ValueError,
        lambda: nb.conv2d(lazy(1, 5, 5, 3), lazy(3, 3, 3, 8), padding=-1),
        ["conv2d", "padding values must be >= 0"],
    ),
    (
        "conv2d_bias_shape",
        ValueError,
        lambda: nb.conv2d(lazy(1, 5, 5, 3), lazy(3, 3, 3, 8), bias=lazy(3)),
        ["conv2d", "bias of shape (3,)", "8 output channels"],
    ),
    (
        "conv2d_rank",
        ValueError,
        lambda: nb.conv2d(lazy(5, 5, 3), lazy(3, 3, 3, 8)),
        ["conv2d", "(5, 5, 3)"],
    ),
    (
        "conv2d_transpose_same",
        ValueError,
        lambda: nb.conv2d_transpose(lazy(1, 4, 4, 2), lazy(3, 3, 2, 3), padding="SAME"),
        ["conv2d_transpose", "'SAME'", "(1, 4, 4, 2)", "(3, 3, 2, 3)"],
    ),
    (
        "max_pool2d_too_small",
        ValueError,
        lambda: nb.max_pool2d(lazy(1, 2, 2, 3), 3),
        ["max_pool2d", "(1, 2, 2, 3)", "(3, 3)"],
    ),
    (
        "avg_pool2d_too_small",
        ValueError,
        lambda: nb.avg_pool2d(lazy(1, 2, 2, 3), (3, 3)),
        ["avg_pool2d", "(1, 2, 2, 3)", "(3, 3)"],
    ),
    # --- einsum
    (
        "einsum_sizes",
        ValueError,
        lambda: nb.einsum("ij,jk->ik", lazy(2, 3), lazy(4, 5)),
        ["einsum", "'j'", "(2, 3)", "(4, 5)"],
    ),
    (
        "einsum_term_count",
        ValueError,
        lambda: nb.einsum("ij,jk->ik", lazy(2, 3)),
        ["einsum", "2 operands", "got 1", "(2, 3)"],
    ),
    ("einsum_term_rank", ValueError, lambda: nb.einsum("ij->i", lazy(2, 3, 4)), ["(2, 3, 4)"]),
    (
        "einsum_repeated_output",
        ValueError,
        lambda: nb.einsum("ij->ii", lazy(3, 3)),
        ["einsum", "output index 'i' appears more than once", "'ij->ii'"],
    ),
    (
        "pow_int_negative_exponent",
        TypeError,
        lambda: lazy(3, dtype=np.int32) ** -1,
        ["pow", "integers cannot be raised to negative powers", "int32 (3,) ** -1"],
    ),
    (
        "pullback_cotangent_dtype",
        ValueError,
        lambda: nb.vjp(lambda a: a * 2.0, lazy(3))[1](lazy(3, dtype=np.int32)),
        ["pullback", "cotangent of dtype int32", "output of dtype float32", "(3,)"],
    ),
    (
        "conv2d_transpose_hwoi_channels",
        ValueError,
        lambda: nb.conv2d_transpose(lazy(1, 4, 4, 5), lazy(3, 3, 2, 6), filter_layout="HWOI"),
        ["conv2d_transpose", "(3, 3, 2, 6) (HWOI)", "(KH, KW, O // groups, 5)"],
    ),
    # --- dtypes
    (
        "cast_unknown",
        TypeError,
        lambda: nb.cast(lazy(2), "complex64"),
        ["cast", "complex64", "(2,)", "float32"],
    ),
    ("astype_unknown", TypeError, lambda: lazy(2).astype("foo"), ["cast", "foo", "(2,)"]),
    ("to_unknown", TypeError, lambda: lazy(2).to("nope"), ["cast", "nope"]),
    (
        "bitwise_and_float",
        TypeError,
        lambda: nb.bitwise_and(lazy(2), lazy(2)),
        ["bitwise_and", "float32", "(2,)"],
    ),
    (
        "sub_bool",
        TypeError,
        lambda: nb.sub(lazy(2, dtype=bool), lazy(2, dtype=bool)),
        ["sub", "bool", "(2,)"],
    ),
    ("neg_bool", TypeError, lambda: nb.neg(lazy(2, dtype=bool)), ["neg", "bool", "(2,)"]),
    ("add_string", TypeError, lambda: nb.add(lazy(2), "a"), ["add", "str", "(2,)"]),
    ("add_none", TypeError, lambda: lazy(2) + None, ["add", "NoneType"]),
    # --- Tensor protocol
    ("item_many", ValueError, lambda: lazy(2).item(), ["item", "(2,)"]),
    ("len_0d", TypeError, lambda: len(lazy()), ["len", "0-d"]),
    ("bool_many", ValueError, lambda: bool(lazy(2)), ["(2,)", "ambiguous"]),
    ("iter_0d", TypeError, lambda: iter(lazy()).__next__(), ["0-d"]),
    # --- creation
    ("constant_object", TypeError, lambda: nb.constant(object()), ["constant", "object"]),
    ("constant_string", TypeError, lambda: nb.constant("abc"), ["constant", "str"]),
    ("constant_dict", TypeError, lambda: nb.constant({"a": 1}), ["constant", "dict"]),
    ("constant_none", TypeError, lambda: nb.constant(None), ["constant", "NoneType"]),
    ("constant_complex", TypeError, lambda: nb.constant(1 + 2j), ["constant", "complex"]),
    ("constant_ragged", ValueError, lambda: nb.constant([[1, 2], [3]]), ["constant", "list"]),
    ("arange_step_zero", ValueError, lambda: nb.arange(0, 5, 0), ["arange", "step", "stop=5"]),
    ("full_negative", ValueError, lambda: nb.full((2, -1), 1.0), ["full", "(2, -1)"]),
    ("zeros_negative", ValueError, lambda: nb.zeros((-3,)), ["(-3,)"]),
    ("full_float_dim", TypeError, lambda: nb.full((2.0, 3), 1.0), ["full", "2.0"]),
    ("default_dtype_int", TypeError, lambda: nb.default_dtype(nb.int32).__enter__(), ["int32"]),
    ("tile_negative", ValueError, lambda: nb.tile(lazy(2, 3), (-1, 2)), ["tile", "(-1, 2)"]),
    ("tile_float", TypeError, lambda: nb.tile(lazy(2, 3), (1.5, 2)), ["tile", "(1.5, 2)"]),
    ("repeat_negative", ValueError, lambda: nb.repeat(lazy(2, 3), -2), ["repeat", "-2"]),
    # --- Python ints out of the dtype's range (int32 by default)
    (
        "constant_int_overflow",
        OverflowError,
        lambda: nb.constant(2**70),
        ["constant", str(2**70), "int32", "-2147483648 to 2147483647"],
    ),
    (
        "constant_list_int_overflow",
        OverflowError,
        lambda: nb.constant([1, 2**70]),
        ["constant", str(2**70), "int32"],
    ),
    (
        "constant_list_int32_overflow",
        OverflowError,
        lambda: nb.constant([[1, 2], [3, 2**33]]),
        ["constant", str(2**33), "int32", "int64"],
    ),
    (
        "constant_int_dtype_overflow",
        OverflowError,
        lambda: nb.constant(2**40, dtype=nb.int32),
        ["constant", str(2**40), "int32", "-2147483648 to 2147483647"],
    ),
    (
        "constant_uint8_negative",
        OverflowError,
        lambda: nb.constant(-1, dtype=nb.uint8),
        ["constant", "-1", "uint8", "0 to 255"],
    ),
    (
        "add_int_scalar_overflow",
        OverflowError,
        lambda: lazy(2, dtype=np.int32) + 2**40,
        ["add", str(2**40), "int32"],
    ),
    ("full_int_overflow", OverflowError, lambda: nb.full((2,), 2**40), ["full", str(2**40)]),
    (
        "full_dtype_overflow",
        OverflowError,
        lambda: nb.full((2,), 300, dtype=nb.uint8),
        ["full", "300", "uint8", "0 to 255"],
    ),
    # --- an explicit axis of a 0-d tensor (NumPy's AxisError)
    ("sum_0d_axis", IndexError, lambda: nb.sum(lazy(), axis=0), ["sum", "axis 0", "()"]),
    ("sum_0d_axis_neg", IndexError, lambda: lazy().sum(axis=-1), ["sum", "axis -1", "()"]),
    ("sum_0d_axis_tuple", IndexError, lambda: nb.sum(lazy(), axis=(0,)), ["sum", "()"]),
    ("mean_0d_axis", IndexError, lambda: nb.mean(lazy(), axis=0), ["mean", "()"]),
    ("max_0d_axis", IndexError, lambda: nb.max(lazy(), axis=0), ["max", "()"]),
    ("prod_0d_axis", IndexError, lambda: nb.prod(lazy(), axis=0), ["prod", "()"]),
    ("var_0d_axis", IndexError, lambda: nb.var(lazy(), axis=0), ["var", "()"]),
    ("logsumexp_0d_axis", IndexError, lambda: nb.logsumexp(lazy(), axis=0), ["logsumexp"]),
    ("any_0d_axis", IndexError, lambda: nb.any(lazy(), axis=0), ["any", "()"]),
    ("softmax_0d", IndexError, lambda: nb.softmax(lazy()), ["softmax", "()"]),
    ("argmax_0d_axis", ValueError, lambda: nb.argmax(lazy(), axis=0), ["argmax", "0-d"]),
    ("cumsum_0d", ValueError, lambda: nb.cumsum(lazy(), axis=0), ["cumsum", "()"]),
    ("flip_0d_axis", IndexError, lambda: nb.flip(lazy(), 0), ["flip", "rank 0"]),
    ("squeeze_0d_axis", IndexError, lambda: nb.squeeze(lazy(), 0), ["squeeze", "rank 0"]),
    # --- results larger than memory (the bound: physical RAM or NABLA_MAX_ALLOC_BYTES)
    (
        "zeros_too_big",
        ValueError,
        lambda: nb.zeros((1 << 20, 1 << 20)),
        ["full", "(1048576, 1048576)", "float32", "4.0 TiB", "NABLA_MAX_ALLOC_BYTES"],
    ),
    (
        "matmul_too_big",
        ValueError,
        lambda: nb.matmul(nb.ones((10**6, 1)), nb.ones((1, 10**6))),
        ["matmul", "(1000000, 1000000)", "float32"],
    ),
    (
        "broadcast_to_too_big",
        ValueError,
        lambda: nb.broadcast_to(lazy(1, 1), (10**7, 10**7)),
        ["broadcast_to", "(10000000, 10000000)"],
    ),
    (
        "add_broadcast_too_big",
        ValueError,
        lambda: nb.ones((10**6, 1), dtype=nb.float64) + nb.ones((10**6,), dtype=nb.float64),
        ["add", "(1000000, 1000000)", "float64"],
    ),
    ("arange_too_big", ValueError, lambda: nb.arange(10**13), ["arange", "(10000000000000,)"]),
    # --- jvp: tangents match their primals in dtype and shape, as in JAX
    (
        "jvp_tangent_dtype",
        TypeError,
        lambda: nb.jvp(nb.sin, (lazy(3),), (lazy(3, dtype=np.float64),)),
        ["jvp", "dtypes must be equal", "float32", "float64", "(3,)"],
    ),
    (
        "jvp_tangent_numpy_dtype",
        TypeError,
        lambda: nb.jvp(nb.sin, (lazy(3),), (np.ones(3),)),
        ["jvp", "float32", "float64"],
    ),
    (
        "jvp_tangent_int_primal",
        TypeError,
        lambda: nb.jvp(lambda a: a * 2, (lazy(2, dtype=np.int32),), (lazy(2),)),
        ["jvp", "int32", "float32"],
    ),
    (
        "jvp_tangent_shape",
        ValueError,
        lambda: nb.jvp(nb.sin, (lazy(3),), (lazy(2),)),
        ["jvp", "shapes must be equal", "(3,)", "(2,)"],
    ),
    (
        "jvp_tangent_scalar_shape",
        ValueError,
        lambda: nb.jvp(nb.sin, (lazy(3),), (1.0,)),
        ["jvp", "(3,)", "()"],
    ),
    ("jvp_tangent_string", TypeError, lambda: nb.jvp(nb.sin, (lazy(3),), ("a",)), ["jvp", "str"]),
    # --- each of these returned a wrong shape or value silently, where NumPy or JAX raise
    (
        "moveaxis_repeated_destination",
        ValueError,
        lambda: nb.moveaxis(lazy(2, 3, 4), (0, 1), (1, 1)),
        ["moveaxis", "repeated", "destination", "(2, 3, 4)"],
    ),
    (
        "unsqueeze_repeated_axis",
        ValueError,
        lambda: nb.unsqueeze(lazy(2, 3), (0, 0)),
        ["unsqueeze", "repeated", "(2, 3)"],
    ),
    (
        "pad_float_width",
        ValueError,
        lambda: nb.pad(lazy(2, 3), [(1.5, 1), (0, 0)]),
        ["pad", "(1.5, 1)", "(2, 3)"],
    ),
    (
        "slice_tensor_region_past_the_end",
        IndexError,
        lambda: nb.slice_tensor(lazy(2, 3), [0, 0], [3, 3]),
        ["slice_tensor", "size 3", "dim 0", "(2, 3)"],
    ),
    (
        "slice_tensor_negative_size",
        IndexError,
        lambda: nb.slice_tensor(lazy(2, 3), [0, 0], [-1, 3]),
        ["slice_tensor", "size -1", "(2, 3)"],
    ),
    (
        "slice_update_start_past_the_end",
        IndexError,
        lambda: nb.slice_update(lazy(2, 3), 1.0, [5, 5], [1, 1]),
        ["slice_update", "index 5", "(2, 3)"],
    ),
    (
        "uniform_low_above_high",
        ValueError,
        lambda: nb.uniform((4,), 2.0, 1.0),
        ["uniform", "low (2.0)", "high (1.0)"],
    ),
    (
        "while_loop_under_vmap_carry_shape",
        TypeError,
        lambda: nb.vmap(lambda a: nb.while_loop(lambda c: c.sum() < 10, lambda c: c.sum(), a))(
            lazy(2, 3)
        ),
        ["while_loop", "float32[3]", "float32[]"],
    ),
    (
        "creation_on_an_unknown_device",
        TypeError,
        lambda: nb.zeros((2,), device="tpu:7"),
        ["zeros", "device", "'tpu:7'"],
    ),
    ("arange_on_a_number_device", TypeError, lambda: nb.arange(3, device=3), ["arange", "int 3"]),
    (
        "compile_cache_of_no_entries",
        ValueError,
        lambda: nb.compile(lambda a: a, max_cache_size=0),
        ["compile", "max_cache_size", "0"],
    ),
    *[
        (f"{t}_of_a_non_function", TypeError, lambda t=t: getattr(nb, t)(3), [t, "int 3"])
        for t in ("grad", "value_and_grad", "jacrev", "jacfwd", "hessian", "vmap", "compile")
    ],
    (
        "custom_jvp_tangent_shape",
        TypeError,
        lambda: nb.jvp(_bad_jvp, (lazy(3),), (lazy(3),)),
        ["custom_jvp rule of _bad_jvp", "float32[5]", "float32[3]"],
    ),
    (
        "conv2d_transpose_padding_leaves_nothing",
        ValueError,
        lambda: nb.conv2d_transpose(lazy(1, 4, 4, 3), lazy(3, 3, 3, 2), padding=((0, 0), (7, 0))),
        ["conv2d_transpose", "((0, 0), (7, 0))", "(1, 4, 4, 3)", "(3, 3, 3, 2)", "(6, -1)"],
    ),
    (
        "conv2d_transpose_output_padding_too_big",
        ValueError,
        lambda: nb.conv2d_transpose(lazy(1, 4, 4, 3), lazy(3, 3, 3, 2), stride=2, output_padding=2),
        ["conv2d_transpose", "output_padding 2", "stride (2, 2)", "dilation (1, 1)"],
    ),
    (
        "conv2d_groups_zero",
        ValueError,
        lambda: nb.conv2d(lazy(1, 5, 5, 3), lazy(3, 3, 3, 8), groups=0),
        ["conv2d", "groups must be a positive int", "0"],
    ),
    (
        "conv2d_bias_rank",
        ValueError,
        lambda: nb.conv2d(lazy(1, 5, 5, 3), lazy(3, 3, 3, 8), bias=lazy(8, 1)),
        ["conv2d", "bias must be 1-D (8,)", "(8, 1)"],
    ),
    ("arange_nan", ValueError, lambda: nb.arange(float("nan")), ["arange", "finite", "nan"]),
    ("arange_inf", ValueError, lambda: nb.arange(0, 1, float("inf")), ["arange", "step=inf"]),
    ("triu_float_k", TypeError, lambda: nb.triu(lazy(3, 3), k=0.5), ["triu", "k", "0.5"]),
    ("diag_float_k", TypeError, lambda: nb.diag(lazy(3), 0.5), ["diag", "k", "0.5"]),
    ("eye_float_k", TypeError, lambda: nb.eye(3, k=1.5), ["eye", "k", "1.5"]),
    ("manual_seed_str", TypeError, lambda: nb.manual_seed("a"), ["manual_seed", "'a'"]),
    ("sort_axis", IndexError, lambda: nb.sort(lazy(2, 3), axis=2), ["sort:", "(2, 3)"]),
    ("std_axis", IndexError, lambda: nb.std(lazy(2, 3), axis=2), ["std:", "(2, 3)"]),
    (
        "split_negative_size",
        ValueError,
        lambda: nb.split(lazy(4), [5, -1]),
        ["split", "(5, -1)", "must not be negative"],
    ),
    (
        "cross_entropy_bool_target",
        TypeError,
        lambda: nb.nn.functional.cross_entropy_loss(lazy(4, 3), lazy(4, dtype=np.bool_)),
        ["cross_entropy_loss", "bool", "(4,)", "(4, 3)"],
    ),
    (
        "random_normal_bad_key",
        ValueError,
        lambda: nb.random.normal(lazy(2), (3,)),
        ["normal:", "float32 of shape (2,)"],
    ),
]


@nb.custom_jvp
def _bad_jvp(x):
    return x * 2.0


@_bad_jvp.defjvp
def _bad_jvp_rule(primals, tangents):
    return _bad_jvp(primals[0]), nb.ones((5,))


@pytest.mark.parametrize("exc, thunk, fragments", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_error_at_call(exc, thunk, fragments):
    check(exc, thunk, *fragments)


def test_requires_grad_on_int_tensor():
    t = nb.constant([1, 2, 3])

    def set_it():
        t.requires_grad = True

    check(TypeError, set_it, "requires_grad", "int32")
    assert t.requires_grad is False
    check(TypeError, lambda: nb.constant([True]).requires_grad_(), "requires_grad", "bool")


def test_inputs_stay_promises_after_an_error():
    x = lazy(2, 3)
    y = lazy(4)
    with pytest.raises(ValueError):
        nb.add(x, y)
    with pytest.raises(IndexError):
        nb.sum(x, axis=3)
    assert not x.is_realized and not y.is_realized
    # ... and a correct call on the same inputs still works afterwards.
    np.testing.assert_allclose((x + y[:3]).numpy(), np.full((2, 3), 2.0))


def test_errors_are_plain_python_exceptions():
    # OpError is the ValueError nabla raises for shape mistakes; users catch ValueError.
    assert issubclass(nb.OpError, ValueError)
    with pytest.raises(nb.OpError):
        nb.add(lazy(2, 3), lazy(4))


def test_errors_under_vmap_name_logical_shapes():
    # Inside vmap the user sees logical shapes; the batch dim is never mentioned.
    def f(a):
        return nb.add(a, nb.ones((4,)))

    with pytest.raises(ValueError) as info:
        nb.vmap(f)(nb.ones((5, 3)))
    msg = str(info.value)
    assert "add" in msg and "(3,)" in msg and "(4,)" in msg
    assert "(5, 3)" not in msg


def test_mixed_dtype_ops_do_not_broadcast_shape_operands():
    # Regression: matmul/concatenate/einsum with operands of different dtypes (or a NumPy
    # operand) went through elementwise broadcasting before their own shape rule, so
    # ``ndarray @ Tensor`` failed and concatenate silently broadcast (2,3)+(1,3) to (4,3).
    x = nb.constant(np.arange(6, dtype=np.float32).reshape(2, 3))
    a = np.ones((3, 2), np.float32)
    np.testing.assert_allclose((a @ x).numpy(), a @ x.numpy())
    np.testing.assert_allclose((x @ np.ones((3, 1))).numpy(), x.numpy() @ np.ones((3, 1)))
    c = nb.concatenate([x, nb.constant(np.ones((1, 3)))])
    assert c.shape == (3, 3) and c.dtype is nb.float64
    e = nb.einsum("ij,jk->ik", x, nb.constant(np.ones((3, 4))))
    np.testing.assert_allclose(e.numpy(), x.numpy() @ np.ones((3, 4)))


# Conversion errors name the op the user called, not the ``constant`` that converts.
CONVERSIONS = [
    ("exp", lambda: nb.exp("abc")),
    ("sigmoid", lambda: nb.sigmoid(object())),
    ("add", lambda: nb.add(lazy(2), "abc")),
    ("mul", lambda: nb.mul("abc", lazy(2))),
    ("maximum", lambda: nb.maximum(lazy(2), None)),
    ("where", lambda: nb.where("abc", lazy(2), lazy(2))),
    ("sum", lambda: nb.sum("abc")),
    ("reduce_max", lambda: nb.reduce_max("abc", axis=0)),
    ("mean", lambda: nb.mean("abc")),
    ("argmax", lambda: nb.argmax("abc")),
    ("cumsum", lambda: nb.cumsum("abc")),
    ("reshape", lambda: nb.reshape("abc", (1,))),
    ("broadcast_to", lambda: nb.broadcast_to("abc", (2,))),
    ("squeeze", lambda: nb.squeeze({"a": 1})),
    ("concatenate", lambda: nb.concatenate([lazy(2), "abc"])),
    ("matmul", lambda: nb.matmul("abc", "abc")),
    ("cast", lambda: nb.cast("abc", nb.float32)),
    ("gather", lambda: nb.gather(lazy(3), "abc")),
]


@pytest.mark.parametrize("op, thunk", CONVERSIONS, ids=[c[0] for c in CONVERSIONS])
def test_conversion_errors_name_the_op(op, thunk):
    msg = check(TypeError, thunk)
    assert msg.startswith(f"{op}: "), msg
    assert "constant" not in msg, msg


def test_python_ints_in_range_still_convert():
    assert nb.constant(2**31 - 1).dtype is nb.int32
    assert nb.constant(-(2**31)).item() == -(2**31)
    assert nb.constant(2**40, dtype=nb.int64).item() == 2**40
    assert nb.constant([1, 2**40], dtype=nb.int64).tolist() == [1, 2**40]
    assert nb.constant(2**70, dtype=nb.float32).dtype is nb.float32
    big = nb.constant([1.5, 2**70])  # NumPy makes objects of this list; it is a float list
    assert big.dtype is nb.float32 and big.shape == (2,)
    assert (nb.constant([1, 2], dtype=nb.int64) + 2**40).tolist() == [2**40 + 1, 2**40 + 2]
    assert nb.full((2,), 255, dtype=nb.uint8).tolist() == [255, 255]


def test_0d_reductions_without_an_axis_still_work():
    x = nb.constant(3.0)
    assert nb.sum(x).item() == 3.0
    assert nb.sum(x, axis=()).item() == 3.0
    assert nb.max(x, axis=None, keepdims=True).shape == ()
    assert nb.flatten(x).shape == (1,)
    assert nb.unsqueeze(x, 0).shape == (1,)
    assert nb.stack([x, x]).shape == (2,)


def test_jvp_scalar_tangent_takes_the_primal_dtype():
    x = nb.constant(np.float64(0.0))
    out, t = nb.jvp(nb.sin, (x,), (1.0,))
    assert t.dtype is nb.float64 and t.item() == 1.0
    _, t = nb.jvp(nb.sin, (nb.zeros((2,), dtype=nb.float64),), (np.ones(2),))
    assert t.dtype is nb.float64


# --- the allocation bound


def test_too_big_under_vmap_names_the_logical_shape_and_batch_size():
    def f(r):
        return nb.broadcast_to(r, (10**5, 10**5, 3))

    msg = check(ValueError, lambda: nb.vmap(f)(lazy(7, 3)), "broadcast_to", "(100000, 100000, 3)")
    assert "batch size 7" in msg


def test_alloc_bound_is_configurable(monkeypatch):
    monkeypatch.setattr(CONFIG, "max_alloc_bytes", 1000)
    monkeypatch.setattr(CONFIG, "max_alloc_source", "NABLA_MAX_ALLOC_BYTES")
    assert nb.zeros((250,)).shape == (250,)  # 1000 bytes: allowed
    check(ValueError, lambda: nb.zeros((251,)), "full", "(251,)", "NABLA_MAX_ALLOC_BYTES")
    x = lazy(500, dtype=np.int8)  # 500 bytes; the same shape cast to float64 takes 4000
    check(ValueError, lambda: x.cast(nb.float64), "cast", "(500,)", "float64")
    check(ValueError, lambda: nb.exp(x), "cast", "(500,)", "float32")
    assert (x + x).shape == (500,)


def test_max_alloc_bytes_env(monkeypatch):
    monkeypatch.setenv("NABLA_MAX_ALLOC_BYTES", "12345")
    cfg = config._Config()
    assert cfg.max_alloc_bytes == 12345 and cfg.max_alloc_source == "NABLA_MAX_ALLOC_BYTES"
    monkeypatch.delenv("NABLA_MAX_ALLOC_BYTES")
    cfg = config._Config()
    assert (cfg.max_alloc_bytes, cfg.max_alloc_source) == config.memory_bound()
    assert cfg.max_alloc_bytes <= (config.physical_memory_bytes() or 1 << 62)
    for bad in ("lots", "0", "-5", "1.5e9"):
        monkeypatch.setenv("NABLA_MAX_ALLOC_BYTES", bad)
        with pytest.raises(ValueError, match="NABLA_MAX_ALLOC_BYTES"):
            config._Config()


_LIMITED = """
import os
import resource
limit = int(os.environ["LIMIT"])
resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
import nabla as nb
from nabla.core.config import CONFIG
print(CONFIG.max_alloc_bytes, CONFIG.max_alloc_source)
try:
    nb.ones((60000, 60000)).sum()
except ValueError as e:
    print(type(e).__name__, e)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX resource limits")
def test_alloc_bound_follows_the_process_s_address_space_limit():
    """Under ``ulimit -v`` (``RLIMIT_AS``) smaller than physical memory, a too-big result is
    refused at the call (an ``OpError`` naming the op and the shape), not NumPy's raw
    ``MemoryError``."""
    limit = min(4 << 30, (config.physical_memory_bytes() or 1 << 40) // 2)  # below physical
    env = {**os.environ, "NABLA_BACKEND": "numpy", "OPENBLAS_NUM_THREADS": "1"}
    env.update(LIMIT=str(limit))
    env.pop("NABLA_MAX_ALLOC_BYTES", None)
    r = subprocess.run(
        [sys.executable, "-c", _LIMITED], env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    bound, _, error = r.stdout.partition("\n")
    assert bound == f"{limit} the process's RLIMIT_AS limit (ulimit -v)", r.stdout
    assert error.startswith("OpError full: the result of shape (60000, 60000)"), r.stdout
    assert "would take 13.4 GiB, more than the" in error, r.stdout
    assert "(the process's RLIMIT_AS limit (ulimit -v); NABLA_MAX_ALLOC_BYTES" in error, r.stdout


def test_cgroup_memory_limit_bounds_allocations(monkeypatch):
    monkeypatch.setattr(config, "_cgroup_memory_limits", lambda: [3 << 20])
    assert config.memory_bound() == (3 << 20, "the process's cgroup memory limit (memory.max)")
    monkeypatch.delenv("NABLA_MAX_ALLOC_BYTES", raising=False)
    assert config._Config().max_alloc_bytes == 3 << 20


# --- environment variables


@pytest.mark.parametrize("value", ["abc", "1.5", "-1", "two"])
def test_auto_threshold_env_is_validated(monkeypatch, value):
    monkeypatch.setenv("NABLA_AUTO_THRESHOLD", value)
    with pytest.raises(ValueError, match="NABLA_AUTO_THRESHOLD") as info:
        config._Config()
    assert repr(value) in str(info.value)


def test_auto_threshold_env(monkeypatch):
    monkeypatch.setenv("NABLA_AUTO_THRESHOLD", " 5 ")
    assert config._Config().auto_threshold == 5
    monkeypatch.delenv("NABLA_AUTO_THRESHOLD")
    assert config._Config().auto_threshold == 2


SWITCHES = [
    ("NABLA_BACKGROUND_COMPILE", "background_compile", True),
    ("NABLA_EAGER_MAX_GRAPH", "eager_graph", False),
    ("NABLA_DEBUG_COMPILE", "debug_compile", False),
    ("NABLA_MPI_SHARED", "mpi_shared", True),
    ("NABLA_MPI_SINGLE_COPY", "mpi_single_copy", True),
    ("NABLA_NUMPY_FUSION", "numpy_fusion", True),
]


@pytest.mark.parametrize("var, attr, default", SWITCHES, ids=[s[0] for s in SWITCHES])
def test_switch_envs(monkeypatch, var, attr, default):
    for value, want in [
        ("1", True),
        ("TRUE", True),
        ("yes", True),
        ("On", True),
        ("0", False),
        ("false", False),
        ("NO", False),
        ("off", False),
        ("", default),
    ]:
        monkeypatch.setenv(var, value)
        assert getattr(config._Config(), attr) is want, (var, value)
    monkeypatch.delenv(var)
    assert getattr(config._Config(), attr) is default
    for bad in ("2", "enable", "tru"):
        monkeypatch.setenv(var, bad)
        with pytest.raises(ValueError, match=var) as info:
            config._Config()
        assert repr(bad) in str(info.value)


def test_bad_env_fails_the_import_with_the_variable_named():
    env = {**os.environ, "NABLA_AUTO_THRESHOLD": "abc"}
    r = subprocess.run(
        [sys.executable, "-c", "import nabla"], env=env, capture_output=True, text=True
    )
    assert r.returncode != 0
    assert "ValueError: NABLA_AUTO_THRESHOLD must be an integer, got 'abc'" in r.stderr


@pytest.mark.parametrize("value", ["abc", "0", "-5", "nan"])
def test_bad_mpi_timeout_fails_the_import_with_the_variable_and_value_named(value):
    env = {**os.environ, "NABLA_MPI_TIMEOUT": value}
    r = subprocess.run(
        [sys.executable, "-c", "import nabla"], env=env, capture_output=True, text=True
    )
    assert r.returncode != 0
    want = (
        f"ValueError: NABLA_MPI_TIMEOUT must be a number of seconds > 0 (e.g. 300), got {value!r}"
    )
    assert want in r.stderr, r.stderr


def test_logsoftmax_of_large_logits_keeps_its_digits():
    """``(x - max) - log(sum(exp(x - max)))``: the large ``logsumexp`` of large logits is
    never formed (``x - logsumexp(x)`` lost two digits at 1e5)."""
    x = np.array([[1000.0, 1000.0], [1e5, 1e5], [3e5, 3e5 - 1]], np.float32)
    got = nb.logsoftmax(nb.constant(x), axis=1).numpy()
    d = x.astype(np.float64) - x.max(1, keepdims=True)
    want = d - np.log(np.exp(d).sum(1, keepdims=True))
    np.testing.assert_allclose(got, want, rtol=1e-6)
    loss = nb.nn.functional.cross_entropy_loss(nb.constant([[1e5, 1e5, 0.0]]), nb.constant([0]))
    assert loss.item() == pytest.approx(np.log(2.0), rel=1e-6)


def test_bool_matmul_is_jax_s_logical_product():
    a = np.array([[True, False], [True, True]])
    b = np.array([[False, True], [False, False]])
    got = nb.constant(a) @ nb.constant(b)
    assert got.dtype == nb.bool
    np.testing.assert_array_equal(got.numpy(), a @ b)
    np.testing.assert_array_equal(nb.matmul(nb.constant(a), nb.constant(a[0])).numpy(), a @ a[0])


def test_max_pool_sends_a_tied_window_s_gradient_to_its_first_maximum():
    """As JAX's reduce_window max (select-and-scatter) and PyTorch's max_pool2d; nb.max
    keeps JAX's even split."""
    x = np.zeros((1, 4, 4, 1), np.float32)
    x[0, 2:, 3, 0] = 1.0  # the last window: two tied maxima in its right column
    g = nb.grad(lambda v: nb.max_pool2d(v, 2).sum())(nb.constant(x)).numpy()[0, ..., 0]
    want = np.zeros((4, 4), np.float32)
    want[0, 0] = want[0, 2] = want[2, 0] = want[2, 3] = 1.0
    np.testing.assert_array_equal(g, want)
    _, tangent = nb.jvp(lambda v: nb.max_pool2d(v, 2), (nb.constant(x),), (nb.constant(x + 1),))
    np.testing.assert_array_equal(tangent.numpy()[0, ..., 0], [[1.0, 1.0], [1.0, 2.0]])
    even = nb.grad(lambda v: nb.max(v))(nb.zeros((4,))).numpy()
    np.testing.assert_array_equal(even, np.full(4, 0.25, np.float32))


def test_numpy_scalars_are_weak_as_python_ones_and_must_fit():
    """A NumPy scalar takes the tensor's dtype as a Python scalar does (as PyTorch), and
    one that does not fit is the same clear error, never a silent wrap."""
    i8 = nb.constant(np.array([1, 100], np.int8))
    u8 = nb.constant(np.array([0, 1], np.uint8))
    assert (i8 + np.int64(2)).dtype == nb.int8
    np.testing.assert_array_equal((i8 + np.int64(2)).numpy(), [3, 102])
    for thunk, words in (
        (lambda: i8 + np.int64(200), ["add", "200", "int8"]),
        (lambda: u8 < np.int64(-1), ["less", "-1", "uint8"]),
        (lambda: nb.maximum(u8, np.int32(-5)), ["maximum", "-5", "uint8"]),
        (lambda: i8 + np.uint64(2**63), ["add", "9223372036854775808", "int8"]),
    ):
        with pytest.raises(OverflowError) as err:
            thunk()
        assert all(w in str(err.value) for w in words), err.value


def test_dtype_edges_a_probe_found():
    with pytest.raises(TypeError, match=r"pow: integers cannot be raised .* bool \(2,\) \*\* -1"):
        nb.constant(np.array([True, False])) ** -1
    big = nb.constant(np.array([1.0], np.float32)).cast(nb.bfloat16) + 2**63  # via float
    assert big.dtype == nb.bfloat16 and big.item() == pytest.approx(2.0**63, rel=1e-2)
    with pytest.raises(ValueError, match="full: cannot fill int32 with nan"):
        nb.full((2,), float("nan"), dtype=nb.int32)
    with pytest.raises(OverflowError, match=r"arange: the value 2147483648 .* pass dtype=nb.int64"):
        nb.arange(2**31, 2**31 + 3)
    wide = nb.arange(2**31, 2**31 + 3, dtype=nb.int64).numpy().tolist()
    assert wide == [2**31 + i for i in range(3)]
    assert nb.promote_types("int8", np.uint8) == nb.int16
    with pytest.raises(OverflowError, match=r"clip: the bound -200 is out of range for int8"):
        nb.clip(nb.constant(np.array([1, 100], np.int8)), -200, 200)


def test_einsum_layernorm_and_arange_refuse_what_numpy_and_pytorch_refuse():
    """A malformed einsum equation or a label that is not a letter (NumPy's error; '1' had
    been summed over as an index), a LayerNorm of a negative size (the error had named an
    internal op) and a bool arange of more than two values (NumPy's rule) name the call."""
    with pytest.raises(ValueError, match="einsum: equation 'ij->->i' has more than one '->'"):
        nb.einsum("ij->->i", nb.ones((2, 3)))
    with pytest.raises(ValueError, match="einsum: invalid index '1' in 'i1->i'"):
        nb.einsum("i1->i", nb.ones((2, 3)))
    with pytest.raises(ValueError, match=r"LayerNorm: normalized_shape must be positive ints"):
        nb.nn.LayerNorm(-3)
    with pytest.raises(TypeError, match="arange: dtype bool holds a range of at most 2"):
        nb.arange(5, dtype=nb.bool)
    assert nb.arange(2, dtype=nb.bool).tolist() == [False, True]


def test_einsum_letters_the_user_writes_never_meet_the_ellipsis_dims():
    """The dims of '...' were spelled with A, B, ... whatever the equation used: '...A'
    became 'AA', a diagonal (silently wrong where the sizes agreed, an error elsewhere).
    A repeated index in one operand needs equal sizes (NumPy's); tensordot refuses
    out-of-range and repeated dims (it had wrapped axis 2 of a matrix round to 0); roll
    takes a concrete tensor shift and several shifts along one axis, as NumPy and JAX."""
    rng = np.random.default_rng(0)
    for eq, shapes in [
        ("...A,A->...", [(4, 4), (4,)]),
        ("A...,...->A...", [(2, 3), (3,)]),
        ("...a,aA->...A", [(2, 3), (3, 4)]),
        ("A...B,B->A...", [(2, 3, 4), (4,)]),
        ("A...->A...", [(2, 2, 2)]),
        ("...AB,...BC", [(2, 3, 4), (4, 5)]),
    ]:
        ops = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        got = nb.einsum(eq, *[nb.constant(o) for o in ops]).numpy()
        np.testing.assert_allclose(got, np.einsum(eq, *ops), rtol=1e-5, err_msg=eq)
    with pytest.raises(ValueError, match=r"einsum: index 'i' has inconsistent sizes in 'ii->i'"):
        nb.einsum("ii->i", nb.ones((1, 3)))
    with pytest.raises(ValueError, match=r"einsum: the dims of '...' have inconsistent sizes"):
        nb.einsum("...i,...i->...", nb.ones((2, 3)), nb.ones((3, 3)))
    x, y = nb.ones((3, 3)), nb.ones((3, 4))
    with pytest.raises(IndexError, match=r"tensordot: axis 2 is out of range .* \(3, 3\)"):
        nb.tensordot(x, y, axes=([2], [0]))
    with pytest.raises(ValueError, match=r"tensordot: axes=3 needs that many dims"):
        nb.tensordot(x, y, axes=3)
    with pytest.raises(ValueError, match=r"tensordot: repeated dim in \[0, 0\] of x"):
        nb.tensordot(x, x, axes=([0, 0], [0, 1]))
    a = np.arange(12).reshape(3, 4)
    assert nb.roll(a, nb.constant(np.int32(1)), axis=0).tolist() == np.roll(a, 1, 0).tolist()
    assert nb.roll(a, (1, 2), axis=1).tolist() == np.roll(a, (1, 2), 1).tolist()


def test_an_index_out_of_range_under_vmap_names_one_example_s_shapes():
    """An index known only when the program runs (here a batched one) is checked there; the
    error gives the shapes of one example, as the user wrote the call, not the batch's."""
    idx = nb.constant(np.array([[0], [3]], np.int32))
    got = nb.vmap(lambda a, i: nb.gather(a, i, 0))(nb.ones((2, 3, 4)), idx)
    with pytest.raises(IndexError) as info:
        got.numpy()
    msg = str(info.value)
    assert "input of shape (3, 4), indices of shape (1,)" in msg and "per example" in msg, msg
    below = nb.constant(np.array([[0], [-4]], np.int32))
    with pytest.raises(IndexError, match=r"index -4 is out of bounds for axis 0 with size 3"):
        nb.vmap(lambda a, i: nb.gather(a, i, 0))(nb.ones((2, 3, 4)), below).numpy()
    with pytest.raises(IndexError, match=r"setitem on a tensor of shape \(3, 4\).*per example"):
        nb.vmap(lambda a, i: a.at[i].set(1.0))(nb.ones((2, 3, 4)), idx).numpy()


def test_misuses_a_probe_found_raise_at_the_call_naming_the_function():
    """Each was accepted (a wrong or confusing result later) or failed inside NumPy with a
    message that named nothing of the user's."""
    x = nb.ones((3,))
    for transform in (
        lambda: nb.vjp(lambda v: v, "abc"),
        lambda: nb.jvp(lambda v: v, ("a",), ("a",)),
    ):
        with pytest.raises(TypeError, match=r"(vjp|jvp): primal leaf 0 is a str"):
            transform()
    with pytest.raises(TypeError, match="checkpoint: expected a function, got int 5"):
        nb.checkpoint(5)
    with pytest.raises(TypeError, match="from_dlpack: expects an object exporting DLPack"):
        nb.from_dlpack("abc")
    with pytest.raises(TypeError, match="pad: the fill value must be a number or a tensor"):
        nb.pad(x, [(1, 1)], value="x")
    with pytest.raises(TypeError, match="to: 'tpu:7' is neither a device"):
        x.to("tpu:7")
    with pytest.raises(ValueError, match=r"clip: a bound of shape \(4,\) does not broadcast"):
        nb.clip(x, nb.ones((4,)), 5.0)
    with pytest.raises(TypeError, match="value_and_grad requires a scalar"):
        nb.value_and_grad(lambda v: v)(x)
    with pytest.raises(TypeError, match="argument 0 of hessian must have a float dtype"):
        nb.hessian(lambda v: v)(x.cast(nb.int32))
    with pytest.raises(TypeError, match="vmap: the function returned a str"):
        nb.vmap(lambda v: "s")(x)
    t = nb.ones((2,))
    with pytest.raises(TypeError, match="requires_grad must be a bool, got 'yes'"):
        t.requires_grad = "yes"
    t.requires_grad = np.True_
    assert t.requires_grad is True
    opt = nb.nn.optim.Adam({"w": nb.ones((2,))}, lr=0.1)
    with pytest.raises(TypeError, match=r"LambdaLR: lr_lambda\(0\) returned 'x'"):
        nb.nn.optim.lr_scheduler.LambdaLR(opt, lambda e: "x")
    data = nb.nn.data.TensorDataset(nb.ones((4, 2)))
    with pytest.raises(TypeError, match="DataLoader: collate_fn must be callable"):
        nb.nn.DataLoader(data, batch_size=2, collate_fn=5)


def test_bad_inputs_a_second_probe_found_raise_clearly():
    x = nb.ones((2, 3, 4))
    # one axis is NumPy's whole order (fine for a vector), never a silent swap with the last
    with pytest.raises(ValueError, match=r"axes \(0,\) do not match a tensor of shape"):
        x.transpose(0)
    assert nb.ones((4,)).transpose(0).shape == (4,)
    with pytest.raises(IndexError, match=r"split: axis 5 is out of range for a tensor of shape"):
        nb.ones((2, 3)).split(1, 5)
    with pytest.raises(TypeError, match=r"reshape: shape entries must be ints, got \(\(2, 3\)"):
        nb.ones((2, 3)).reshape((2, 3), 4)
    assert nb.ones((2, 3)).reshape(np.int64(3), 2).shape == (3, 2)
    with pytest.raises(ValueError, match="output channels 3 are not divisible by groups=2"):
        nb.conv2d(nb.ones((1, 8, 8, 4)), nb.ones((3, 3, 2, 3)), groups=2)
    with pytest.raises(ValueError, match="input channels 3 are not divisible by groups=2"):
        nb.conv2d(nb.ones((1, 8, 8, 3)), nb.ones((3, 3, 1, 4)), groups=2)
    with pytest.raises(ValueError, match=r"masked_fill: shapes \(2,\), \(2, 3\) cannot"):
        nb.ones((2, 3)).masked_fill(nb.constant([True, False]), 0.0)
    with pytest.raises(TypeError, match="cond: pred must be a bool or integer scalar, got float32"):
        nb.cond(nb.constant(1.0), lambda v: v, lambda v: -v, x)
    assert nb.cond(nb.constant(2), lambda v: v, lambda v: -v, x).numpy()[0, 0, 0] == 1.0

    @nb.custom_jvp
    def f(v):
        return v * 2

    f.defjvp(lambda p, t: (p[0] * 3 + nb.ones((1, 1, 1, 1)), t[0]))
    with pytest.raises(TypeError, match=r"primal output 0 is float32\[1, 2, 3, 4\] for the"):
        nb.jvp(f, (x,), (x,))
    with pytest.raises(ValueError, match=r"zeros: negative dimension in shape \(-1,\)"):
        nb.zeros((-1,))
    with pytest.raises(ValueError, match=r"ones: negative dimension in shape \(2, -3\)"):
        nb.ones(2, -3)
    bag = nb.constant(np.array([1, 2, 3], np.int32))
    with pytest.raises(ValueError, match=r"offsets \[0, 5\] must start at 0"):
        nb.nn.functional.embedding_bag(bag, nb.ones((10, 4)), nb.constant([0, 5]))


def test_an_unsupported_dtype_names_the_function_called():
    key = nb.random.PRNGKey(0)
    calls = {
        "zeros": lambda: nb.zeros((2,), dtype="foo"),
        "ones": lambda: nb.ones(2, dtype="foo"),
        "empty": lambda: nb.empty((2,), dtype="foo"),
        "empty_like": lambda: nb.empty_like(nb.ones(2), dtype="foo", shape=(3,)),
        "zeros_like": lambda: nb.zeros_like(nb.ones(2), dtype="foo"),
        "full": lambda: nb.full((2,), 1.0, dtype="foo"),
        "full_like": lambda: nb.full_like(nb.ones(2), 1, dtype="foo"),
        "arange": lambda: nb.arange(3, dtype="foo"),
        "linspace": lambda: nb.linspace(0, 1, 3, dtype="foo"),
        "eye": lambda: nb.eye(2, dtype="foo"),
        "constant": lambda: nb.constant([1], dtype="foo"),
        "tensor": lambda: nb.tensor([1.0], dtype="foo"),
        "asarray": lambda: nb.asarray([1], dtype="foo"),
        "randperm": lambda: nb.randperm(3, dtype="foo"),
        "randint": lambda: nb.random.randint(key, (2,), 0, 3, dtype="foo"),
        "normal": lambda: nb.random.normal(key, (2,), dtype="foo"),
        "random.bits": lambda: nb.random.bits(key, (2,), dtype="foo"),
        "einsum": lambda: nb.einsum("i,i", nb.ones(2), nb.ones(2), preferred_element_type="foo"),
        "fromiter": lambda: nb.fromiter([1], "foo"),
        "sum": lambda: nb.sum(nb.ones(2), dtype="foo"),
        "cumsum": lambda: nb.cumsum(nb.ones(2), 0, dtype="foo"),
        "init.normal": lambda: nb.nn.init.normal((2,), dtype="foo"),
        "initializers.zeros": lambda: nb.nn.initializers.zeros(key, (2,), dtype="foo"),
    }
    for name, call in calls.items():
        with pytest.raises(TypeError, match=rf"^{re.escape(name)}: unsupported dtype 'foo'"):
            call()
    with pytest.raises(ValueError, match=r"^full_like: negative dimension in shape \(-1,\)"):
        nb.full_like(nb.ones(2), 1, shape=(-1,))
    # the functions that call others still work as before
    assert nb.empty(2, 3).shape == (2, 3)
    assert nb.empty_like(nb.ones(2, dtype="int32"), shape=(3,)).dtype == nb.int32
    assert nb.tensor([1.0], requires_grad=True).requires_grad

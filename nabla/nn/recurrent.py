"""Recurrent layers: ``LSTM``, ``GRU`` and ``RNN`` (Elman), and their one-step cells
(``LSTMCell``, ``GRUCell``, ``RNNCell``), with PyTorch's signatures, call convention, parameter
names, layouts and gate order, so a PyTorch state_dict loads as it is.

Each layer and direction is one ``nb.scan``: the step is traced once whatever the sequence
length, the input projection of every time step is one matmul before the loop, and the loop
carries only the hidden (and cell) state. Reverse mode recomputes the steps' gates from the
saved states (all steps at once, before the backward loop, which carries only the states'
cotangents; the weights' come after it as one matmul each); ``vmap`` batches the loop;
``compile`` traces it once. A :class:`PackedSequence` input runs padded, with a mask that
freezes each sequence's state past its last step (``nn/packed.py``).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from ..core.pytree import tree_map
from ..ops import binary, unary, view
from ..ops._util import as_tensor
from ..ops.creation import zeros
from ..runtime.tensor import Tensor
from ..transforms.control_flow import scan
from . import functional as F
from . import init
from .layers import _check_sizes, _keys
from .module import Module
from .packed import PackedSequence, permuted, repacked, unpacked_for_rnn

__all__ = ["GRU", "GRUCell", "LSTM", "LSTMCell", "RNN", "RNNCell"]


class _Weights(NamedTuple):
    """One layer-direction's parameters (PyTorch's ``weight_ih``, ``weight_hh``,
    ``bias_ih``, ``bias_hh``; the biases None when the network has none)."""

    w_ih: Tensor
    w_hh: Tensor
    b_ih: Tensor | None
    b_hh: Tensor | None


def _hidden_product(h, w_hh):
    """``h @ w_hh^T``, the step's product with the weight in PyTorch's ``(rows, hidden)``
    layout, computed as ``(w_hh @ h^T)^T``: the weight enters the GEMM as it is stored and
    only the step's small operand and result are transposed (views on NumPy; on MAX,
    copies of those instead of the weight's). BLAS reading the weight transposed was
    1.5-1.8x as slow here at a batch of 32 (``benchmarks/README.md``)."""
    return view.swap_axes(w_hh @ view.swap_axes(h, -1, -2), -1, -2)


def _lstm_step(w_hh):
    """The LSTM step for one direction: gates ``i, f, g, o`` (PyTorch's order)."""

    def step(carry, gx):
        h, c = carry
        # one split, not four slices: its cotangent is one concatenation, where four
        # slices' would be four zero-filled updates added together
        i, f, g, o = view.split(gx + _hidden_product(h, w_hh), 4, axis=-1)
        i, f, g, o = unary.sigmoid(i), unary.sigmoid(f), unary.tanh(g), unary.sigmoid(o)
        c = f * c + i * g
        h = o * unary.tanh(c)
        return (h, c), h

    return step


def _gru_step(w_hh_t, b_hh):
    """The GRU step for one direction: gates ``r, z, n`` (PyTorch's order); the reset gate
    scales the hidden projection *with* its bias, as PyTorch's."""

    def step(h, gx):
        gh = h @ w_hh_t
        if b_hh is not None:
            gh = gh + b_hh
        x_r, x_z, x_n = view.split(gx, 3, axis=-1)  # splits, not slices: as in the LSTM
        h_r, h_z, h_n = view.split(gh, 3, axis=-1)
        r = unary.sigmoid(x_r + h_r)
        z = unary.sigmoid(x_z + h_z)
        n = unary.tanh(x_n + r * h_n)
        h = (1.0 - z) * n + z * h
        return h, h

    return step


class _RNNBase(Module):
    """The shared parts of ``LSTM`` and ``GRU``: parameters, argument checks, the layer and
    direction loop (each direction one scan) and dropout between layers."""

    def _in_pytorch_layout(self, name: str) -> bool:
        return name.startswith(("weight_ih", "weight_hh"))  # (PyTorch's (rows, in) layout)

    gates = 0  # gate blocks per weight: 4 for LSTM, 3 for GRU
    # whether b_hh joins b_ih in the input projection (LSTM); GRU's reset gate scales the
    # hidden projection with its bias, so there b_hh stays in the step
    fold_hidden_bias = False

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        *,
        key=None,
        dtype=None,
    ):
        super().__init__()
        name = type(self).__name__
        _check_sizes(name, input_size=input_size, hidden_size=hidden_size, num_layers=num_layers)
        if isinstance(dropout, bool) or not isinstance(dropout, int | float):
            raise ValueError(f"{name}: dropout must be a number in [0, 1], got {dropout!r}")
        if not 0.0 <= dropout <= 1.0:
            raise ValueError(f"{name}: dropout must be in [0, 1], got {dropout}")
        self.input_size, self.hidden_size = int(input_size), int(hidden_size)
        self.num_layers, self.bias = int(num_layers), bool(bias)
        self.batch_first, self.dropout = bool(batch_first), float(dropout)
        self.bidirectional = bool(bidirectional)
        directions = 2 if bidirectional else 1
        h, rows = self.hidden_size, self.gates * self.hidden_size
        bound = 1.0 / math.sqrt(h)
        keys = iter(_keys(key, 4 * self.num_layers * directions))
        # assignment order is PyTorch's parameter order: per layer, per direction, w_ih,
        # w_hh, b_ih, b_hh (so parameters() and state_dict() list them as it does)
        for layer in range(self.num_layers):
            cols = self.input_size if layer == 0 else h * directions
            for suffix in ("", "_reverse")[:directions]:
                tag = f"l{layer}{suffix}"
                draw = [next(keys) for _ in range(4)]
                setattr(
                    self,
                    f"weight_ih_{tag}",
                    init.uniform((rows, cols), -bound, bound, draw[0], dtype),
                )
                setattr(
                    self, f"weight_hh_{tag}", init.uniform((rows, h), -bound, bound, draw[1], dtype)
                )
                if self.bias:
                    setattr(
                        self, f"bias_ih_{tag}", init.uniform((rows,), -bound, bound, draw[2], dtype)
                    )
                    setattr(
                        self, f"bias_hh_{tag}", init.uniform((rows,), -bound, bound, draw[3], dtype)
                    )

    # -------------------------------------------------------------------------- checks
    def _name(self) -> str:
        return f"{type(self).__name__}({self.extra_repr()})"

    def _sequence(self, x) -> tuple[Tensor, bool]:
        """``x`` time-major ``(L, N, input_size)`` and whether it came unbatched."""
        x = as_tensor(x, op=type(self).__name__)
        layout = "(N, L, input_size)" if self.batch_first else "(L, N, input_size)"
        if x.ndim not in (2, 3) or x.shape[-1] != self.input_size:
            raise ValueError(
                f"{self._name()}: input of shape {x.shape} is not {layout} or unbatched "
                f"(L, {self.input_size})"
            )
        if not x.dtype.is_float:
            raise TypeError(f"{self._name()}: input must be floating point, got {x.dtype}")
        steps = x.shape[1] if x.ndim == 3 and self.batch_first else x.shape[0]
        if type(steps) is int and steps == 0:  # (a dynamic size is not decided on here)
            # PyTorch refuses it too; the loop would return the initial state as the output
            raise ValueError(
                f"{self._name()}: input of shape {x.shape} has no time steps (sequence length 0)"
            )
        weight = self.weight_ih_l0
        if x.dtype != weight.dtype:  # (PyTorch's rule; the loop's carry keeps one dtype)
            raise TypeError(
                f"{self._name()}: input dtype {x.dtype.value} does not match the weights' "
                f"{weight.dtype.value}; convert the input (x.to({weight.dtype!r})) or the "
                f"module"
            )
        if x.ndim == 2:
            return x.unsqueeze(1), True
        return (x.swap_axes(0, 1) if self.batch_first else x), False

    def _input(self, x) -> tuple:
        """``(x time-major, unbatched, mask, packing)``: a :class:`PackedSequence` comes
        padded (in its sorted order) with the mask of each sequence's steps and what
        repacks the output; any other input as ``_sequence`` takes it."""
        if isinstance(x, PackedSequence):
            padded, mask, packing = unpacked_for_rnn(x)
            # (checked as a padded input would be: a batch-first view when so configured)
            self._sequence(padded.swap_axes(0, 1) if self.batch_first else padded)
            return padded, False, mask, packing
        x, unbatched = self._sequence(x)
        return x, unbatched, None, None

    def _packed_output(self, y, unbatched: bool, packing) -> Tensor:
        return repacked(y, packing) if packing is not None else self._output(y, unbatched)

    @staticmethod
    def _sorted(state: Tensor, packing, back: bool = False) -> Tensor:
        """A state in (``back``: out of) a packed batch's sorted order."""
        if packing is None:
            return state
        x = packing[0]
        return permuted(state, x.unsorted_indices if back else x.sorted_indices)

    def _state(self, given, what: str, batch: int, unbatched: bool, like: Tensor) -> Tensor:
        """An initial state ``(num_layers * directions, N, hidden_size)``: zeros when not
        given, else checked and given a batch dim when the input has none."""
        d = self.num_layers * (2 if self.bidirectional else 1)
        want = (d, self.hidden_size) if unbatched else (d, batch, self.hidden_size)
        if given is None:
            return zeros((d, batch, self.hidden_size), dtype=like.dtype)
        given = as_tensor(given, op=type(self).__name__)
        if tuple(given.shape) != want:
            raise ValueError(
                f"{self._name()}: {what} of shape {given.shape} should be {want} "
                "(num_layers * num_directions, batch, hidden_size)"
            )
        if given.dtype != like.dtype:  # (PyTorch's rule: the loop's carry keeps one dtype)
            raise TypeError(
                f"{self._name()}: {what} is {given.dtype.value} but the input is "
                f"{like.dtype.value}; give them one dtype"
            )
        return given.unsqueeze(1) if unbatched else given

    # -------------------------------------------------------------------------- running
    def _params(self, tag: str) -> _Weights:
        b_ih = getattr(self, f"bias_ih_{tag}") if self.bias else None
        b_hh = getattr(self, f"bias_hh_{tag}") if self.bias else None
        return _Weights(
            getattr(self, f"weight_ih_{tag}"), getattr(self, f"weight_hh_{tag}"), b_ih, b_hh
        )

    def _run(self, x, states: list[tuple], dropout_key=None, mask=None) -> tuple[Tensor, list]:
        """Every layer over time-major ``x``; ``states[k]`` is the initial carry of layer
        and direction ``k``; ``mask`` ``(L, N, 1)`` marks each sequence's steps (a packed
        batch). Returns the last layer's outputs and every final carry."""
        directions = 2 if self.bidirectional else 1
        finals = []
        drops = self.training and self.dropout > 0.0 and self.num_layers > 1
        keys = _keys(dropout_key, self.num_layers - 1) if drops else []  # a mask per gap
        for layer in range(self.num_layers):
            outs = []
            for di, suffix in enumerate(("", "_reverse")[:directions]):
                weights = self._params(f"l{layer}{suffix}")
                carry, ys = self._direction(
                    x, weights, states[layer * directions + di], di == 1, mask
                )
                outs.append(ys)
                finals.append(carry)
            x = outs[0] if directions == 1 else view.concatenate(outs, axis=-1)
            if drops and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, True, keys[layer])
        return x, finals

    def _direction(self, x, w: _Weights, carry, reverse: bool, mask=None):
        """One layer and direction over time-major ``x`` as one scan from ``carry``: every
        step's input projection ``x @ w_ih^T + b_ih (+ b_hh)`` in one matmul, then the
        recurrence. Returns the final carry and every step's hidden state. With ``mask``
        a sequence's carry stays as it is outside its steps (and its output is 0 there),
        so its final carry is the one at its own last step."""
        gx = x @ w.w_ih.swap_axes(0, 1)
        if w.b_ih is not None:
            gx = gx + (w.b_ih + w.b_hh if self.fold_hidden_bias else w.b_ih)
        step = self._step(w)
        if mask is None:
            return scan(step, carry, gx, reverse=reverse)

        def masked(c, xs):
            g, m = xs
            new, h = step(c, g)
            kept = tree_map(lambda a, b: binary.where(m, a, b), new, c)
            return kept, binary.where(m, h, 0.0)

        return scan(masked, carry, (gx, mask), reverse=reverse)

    def _step(self, w: _Weights):
        """The scan body ``(carry, gx) -> (carry, h)`` of one direction."""
        raise NotImplementedError

    def _output(self, y, unbatched: bool) -> Tensor:
        if unbatched:
            return y.squeeze(1)
        return y.swap_axes(0, 1) if self.batch_first else y

    def extra_repr(self) -> str:
        """The configuration shown by ``repr``."""
        extra = ""
        if self.num_layers != 1:
            extra += f", num_layers={self.num_layers}"
        if not self.bias:
            extra += ", bias=False"
        if self.batch_first:
            extra += ", batch_first=True"
        if self.dropout:
            extra += f", dropout={self.dropout}"
        if self.bidirectional:
            extra += ", bidirectional=True"
        return f"{self.input_size}, {self.hidden_size}{extra}"


# the options LSTM and GRU take alike, written once for both docstrings
_RNN_OPTIONS = """\
dropout: dropout on each layer's output but the last's, in training mode only
            (default 0).
        bidirectional: also run each layer from the end; outputs are concatenated
            (forward first) (default False).
        key: optional RNG key for the initial values (keyword).
        dtype: parameter dtype (default: the default dtype)."""


def _rnn_doc(cls):
    cls.__doc__ = cls.__doc__.replace("{rnn_options}", _RNN_OPTIONS)
    return cls


@_rnn_doc
class LSTM(_RNNBase):
    """A multi-layer long short-term memory network, as PyTorch's ``nn.LSTM``.

    For each step: ``i, f, g, o`` = sigmoid, sigmoid, tanh, sigmoid of
    ``x W_ih^T + b_ih + h W_hh^T + b_hh`` (the four blocks in that order),
    ``c' = f * c + i * g``, ``h' = o * tanh(c')``. Parameters ``weight_ih_l{k}``
    ``(4 * hidden_size, in)``, ``weight_hh_l{k}`` ``(4 * hidden_size, hidden_size)``,
    ``bias_ih_l{k}``, ``bias_hh_l{k}`` ``(4 * hidden_size,)`` and their ``_reverse``
    twins when bidirectional, all uniform in ``±1 / sqrt(hidden_size)``.

    Args:
        input_size: features of the input.
        hidden_size: features of the hidden and cell states.
        num_layers: stacked layers (default 1); layer ``k > 0`` reads layer ``k - 1``'s
            output.
        bias: whether to learn the biases (default True).
        batch_first: input and output ``(N, L, features)`` instead of ``(L, N, features)``
            (the states are ``(layers * directions, N, hidden_size)`` either way).
        {rnn_options}
        proj_size: PyTorch's projected hidden state: only 0 (none) is supported.

    Raises:
        NotImplementedError: for ``proj_size`` other than 0.

    Example:
        >>> lstm = nb.nn.LSTM(8, 16, num_layers=2)
        >>> out, (h_n, c_n) = lstm(nb.ones((5, 3, 8)))     # (5, 3, 16), (2, 3, 16) x 2
    """

    gates = 4
    fold_hidden_bias = True

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        proj_size: int = 0,
        *,
        key=None,
        dtype=None,
    ):
        if proj_size != 0:  # (PyTorch's positional order: proj_size follows bidirectional)
            raise NotImplementedError(
                f"LSTM: proj_size (a projected hidden state) is not supported; got "
                f"proj_size={proj_size!r}, only 0"
            )
        super().__init__(
            input_size,
            hidden_size,
            num_layers,
            bias,
            batch_first,
            dropout,
            bidirectional,
            key=key,
            dtype=dtype,
        )

    def forward(self, x, hx=None, dropout_key=None):
        """Run the network.

        Args:
            x: ``(L, N, input_size)`` (``(N, L, input_size)`` with ``batch_first``), or
                unbatched ``(L, input_size)``.
            hx: optional ``(h_0, c_0)``, each ``(num_layers * num_directions, N,
                hidden_size)`` (without ``N`` for an unbatched input); zeros when omitted.
            dropout_key: optional RNG key for the masks of the dropout between layers.

        Returns:
            ``(output, (h_n, c_n))``: ``output`` the last layer's hidden state at every step
            ``(L, N, num_directions * hidden_size)`` (batch first with ``batch_first``),
            ``h_n``/``c_n`` each layer's and direction's final states, shaped as ``h_0``.

        Raises:
            ValueError: for an input or state of the wrong shape.
            TypeError: for a non-float input, or ``hx`` that is not a pair.
        """
        x, unbatched, mask, packing = self._input(x)
        if hx is None:
            hx = (None, None)
        if not (isinstance(hx, tuple | list) and len(hx) == 2):
            raise TypeError(
                f"{self._name()}: hx must be a pair (h_0, c_0), got {type(hx).__name__}"
            )
        h0 = self._sorted(self._state(hx[0], "h_0", x.shape[1], unbatched, x), packing)
        c0 = self._sorted(self._state(hx[1], "c_0", x.shape[1], unbatched, x), packing)
        states = [(h0[k], c0[k]) for k in range(h0.shape[0])]
        y, finals = self._run(x, states, dropout_key, mask)
        h_n = self._sorted(view.stack([h for h, _ in finals], axis=0), packing, back=True)
        c_n = self._sorted(view.stack([c for _, c in finals], axis=0), packing, back=True)
        if unbatched:
            h_n, c_n = h_n.squeeze(1), c_n.squeeze(1)
        return self._packed_output(y, unbatched, packing), (h_n, c_n)

    def _step(self, w: _Weights):
        return _lstm_step(w.w_hh)


@_rnn_doc
class GRU(_RNNBase):
    """A multi-layer gated recurrent unit network, as PyTorch's ``nn.GRU``.

    For each step: ``r = sigmoid(x W_ir^T + b_ir + h W_hr^T + b_hr)``, ``z`` likewise,
    ``n = tanh(x W_in^T + b_in + r * (h W_hn^T + b_hn))``, ``h' = (1 - z) * n + z * h``.
    Parameters ``weight_ih_l{k}`` ``(3 * hidden_size, in)``, ``weight_hh_l{k}``
    ``(3 * hidden_size, hidden_size)``, ``bias_ih_l{k}``, ``bias_hh_l{k}``
    ``(3 * hidden_size,)`` (blocks ``r, z, n``) and their ``_reverse`` twins when
    bidirectional, all uniform in ``±1 / sqrt(hidden_size)``.

    Args:
        input_size: features of the input.
        hidden_size: features of the hidden state.
        num_layers: stacked layers (default 1).
        bias: whether to learn the biases (default True).
        batch_first: input and output ``(N, L, features)`` instead of ``(L, N, features)``.
        {rnn_options}

    Example:
        >>> gru = nb.nn.GRU(8, 16, batch_first=True)
        >>> out, h_n = gru(nb.ones((3, 5, 8)))              # (3, 5, 16), (1, 3, 16)
    """

    gates = 3

    def forward(self, x, hx=None, dropout_key=None):
        """Run the network.

        Args:
            x: ``(L, N, input_size)`` (``(N, L, input_size)`` with ``batch_first``), or
                unbatched ``(L, input_size)``.
            hx: optional ``h_0`` ``(num_layers * num_directions, N, hidden_size)`` (without
                ``N`` for an unbatched input); zeros when omitted.
            dropout_key: optional RNG key for the masks of the dropout between layers.

        Returns:
            ``(output, h_n)``: ``output`` ``(L, N, num_directions * hidden_size)`` (batch
            first with ``batch_first``), ``h_n`` shaped as ``h_0``.

        Raises:
            ValueError: for an input or state of the wrong shape.
            TypeError: for a non-float input.
        """
        x, unbatched, mask, packing = self._input(x)
        h0 = self._sorted(self._state(hx, "h_0", x.shape[1], unbatched, x), packing)
        y, finals = self._run(x, [h0[k] for k in range(h0.shape[0])], dropout_key, mask)
        h_n = self._sorted(view.stack(finals, axis=0), packing, back=True)
        return self._packed_output(y, unbatched, packing), (h_n.squeeze(1) if unbatched else h_n)

    def _step(self, w: _Weights):
        return _gru_step(w.w_hh.swap_axes(0, 1), w.b_hh)


def _rnn_step(w_hh_t, act):
    """The Elman step for one direction: ``h' = act(gx + h W_hh^T)`` (the biases are in
    ``gx``)."""

    def step(h, gx):
        h = act(gx + h @ w_hh_t)
        return h, h

    return step


_NONLINEARITIES = {"tanh": unary.tanh, "relu": unary.relu}


@_rnn_doc
class RNN(_RNNBase):
    """A multi-layer Elman network, as PyTorch's ``nn.RNN``: ``h' = tanh(x W_ih^T + b_ih +
    h W_hh^T + b_hh)`` (or ``relu``). Parameters ``weight_ih_l{k}`` ``(hidden_size, in)``,
    ``weight_hh_l{k}`` ``(hidden_size, hidden_size)``, ``bias_ih_l{k}``, ``bias_hh_l{k}``
    and their ``_reverse`` twins, uniform in ``±1 / sqrt(hidden_size)``.

    Args:
        input_size: features of the input.
        hidden_size: features of the hidden state.
        num_layers: stacked layers (default 1).
        nonlinearity: ``"tanh"`` (default) or ``"relu"``.
        bias: whether to learn the biases (default True).
        batch_first: input and output ``(N, L, features)`` instead of ``(L, N, features)``.
        {rnn_options}

    Example:
        >>> rnn = nb.nn.RNN(8, 16, nonlinearity="relu")
        >>> out, h_n = rnn(nb.ones((5, 3, 8)))              # (5, 3, 16), (1, 3, 16)
    """

    gates = 1
    fold_hidden_bias = True

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        nonlinearity: str = "tanh",
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        *,
        key=None,
        dtype=None,
    ):
        if nonlinearity not in _NONLINEARITIES:
            raise ValueError(f"RNN: nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
        super().__init__(
            input_size,
            hidden_size,
            num_layers,
            bias,
            batch_first,
            dropout,
            bidirectional,
            key=key,
            dtype=dtype,
        )
        self.nonlinearity = nonlinearity

    forward = GRU.forward  # (one state, as a GRU's)

    def _step(self, w: _Weights):
        return _rnn_step(w.w_hh.swap_axes(0, 1), _NONLINEARITIES[self.nonlinearity])

    def extra_repr(self) -> str:
        """The configuration shown by ``repr``."""
        base = super().extra_repr()
        return base if self.nonlinearity == "tanh" else f"{base}, nonlinearity='relu'"


# ----------------------------------------------------------------------------- one step
class _CellBase(Module):
    """One step of a recurrent layer (PyTorch's ``RNNCell``, ``LSTMCell``, ``GRUCell``):
    parameters ``weight_ih`` ``(gates * hidden_size, input_size)``, ``weight_hh``
    ``(gates * hidden_size, hidden_size)``, ``bias_ih``, ``bias_hh``, uniform in
    ``±1 / sqrt(hidden_size)``; the step is the layers' own."""

    def _in_pytorch_layout(self, name: str) -> bool:
        return name.startswith(("weight_ih", "weight_hh"))  # (PyTorch's (rows, in) layout)

    gates = 0
    fold_hidden_bias = False  # as the layers': b_hh joins the input projection (not GRU's)

    def __init__(
        self, input_size: int, hidden_size: int, bias: bool = True, *, key=None, dtype=None
    ):
        super().__init__()
        name = type(self).__name__
        _check_sizes(name, input_size=input_size, hidden_size=hidden_size)
        self.input_size, self.hidden_size, self.bias = int(input_size), int(hidden_size), bool(bias)
        rows, h = self.gates * self.hidden_size, self.hidden_size
        bound = 1.0 / math.sqrt(h)
        k = _keys(key, 4)
        self.weight_ih = init.uniform((rows, self.input_size), -bound, bound, k[0], dtype)
        self.weight_hh = init.uniform((rows, h), -bound, bound, k[1], dtype)
        if self.bias:
            self.bias_ih = init.uniform((rows,), -bound, bound, k[2], dtype)
            self.bias_hh = init.uniform((rows,), -bound, bound, k[3], dtype)

    def _name(self) -> str:
        return f"{type(self).__name__}({self.input_size}, {self.hidden_size})"

    def _input(self, x) -> tuple:
        """``x`` as ``(N, input_size)`` and whether it came unbatched."""
        name = self._name()
        x = as_tensor(x, op=type(self).__name__)
        if x.ndim not in (1, 2) or x.shape[-1] != self.input_size:
            raise ValueError(
                f"{name}: input of shape {x.shape} is not (N, {self.input_size}) or "
                f"({self.input_size},)"
            )
        if x.dtype != self.weight_ih.dtype:
            raise TypeError(
                f"{name}: input dtype {x.dtype.value} does not match the weights' "
                f"{self.weight_ih.dtype.value}"
            )
        unbatched = x.ndim == 1
        return (x.unsqueeze(0) if unbatched else x), unbatched

    def _state(self, given, x, unbatched: bool, what: str) -> Tensor:
        """A state ``(N, hidden_size)`` for ``x`` (``(N, input_size)``): ``given`` checked
        (unbatched: without ``N``), or zeros."""
        if given is None:
            return zeros((x.shape[0], self.hidden_size), dtype=x.dtype)
        given = as_tensor(given, op=type(self).__name__)
        given = given.unsqueeze(0) if unbatched else given
        if tuple(given.shape) != (x.shape[0], self.hidden_size) or given.dtype != x.dtype:
            raise ValueError(
                f"{self._name()}: {what} of shape {tuple(given.shape)} ({given.dtype.value}) "
                f"is not ({x.shape[0]}, {self.hidden_size}) ({x.dtype.value})"
            )
        return given

    def _gx(self, x):
        gx = x @ self.weight_ih.swap_axes(0, 1)
        if self.bias:
            gx = gx + (self.bias_ih + self.bias_hh if self.fold_hidden_bias else self.bias_ih)
        return gx

    def forward(self, x, hx=None):
        """One step.

        Args:
            x: ``(N, input_size)`` or unbatched ``(input_size,)``.
            hx: optional ``h`` ``(N, hidden_size)``; zeros when omitted.

        Returns:
            The new ``h``, shaped as ``hx``.
        """
        x, unbatched = self._input(x)
        h, _ = self._step()(self._state(hx, x, unbatched, "hx"), self._gx(x))
        return h.squeeze(0) if unbatched else h

    def _step(self):
        """The layer's step ``(carry, gx) -> (carry, h)`` for this cell's weights."""
        raise NotImplementedError

    def extra_repr(self) -> str:
        """The configuration shown by ``repr``."""
        return f"{self.input_size}, {self.hidden_size}" + ("" if self.bias else ", bias=False")


class RNNCell(_CellBase):
    """One Elman step, as PyTorch's ``nn.RNNCell``: ``h' = tanh(x W_ih^T + b_ih + h W_hh^T
    + b_hh)`` (or ``relu``).

    Args:
        input_size: features of the input.
        hidden_size: features of the hidden state.
        bias: whether to learn the biases (default True).
        nonlinearity: ``"tanh"`` (default) or ``"relu"``.
        key: optional RNG key for the initial values (keyword).
        dtype: parameter dtype (default: the default dtype).
    """

    gates = 1
    fold_hidden_bias = True

    def __init__(
        self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh",
        *, key=None, dtype=None,
    ):  # fmt: skip
        if nonlinearity not in _NONLINEARITIES:
            raise ValueError(
                f"RNNCell: nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}"
            )
        super().__init__(input_size, hidden_size, bias, key=key, dtype=dtype)
        self.nonlinearity = nonlinearity

    def _step(self):
        return _rnn_step(self.weight_hh.swap_axes(0, 1), _NONLINEARITIES[self.nonlinearity])


class LSTMCell(_CellBase):
    """One LSTM step, as PyTorch's ``nn.LSTMCell`` (gates ``i, f, g, o``).

    Args:
        input_size: features of the input.
        hidden_size: features of the hidden and cell states.
        bias: whether to learn the biases (default True).
        key: optional RNG key for the initial values (keyword).
        dtype: parameter dtype (default: the default dtype).
    """

    gates = 4
    fold_hidden_bias = True

    def forward(self, x, hx=None):
        """One step.

        Args:
            x: ``(N, input_size)`` or unbatched ``(input_size,)``.
            hx: optional ``(h, c)``, each ``(N, hidden_size)``; zeros when omitted.

        Returns:
            The new ``(h, c)``.
        """
        if hx is not None and not (isinstance(hx, tuple | list) and len(hx) == 2):
            raise TypeError(f"LSTMCell: hx must be a pair (h, c), got {type(hx).__name__}")
        h_given, c_given = (None, None) if hx is None else hx
        x, unbatched = self._input(x)
        h = self._state(h_given, x, unbatched, "h")
        c = self._state(c_given, x, unbatched, "c")
        (h, c), _ = _lstm_step(self.weight_hh)((h, c), self._gx(x))
        return (h.squeeze(0), c.squeeze(0)) if unbatched else (h, c)


class GRUCell(_CellBase):
    """One GRU step, as PyTorch's ``nn.GRUCell`` (gates ``r, z, n``).

    Args:
        input_size: features of the input.
        hidden_size: features of the hidden state.
        bias: whether to learn the biases (default True).
        key: optional RNG key for the initial values (keyword).
        dtype: parameter dtype (default: the default dtype).
    """

    gates = 3

    def _step(self):
        return _gru_step(self.weight_hh.swap_axes(0, 1), self.bias_hh if self.bias else None)

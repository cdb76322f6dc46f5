# softplus(x) = log(1 + exp(x)), a smooth ReLU, and its derivative kernel.
#
# Both are elementwise: `foreach` calls `body` on every (SIMD-wide) index of the output, so
# the kernels work for any rank; nabla's vmap relies on that (batching="elementwise").

from extensibility import register, InputTensor, OutputTensor, foreach
from layout import Coord
from max.gpu.host import DeviceContext
from std.math import exp, log1p


@register("softplus")
struct Softplus:
    @staticmethod
    def execute[target: StaticString](
        output: OutputTensor,
        x: InputTensor[dtype = output.dtype, rank = output.rank, static_spec=_],
        ctx: DeviceContext,
    ) raises where output.dtype.is_floating_point():
        def body[width: Int](idx: Coord[...]) {var x} -> SIMD[x.dtype, width]:
            var v = x.load[width](idx)
            # max(v, 0) + log1p(exp(-|v|)): no overflow for large |v|
            return max(v, 0) + log1p(exp(-abs(v)))

        foreach[target=target](body, output, ctx)


# The derivative of softplus is the logistic sigmoid; this kernel returns t * sigmoid(x),
# which is both the JVP (t a tangent) and the VJP (t a cotangent) of softplus at x.
@register("softplus_jvp")
struct SoftplusJvp:
    @staticmethod
    def execute[target: StaticString](
        output: OutputTensor,
        x: InputTensor[dtype = output.dtype, rank = output.rank, static_spec=_],
        t: InputTensor[dtype = output.dtype, rank = output.rank, static_spec=_],
        ctx: DeviceContext,
    ) raises where output.dtype.is_floating_point():
        def body[width: Int](idx: Coord[...]) {var x, var t} -> SIMD[x.dtype, width]:
            return t.load[width](idx) / (1 + exp(-x.load[width](idx)))

        foreach[target=target](body, output, ctx)

# row_sum(x)[..., i] = sum_j x[..., i, j]: a reduction over the last axis.
#
# The output has one dim fewer than the input. Leading dims are independent rows, so the
# kernel works for any rank (and nabla's vmap can prefix batch dims). It walks contiguous
# memory with a plain loop, so it is a CPU kernel.

from extensibility import register, InputTensor, OutputTensor
from max.gpu.host import DeviceContext


@register("row_sum")
struct RowSum:
    @staticmethod
    def execute[target: StaticString](
        output: OutputTensor,
        x: InputTensor[dtype = output.dtype, static_spec=_],
        ctx: DeviceContext,
    ) raises:
        if target != "cpu":
            raise Error("row_sum is a CPU kernel")
        var n = x.dim_size(x.rank - 1)
        var rows = output.size()
        var src = x.unsafe_ptr()
        var dst = output.unsafe_ptr()
        for r in range(rows):
            var acc = Scalar[x.dtype](0)
            for j in range(n):
                acc += src[unsafe_offset = r * n + j]
            dst[unsafe_offset=r] = acc

# ``my_kernel``: x + 1, elementwise. The original's tutorial 12 reads a kernel of this name
# from ../tests/mojo/kernels, written for MAX 26.3 (``import compiler``, ``from tensor
# import ...``), which MAX 26.7 no longer compiles; the tutorial test puts this package
# there instead (the tutorial's Python is run unchanged).

from extensibility import register, InputTensor, OutputTensor, foreach
from layout import Coord
from max.gpu.host import DeviceContext


@register("my_kernel")
struct AddOne:
    @staticmethod
    def execute[target: StaticString](
        output: OutputTensor,
        x: InputTensor[dtype = output.dtype, rank = output.rank, static_spec=_],
        ctx: DeviceContext,
    ) raises:
        def body[width: Int](idx: Coord[...]) {var x} -> SIMD[x.dtype, width]:
            return x.load[width](idx) + 1

        foreach[target=target](body, output, ctx)

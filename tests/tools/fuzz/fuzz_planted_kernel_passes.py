"""A wrong kernel pass planted for the kernel fuzzers to catch (``test_fuzz_kernels.py``).

``loosen-reciprocals`` (a kernel pass): every exact ``reciprocal`` of the kernel's body becomes
an approximate one (wrong: off the chip that is ``1 / x`` of ``x`` rounded to bfloat16). It
fires only on kernels whose body holds an exact ``pl.reciprocal``, about one random kernel in
twenty (``generate.kernel_params``).

Load with ``python -m minipallas.tools.fuzz.kernels --load
tests/tools/fuzz/fuzz_planted_kernel_passes.py --pass-pipeline=loosen-reciprocals``.
"""

import dataclasses

from minipallas.ir.core import Block, Function
from minipallas.ir.kernel_spec import Kernel
from minipallas.passes.registry import register


def _loosened(block: Block) -> Block:
    ops = []
    for op in block.ops:
        regions = tuple(_loosened(r) for r in op.regions)
        exact = op.name == "reciprocal" and not op.attrs["approx"]
        attrs = {**op.attrs, "approx": True} if exact else op.attrs
        ops.append(op.replace(attrs=attrs, regions=regions) if exact or op.regions else op)
    return Block(block.params, tuple(ops), block.results)


@register("loosen-reciprocals", doc="exact reciprocals become approximate (wrong on purpose)",
          subject="kernel")  # fmt: skip
def loosen_reciprocals(kernel: Kernel) -> Kernel:
    body = Function(kernel.body.name, _loosened(kernel.body.body))
    return dataclasses.replace(kernel, body=body)

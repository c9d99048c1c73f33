"""Chapter 1: a first program, every stage printed: IR, effects, discharged, cleaned, values.

A kernel over two refs writes its input times two into scratch, then the scratch plus one into
its output. ``mp.trace`` turns the Python into IR; ``print`` shows it as text (the text that
``minipallas-opt`` reads back); ``mp.effects`` says what it does to its refs; ``mp.discharge``
makes it pure; ``mp.cleanup`` tidies what discharge leaves; ``mp.interpret`` runs it. The
scratch is allocated as a TPU kernel allocates it, ``tpu.VMEM`` (upstream's ``pltpu.VMEM``):
its type carries a memory space, which the IR prints (``tpu.vmem``) and the TPU emitter of
chapter 11 uses; everything else, the CPU included, treats it as any buffer.

Run: ``python examples/ch01_first_program.py``; with ``--ir`` it prints only the stateful IR,
for ``minipallas-opt``: ``python examples/ch01_first_program.py --ir > first.mir``, then
``minipallas-opt first.mir --pass-pipeline=discharge,cleanup --print-ir-after-all``.
"""

import sys

import numpy as np

import minipallas as mp
import minipallas.numpy as jnp
from minipallas import tpu


def kernel(x_ref, o_ref):
    def body(acc_ref):  # scratch that lives only inside body
        acc_ref[...] = x_ref[...] * 2
        o_ref[...] = acc_ref[...] + 1

    # the scratch's type, as a Pallas TPU kernel writes it: the CPU runs any memory space
    mp.run_scoped(body, tpu.VMEM((8,), jnp.float32))


def main() -> None:
    ref = mp.RefType((8,), jnp.float32)
    fn = mp.trace(kernel, ref, ref)
    if "--ir" in sys.argv[1:]:
        print(fn)
        return
    print(fn)  # 1. the stateful IR: refs, get/swap, a scope
    print(mp.effects(fn))  # 2. what it does to its refs: reads x (0), writes o (1)
    pure = mp.discharge(fn)
    print(pure)  # 3. discharged: arrays in, final values out
    clean = mp.cleanup(pure)
    print(clean)  # 4. cleaned: the dead scratch is gone, constants folded
    x = np.arange(8, dtype=np.float32)
    print(mp.interpret(clean, x, np.zeros(8, np.float32)))  # 5. the values: (x, x * 2 + 1)


if __name__ == "__main__":
    main()

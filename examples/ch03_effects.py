"""Chapter 3: effects: what a program does to its refs, op by op, region by region.

An effect is a kind (read, write, accum) on a position: a parameter of the function, or an
operand of an op. ``mp.effects`` computes them for a function, a block or an op; the function
header prints them. Regions are closed, so a loop body's effects are on its own parameters, and
the loop maps them back to its operands. A scope's own scratch is invisible from outside. And,
as upstream JAX has it, a ``swap`` only writes: ``o[...] = v`` does not read ``o``.
"""

import minipallas as mp
import minipallas.numpy as jnp
from minipallas import tpu

F8 = mp.RefType((8,), jnp.float32)


def copy(x_ref, o_ref):
    o_ref[...] = x_ref[...]  # get (read 0), swap (write 1): o is never read


def accumulate(x_ref, acc_ref):
    def body(i, carry):
        mp.addupdate(acc_ref, (i,), x_ref[i])  # accum, inside a loop body
        return carry

    mp.fori_loop(0, 8, body, jnp.int32(0))


def scoped(x_ref, o_ref):
    def body(s_ref):  # s_ref is the scope's own: its effects stay inside
        s_ref[...] = x_ref[...] + 1
        o_ref[...] = s_ref[...]

    mp.run_scoped(body, tpu.VMEM((8,), jnp.float32))


def increment(o_ref):
    o_ref[...] += 1  # a read and a write of the same ref


def main() -> None:
    for kernel in (copy, accumulate, scoped, increment):
        fn = mp.trace(kernel, *[F8] * (kernel.__code__.co_argcount))
        names = kernel.__code__.co_varnames[: kernel.__code__.co_argcount]
        found = mp.effects(fn)
        print(f"--- {kernel.__name__}({', '.join(names)}): {found}")
        for op in fn.walk():
            if op.regions:
                # a region op's effects are on its operands; its body's on the body's parameters
                region = op.regions[0]
                print(f"    {op.name}: on its operands {mp.effects(op)}, "
                      f"its body on its parameters {mp.effects(region)}")  # fmt: skip
    print()
    print(mp.trace(accumulate, F8, F8))


if __name__ == "__main__":
    main()

"""Chapter 6: StableHLO: lowering the pure program to MLIR, and running it on XLA.

``mp.lower(fn)`` runs the ``stablehlo`` target's pipeline (``collectives``, ``discharge``,
``cleanup``: a stateful function is discharged on the way) and its emitter, one rule per op
(``lowering/stablehlo/``): the result is an MLIR module whose ``@main`` takes and returns
tensors, in the discharged function's order (its own results, then each ref's final value).
``mp.compile(fn)`` compiles that module with XLA for the CPU and returns a callable on numpy
arrays; its bits equal the reference interpreter's, which is what the tests hold it to.
"""

import numpy as np

import minipallas as mp
import minipallas.numpy as jnp


def running_sum(x_ref, o_ref):
    def step(i, total):
        total = total + x_ref[i]
        o_ref[i] = total
        return total

    return mp.fori_loop(0, 8, step, jnp.float32(0))


def main() -> None:
    ref = mp.RefType((8,), jnp.float32)
    fn = mp.trace(running_sum, ref, ref)
    print(fn)

    passes = []
    lowered = mp.lower(fn, after_each=lambda name, _: passes.append(name), verify=True)
    print(f"--- the target's pipeline ran: {', '.join(passes)}; the module, without locations ---")
    print(lowered.as_text(debug_info=False))

    x = np.random.default_rng(0).standard_normal(8).astype(np.float32)
    total, x_final, o_final = mp.compile(fn)(x, np.zeros(8, np.float32))
    o = np.zeros(8, np.float32)
    (want,) = mp.interpret(fn, x, o)  # refs are numpy arrays, written in place
    same = total.tobytes() == want.tobytes() and o_final.tobytes() == o.tobytes()
    assert same and np.array_equal(x_final, x)
    print(f"XLA's results (total, x, o) equal the interpreter's, bit for bit: {same}")


if __name__ == "__main__":
    main()

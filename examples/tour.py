"""A tour of minipallas, one stage per chapter: trace -> IR -> interpret -> discharge -> run.

The kernel computes running row sums of an (8, 128) block: for each row i it adds x[i] into a
scoped scratch accumulator and writes the accumulator to out[i]. Run it with ``make demo``.
"""

import tempfile

import numpy as np

import minipallas as mp
import minipallas.numpy as jnp
from minipallas import tpu


def running_sum(x_ref, o_ref):
    def body(acc_ref):
        acc_ref[...] = jnp.zeros((128,), jnp.float32)

        def step(i, carry):
            acc_ref[...] += x_ref[i, :]
            o_ref[i, :] = acc_ref[...]
            return carry + 1

        return mp.fori_loop(0, 8, step, jnp.int32(0))

    return mp.run_scoped(body, tpu.VMEM((128,), jnp.float32))


def scaled_add(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0 + y_ref[...]


def shared_sum(x_ref, o_ref):
    """Each program writes its row into one buffer shared along "x", waits, sums the buffer."""

    def body(buf_ref):
        i = mp.axis_index("x")
        buf_ref[mp.ds(i, 1), :] = x_ref[...]
        mp.barrier("x")
        o_ref[...] = buf_ref[...].sum(axis=0, keepdims=True)

    mp.run_scoped(body, tpu.VMEM((8, 128), jnp.float32), collective_axes=("x",))


def chapter(title: str) -> None:
    print(f"\n== {title} " + "=" * (72 - len(title)))


def why(text: str) -> None:
    """A chapter's reason, set apart from its output."""
    print("\n".join("  | " + line for line in text.strip().splitlines()))


WHY_CLOSED = """
Why regions are closed: the loop body above uses only its own parameters (%i, the refs and
the carry it is handed), never a value defined outside it. So every pass can rewrite a region
on its own, knowing all it reads comes in through its parameters; discharge can turn a ref the
body writes into a new carry just by adding a parameter and a result, and cleanup can drop a
parameter nobody uses. MLIR's regions may capture outer values; jaxprs, like minipallas, pass
them in explicitly (a loop's constants, here the refs).
"""

WHY_COLLECTIVE = """
run_scoped(..., collective_axes=("x",)) asks for one allocation shared by every program that
differs only along grid axis "x". Upstream JAX (0.10.2 and main) rejects it everywhere but
Mosaic GPU's thread axes, and minipallas does too, with upstream's messages. Under the opt-in
collectives="simulate" every program runs together in the multi-program interpreter: the group
shares the buffer, barrier("x") waits for all of it, and a race or a deadlock is an error
naming both places. Semaphores (semaphore_signal, semaphore_wait) order two programs without a
barrier: a wait blocks until another program's signal, and orders what came before it.
"""

WHY_RESULTS = """
The results convention: a discharged function returns its own results first, then the final
value of every ref parameter, in parameter order, as upstream's discharge_state does. A ref the
program only reads comes back unchanged (x above), so callers and tests line up outputs by
position without knowing which refs were written; cleanup cannot drop them, since they are
the function's results.

Why a swap leaves a dead read: `o_ref[i, :] = v` is a swap, which returns what the window held.
Discharge keeps that meaning exactly, so it reads the old window (a slice) before writing the
new one, whether or not anyone uses the old value: above, the dynamic_slice of the output just
before its dynamic_update_slice. Nothing uses it: the read is dead, and cleanup deletes it.
Discharge stays simple and obviously right; cleanup makes it small.
"""


def main() -> None:
    rng = np.random.default_rng(0)
    x = rng.integers(-8, 8, size=(8, 128)).astype(np.float32)
    expected = np.cumsum(x, axis=0)

    chapter("1. Trace a Pallas-style kernel into minipallas IR")
    fn = mp.trace(
        running_sum,
        tpu.VMEM((8, 128), jnp.float32),
        tpu.VMEM((8, 128), jnp.float32),
    )
    mp.verify(fn)
    print(fn)
    why(WHY_CLOSED)

    chapter("2. Interpret it: refs are numpy arrays mutated in place")
    out = np.zeros_like(x)
    (steps,) = mp.interpret(fn, x.copy(), out, uninitialized="error")
    assert np.array_equal(out, expected) and steps == 8
    print(f"out matches numpy's cumsum: True (loop ran {int(steps)} steps)")

    chapter("3. Effects: what the kernel does to each ref parameter")
    print("{" + ", ".join(str(e) for e in sorted(mp.effects(fn))) + "}")

    chapter("4. Discharge: the same program as a pure function")
    pure = mp.discharge(fn)
    mp.verify(pure)
    print(pure)
    why(WHY_RESULTS)

    chapter("5. Cleanup: what a careful person would have written")
    clean = mp.cleanup(pure)
    mp.verify(clean)
    print(clean)
    counts = [mp.count_ops(f) for f in (fn, pure, clean)]
    print("ops: stateful {}, discharged {}, cleaned {}".format(*counts))
    steps2, x_after, out_after = mp.interpret(clean, x, np.zeros_like(x))
    assert np.array_equal(out_after, expected) and np.array_equal(x_after, x) and steps2 == steps
    print("the cleaned pure program gives the same bits: True")

    chapter("6. Lower to StableHLO and run it on XLA's CPU backend")
    lowered = mp.lower(fn)
    print(lowered.as_text(debug_info=False))
    steps3, _, out_xla = mp.compile(fn)(x, np.zeros_like(x))
    assert np.array_equal(out_xla, expected) and steps3 == steps
    print("XLA's result equals the interpreter's, bit for bit: True")

    chapter("7. A Pallas kernel: a grid of blocks, run on CPU, emitted for TPU and GPU")
    spec = mp.BlockSpec((8, 128), lambda i, j: (i, j))
    call = mp.pallas_call(
        scaled_add,
        mp.ArrayType((16, 256), jnp.float32),
        grid=(2, 2),
        in_specs=[spec, spec],
        out_specs=spec,
    )
    a, b = x.repeat(2, axis=0).repeat(2, axis=1), np.ones((16, 256), np.float32)
    assert np.array_equal(call(a, b), a * 2 + b)
    print("pallas_call on CPU equals numpy: True")
    print("\n-- on CPU, the grid's four independent points run batched: no loop --")
    print(mp.cleanup(mp.discharge(call.program(a, b))))
    print("-- Mosaic TPU --")
    print(call.lower(a, b, target="tpu").as_text(debug_info=False))
    print("-- Triton GPU --")
    print(call.lower(a, b, target="gpu").as_text(debug_info=False))

    chapter("8. Pictures: the kernel before and after discharge, drawn with Graphviz")
    stem = f"{tempfile.gettempdir()}/minipallas-tour"
    dot = mp.view(pure, format="dot", before=fn, title="discharge", path=f"{stem}.dot")
    print(f"{stem}.dot: {dot.count(' -> ')} arrows; refs coloured by effect, the scope a box")
    try:
        mp.view(pure, format="svg", before=fn, title="discharge", path=f"{stem}.svg")
        print(f"{stem}.svg: rendered by Graphviz")
    except mp.MiniPallasError as e:  # no Graphviz programs: the error says how to get them
        print(f"no svg: {e}")

    chapter("9. Programs that share scratch: collective axes, run under an opt-in")
    why(WHY_COLLECTIVE)
    row = mp.BlockSpec((1, 128), lambda i: (i, 0))
    shared = mp.pallas_call(
        shared_sum,
        mp.ArrayType((8, 128), jnp.float32),
        grid=(8,),
        in_specs=[row],
        out_specs=row,
        grid_names=("x",),
    )
    try:
        shared(x)
    except mp.MiniPallasError as e:
        print(f"by default, upstream's error: {e}")
    total = np.zeros(128, np.float32)
    for r in x:
        total = total + r
    assert shared.simulate(x).tobytes() == np.broadcast_to(total, (8, 128)).tobytes()
    print("simulated, every program's row holds the sum of all rows: True")
    print("(examples/ch17_collectives.py shows the race and the deadlock the simulator reports, "
          "and a ring of programs synchronized by semaphores)")  # fmt: skip


if __name__ == "__main__":
    main()

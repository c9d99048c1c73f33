"""Chapter 4: discharge, step by step: from a program over refs to a pure function.

Each rule on its own, with its before and after, is in docs/concepts/discharge.md; here they
work together. The program below touches three refs in different ways: ``x`` is only read,
``acc`` is accumulated into through a view, and ``out`` is written in one branch of a ``cond``.
We print the stateful IR, its effects (per function and per region op, with the name of what
each position holds), the discharged IR, and the cleaned IR, and check at each step that the
meaning did not change.
"""

import numpy as np

import minipallas as mp
import minipallas.numpy as jnp


def program(x_ref, acc_ref, out_ref, flag):
    def body(i, carry):
        row = x_ref[i, :]  # read-only: becomes a loop constant
        mp.addupdate(acc_ref.at[0], (slice(None),), row)  # accumulate through a view
        return carry + row.sum()

    total = mp.fori_loop(0, 4, body, jnp.float32(0))

    @mp.when(flag > 0)
    def _():
        out_ref[...] = acc_ref[0, :] * 2  # written in one branch only

    return total


PARAMS = ("x_ref", "acc_ref", "out_ref", "flag")  # program's parameters, for the effects


def named(effects, values, names) -> str:
    """``{read 0, ...}`` with each position's name: what the ref is, not where it comes."""
    return ", ".join(f"{e.kind} {names.get(values[e.input], e.input)}" for e in sorted(effects))


def show(title: str, fn: mp.Function) -> None:
    print(f"\n--- {title} ({mp.count_ops(fn)} ops) ---")
    print(fn)


def main() -> None:
    types = (
        mp.RefType((4, 8), jnp.float32),
        mp.RefType((2, 8), jnp.float32),
        mp.RefType((8,), jnp.float32),
        mp.ArrayType((), jnp.int32),
    )
    fn = mp.trace(program, *types)
    show("stateful IR", fn)

    print("\n--- effects (at positions; named: what each position holds) ---")
    names = dict(zip(fn.body.params, PARAMS, strict=True))
    print(f"function: {mp.effects(fn)} = {named(mp.effects(fn), fn.body.params, names)}")
    for op in fn.body.ops:
        if op.regions:  # positions are the op's operands; the regions' effects, mapped out
            found = mp.effects(op)
            print(f"{op.name} at line {op.loc.line}: {found} = {named(found, op.operands, names)}")

    pure = mp.discharge(fn)
    mp.verify(pure)
    show("discharged: refs became arrays, results gained their final values", pure)
    dot = mp.view(pure, format="dot", before=fn, title="discharge")  # `dot -Tsvg` draws it
    print(f"\n--- picture: {dot.count(' -> ')} arrows; coloured refs, all before discharge ---")
    print("\n".join(line.strip() for line in dot.splitlines() if "Ref{" in line and "fill" in line))
    clean = mp.cleanup(pure)
    mp.verify(clean)
    show("cleaned", clean)

    rng = np.random.default_rng(1)
    x = rng.integers(-4, 4, (4, 8)).astype(np.float32)
    acc = np.zeros((2, 8), np.float32)
    out = np.zeros(8, np.float32)
    refs = (x.copy(), acc.copy(), out.copy())
    (total,) = mp.interpret(fn, *refs, np.int32(1))
    total2, *finals = mp.interpret(clean, x, acc, out, np.int32(1))
    assert total2 == total and all(np.array_equal(a, b) for a, b in zip(refs, finals, strict=True))
    assert np.array_equal(refs[2], 2 * x.sum(axis=0))
    print("\nstateful and cleaned pure program agree bit for bit: True")


if __name__ == "__main__":
    main()

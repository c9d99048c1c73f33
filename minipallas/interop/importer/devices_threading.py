"""Passing a kernel's barrier semaphore into the regions that ask for it (``devices_kernel``).

Upstream's ``pltpu.get_barrier_semaphore()`` takes no operand: a kernel may call it anywhere,
inside ``pl.when``, a loop or a ``pl.run_scoped`` body. In minipallas the barrier semaphore is
a value of the kernel's region (``devices``: one per ``collective_id``), and regions are closed:
what a region uses from outside comes in as an operand. So once the kernel's region is built,
``thread`` rebuilds each region op whose regions use such a value into one that passes it in,
placed where the op's layout wants it (``for``: a loop constant; ``while``: a condition and a
body constant; ``cond``: a branch argument; ``run_scoped``: a captured operand), at any depth.
It builds new blocks and ops; the old ones are untouched.
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir.core import Block, Op, Value


def thread(block: Block, values: Sequence[Value]) -> Block:
    """``block`` (in which ``values`` are defined) with ``values`` passed into every region
    that uses them."""
    return _block(block, {v: v for v in values})


def _uses(block: Block, value: Value) -> bool:
    return any(
        any(v is value for v in op.operands) or any(_uses(r, value) for r in op.regions)
        for op in block.ops
    )


def _block(block: Block, env: dict[Value, Value]) -> Block:
    """``block`` with each use of a key of ``env`` replaced by its value (module doc)."""
    ops = []
    for op in block.ops:
        operands = tuple(env.get(v, v) for v in op.operands)
        used = [v for v in env if any(_uses(r, v) for r in op.regions)]
        if used:
            ops.append(_threaded(op, operands, used, [env[v] for v in used]))
        else:
            ops.append(op.replace(operands=operands) if operands != op.operands else op)
    return Block(block.params, tuple(ops), tuple(env.get(v, v) for v in block.results))


def _threaded(op: Op, operands: tuple, keys: list[Value], outer: list[Value]) -> Op:
    n, attrs = len(keys), dict(op.attrs)
    regions = []
    for k, region in enumerate(op.regions):
        inner = [Value(v.type) for v in keys]
        body = _block(region, dict(zip(keys, inner, strict=True)))
        if op.name == "for" or op.name == "while":
            at = op.param_slices(k)["consts" if op.name == "for" else
                                    ("cond_consts", "body_consts")[k]].stop  # fmt: skip
            params = (*body.params[:at], *inner, *body.params[at:])
        else:  # cond, run_scoped: branch arguments, captured operands come last
            params = (*body.params, *inner)
        regions.append(Block(params, body.ops, body.results))
    where = op.slices()
    if op.name == "for":
        at = where["consts"].stop
        operands = (*operands[:at], *outer, *operands[at:])
        attrs["num_consts"] += n
    elif op.name == "while":
        for group, count in (("body_consts", "body_nconsts"), ("cond_consts", "cond_nconsts")):
            at = where[group].stop  # the body's first: inserting it leaves the cond's in place
            operands = (*operands[:at], *outer, *operands[at:])
            attrs[count] += n
    else:
        operands = (*operands, *outer)
    return op.replace(operands=operands, attrs=attrs, regions=tuple(regions))

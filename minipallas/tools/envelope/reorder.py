"""How far a float sum or dot may move when a correct compiler picks another order: a bound
from the terms' magnitudes, as an interpreter rule.

XLA:CPU picks the order of a float sum per CPU and per shape: a dot's contracted axis is cut
into tiles (Eigen's or YNNPACK's, by size thresholds) and accumulated in 8 float32 lanes
(AVX2) or 16 (AVX-512), with FMAs or a multiply then an add; a reduction runs a sequential
loop for short rows and vector accumulators joined by a tree for long ones. No one order can
be reproduced (docs/numerics), and the random orders of ``perturb`` rule 1 estimate each element's
spread from a few draws, which an element can undershoot: the envelope measured on an Intel
Xeon called two correct kernels bugs on an AMD EPYC.

So this bound comes from the error analysis of every order instead. A sum of ``n`` terms in
an order of depth ``d`` errs by at most ``d * u * sum|x_i|`` to first order (``u``: the
accumulator's unit roundoff, 2**-24 for float32, in which every float sum here accumulates),
and, its roundings behaving as independent mean-zero errors, by about ``sqrt(d) * u *
sum|x_i|`` (Higham & Mary's probabilistic analysis); two orders differ by the sum of their
errors. ``bound(n) = min(2 * sqrt(n), 2 * (n - 1))`` in units of ``u * sum|x_i|`` (for a dot,
``x_i = a_i * b_i``): above every gap measured between sequential sums with and without FMA,
4 to 32 lanes joined by a tree, 128- and 256-term tiles and pairwise sums (at most 1.55
``sqrt(n)`` for same-signed terms, 5.5 for products of normal values, n = 16 to 1024; docs),
and never above the worst case ``2 * (n - 1)``.

``OrderBound(site)``: the interpreter with every result of one float ``reduce_sum`` or
``dot`` op (``site``) moved up by ``bound(n) * u * sum|x_i|``, elementwise, and nothing else
changed. The envelope runs it once per such op of a program (``sites``) and adds up each
run's distance from the plain interpreter's outputs: a first-order bound of what those ops'
orders can do to each output, however the program carries them there (a mean feeding a
layer norm's centring, a dot accumulated across a K grid).

A program whose kernels ran at ``optimize="fast"`` (``passes.kernel.reassociate``) may have
summed the results of one op's every execution in another order (a block's sum each grid
step, kept as partial sums and reduced once): ``OrderBound(site, runs)`` then bounds one sum of all
those
terms, ``runs`` times the op's own (``Executions`` counts the runs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.conversions import round_float
from minipallas.ir.core import Function, Op
from minipallas.ir.interpret.engine import RULES, Interpreter, Rule
from minipallas.ir.interpret.xla import numerics
from minipallas.ir.interpret.xla.numerics import widen

SUMS = ("reduce_sum", "dot")
UNIT_ROUNDOFF = 2.0**-24  # float32's: every float sum and dot accumulates in float32


def bound(n: int) -> float:
    """How far two orders of an ``n``-term sum may differ, in units of ``u * sum|x_i|``."""
    return min(2.0 * np.sqrt(n), 2.0 * (n - 1)) if n > 0 else 0.0


def sites(fn: Function) -> list[Op]:
    """The float ``reduce_sum`` and ``dot`` ops of ``fn`` and of the functions it calls."""
    return [
        op
        for f in (fn, *fn.callees())
        for op in f.walk()
        if op.name in SUMS and dtypes.is_float(op.results[0].type.dtype)
    ]


@dataclass(frozen=True)
class OrderBound:
    """The plain interpreter but for ``site`` (an op of ``sites``), whose every result is
    moved up by its order bound. Pass as ``interpret(..., perturb=OrderBound(op))``."""

    site: Op
    runs: int = 1  # the sum may join the terms of this many executions of the op

    def rules(self) -> dict[str, Rule]:
        """The interpreter's rule table with ``site`` 's rule moving its results."""
        table: dict[str, Rule] = dict(RULES)
        name = self.site.name
        plain, magnitude = RULES[name], _MAGNITUDES[name]

        def apply(interp: Interpreter, op: Op, args: Sequence[Any]) -> Sequence[Any]:
            out = plain(interp, op, args)
            if op is not self.site:
                return out
            terms, total = magnitude(op, args)
            return (_moved(out[0], bound(terms * self.runs) * UNIT_ROUNDOFF * total, op),)

        table[name] = apply
        return table


@dataclass(frozen=True)
class Executions:
    """The plain interpreter, counting in ``counts`` how many times each op of ``sites`` runs
    (by ``id``). Pass as ``interpret(..., perturb=Executions())``."""

    counts: dict[int, int] = field(default_factory=dict)

    def rules(self) -> dict[str, Rule]:
        table: dict[str, Rule] = dict(RULES)
        for name in SUMS:
            table[name] = self._counting(RULES[name])
        return table

    def _counting(self, plain: Rule) -> Rule:
        def apply(interp: Interpreter, op: Op, args: Sequence[Any]) -> Sequence[Any]:
            self.counts[id(op)] = self.counts.get(id(op), 0) + 1
            return plain(interp, op, args)

        return apply


def _moved(value: Any, by: np.ndarray, op: Op) -> np.ndarray:
    """``value`` (of ``op`` 's float result dtype) plus ``by``, rounded once to the dtype; an
    element stays where the bound is not finite or the move would overflow."""
    dtype = op.results[0].type.dtype
    value = np.asarray(value)
    wide = np.asarray(widen(value, dtype), np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        moved = round_float(wide + by, dtype)
        overflow = np.isfinite(wide) & ~np.isfinite(np.asarray(widen(moved, dtype)))
    return np.where(~np.isfinite(by) | overflow, value, moved).astype(value.dtype)


def _reduce_sum_magnitude(op: Op, args: Sequence[Any]) -> tuple[int, np.ndarray]:
    """(terms per result element, sum of the terms' magnitudes) of a ``reduce_sum``."""
    dtype, axes = op.operands[0].type.dtype, tuple(op.attrs["axes"])
    x = np.abs(np.asarray(widen(args[0], dtype), np.float64))
    terms = int(np.prod([x.shape[d] for d in axes], dtype=np.int64))
    return terms, np.add.reduce(x, axis=axes)


def _dot_magnitude(op: Op, args: Sequence[Any]) -> tuple[int, np.ndarray]:
    """(terms per result element, ``|a| @ |b|``) of a ``dot``."""
    src, dst = op.operands[0].type.dtype, op.results[0].type.dtype
    a, b = (np.abs(np.asarray(widen(numerics.convert(x, src, dst), dst), np.float64)) for x in args)
    return a.shape[-1], np.matmul(a, b)


_MAGNITUDES = {"reduce_sum": _reduce_sum_magnitude, "dot": _dot_magnitude}

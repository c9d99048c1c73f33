"""The mutant catalogue of ``mutate.py``: bugs planted in minipallas's passes and lowering.

Each ``Mutant`` names one file (a path in the repository), an exact snippet that must occur
there exactly once, and its replacement: applying it to a copy of the sources plants the bug.
Categories are those of issue 11 (off-by-one window, wrong reduction axis, dropped write-back,
swapped operands, wrong rounding dtype, constant changed ~1e-6 relative) and a few more that
matter for a state-discharging compiler (wrong comparison, dropped clamp, add vs set,
transpose permutation, select branch order, wrong constant).

The reference interpreter (``ir/interpret``) is the oracle and is never mutated. A mutant that
cannot change what any program computes is marked ``equivalent`` with the reason; it is left out of
the kill rate's denominator. A mutant that changes programs no upstream jaxpr imports to (so no
corpus case can reach it; only minipallas's own front end and kernels do) is marked ``unreachable``
with the reason: it stays in the denominator, a survivor if it survives. The kill check's front-end
stage (``minipallas/tools/corpora/frontend_checks.py``) is there for those: each note names the
check that reaches the mutant.
"""

from __future__ import annotations

from bench.mutation.mutant import CATEGORIES, Mutant
from bench.mutation.mutants_front import FRONT_ENDS
from bench.mutation.mutants_lowering import LOWERING
from bench.mutation.mutants_passes import PASSES

__all__ = ["BY_NAME", "CATEGORIES", "MUTANTS", "Mutant"]

MUTANTS: tuple[Mutant, ...] = (*PASSES, *LOWERING, *FRONT_ENDS)

BY_NAME = {m.name: m for m in MUTANTS}

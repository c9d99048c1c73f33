"""``debug_print``: upstream's ``jax.debug.print`` as an op. It has no results and touches no
ref, but it acts outside the program (it prints), so it is declared ``observable``: no pass may
remove it, however unused its operands are.

Attributes: ``fmt``, the format string; ``names``, one per operand, ``""`` for a positional
argument (those come first) or the keyword it is passed as; ``options``, the numpy print
options upstream captured that differ from numpy's defaults (``DEFAULT_OPTIONS``), as
``(name, value)`` pairs. Printed form::

    debug_print %a, %b, fmt "a={} b={b}", names ("", "b"), options (precision 3)
"""

from __future__ import annotations

from minipallas.ir.opdef import Attrs, Regions, Types, declare, require
from minipallas.ir.opset.common import no_refs

# numpy's print options at start-up; ``options`` holds only those that differ.
DEFAULT_OPTIONS = {
    "edgeitems": 3,
    "threshold": 1000,
    "floatmode": "maxprec",
    "precision": 8,
    "suppress": False,
    "linewidth": 75,
    "nanstr": "nan",
    "infstr": "inf",
    "sign": "-",
    "legacy": False,
}


@declare("debug_print", pure=False, observable=True)
def debug_print(types: Types, attrs: Attrs, regions: Regions) -> Types:
    """Prints ``fmt`` formatted with the operands, as ``jax.debug.print`` does:
    ``debug_print %x, %i, fmt "x={x} i={}", names ("", "x")`` (positional operands first)."""
    no_refs(types, "operand")
    require(isinstance(attrs.get("fmt"), str), "attribute 'fmt' must be a string")
    names = attrs.get("names")
    require(
        isinstance(names, tuple) and len(names) == len(types),
        f"attribute 'names' must be a tuple of one string per operand ({len(types)})",
    )
    keyword = [bool(n) for n in names]
    require(keyword == sorted(keyword), f"positional operands must come first, got {names}")
    options = attrs.get("options")
    require(
        isinstance(options, tuple)
        and all(len(o) == 2 and o[0] in DEFAULT_OPTIONS for o in options),
        f"attribute 'options' must be (name, value) pairs of {', '.join(DEFAULT_OPTIONS)}",
    )
    return ()

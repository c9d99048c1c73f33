"""Pure windowed reads and writes of arrays: what state ops become after discharge.

Each takes the array, the indexer's dynamic index values, and (for writes) the new window
contents; the ``indexer`` attribute is the same as on state ops, so discharge moves it across
unchanged. The op name says which kind of indexer it holds:

- ``slice``: static integers and slices only;
- ``dynamic_slice`` / ``dynamic_update_slice``: integers and slices, some with dynamic starts.
  Dynamic starts are clamped so the window stays in bounds (``lax.dynamic_slice`` semantics);
- ``gather`` / ``scatter`` / ``scatter_add``: at least one integer-array index. Gathers clamp
  out-of-range indices; scatters drop updates to out-of-range positions. ``scatter_add`` adds
  every update, duplicates included.
"""

from __future__ import annotations

from minipallas.ir import indexing
from minipallas.ir.opdef import Attrs, OperandTypes, Regions, Types, Variadic, declare, require
from minipallas.ir.opset.common import array_operand, count_dyn, same_type, window
from minipallas.ir.syntax import Windowed
from minipallas.ir.types import ArrayType

_KIND = {
    "slice": "static",
    "dynamic_slice": "no_arrays",
    "gather": "arrays",
    "dynamic_update_slice": "no_arrays",
    "scatter": "arrays",
    "scatter_add": "arrays",
}


def _check_kind(name: str, indexer: tuple) -> None:
    kind = _KIND[name]
    if kind == "static":
        require(
            indexing.is_static(indexer),
            "slice takes static indices only; use dynamic_slice for dynamic ones",
        )
    elif kind == "no_arrays":
        require(
            not indexing.has_arrays(indexer),
            f"{name} cannot take integer-array indices; use gather/scatter",
        )
    else:
        require(indexing.has_arrays(indexer), f"{name} needs an integer-array index")


def _read_rule(name: str):
    def rule(types: OperandTypes, attrs: Attrs, regions: Regions) -> Types:
        n = count_dyn(attrs)
        require(len(types) == 1 + n, f"expected {1 + n} operands, got {len(types)}")
        x = array_operand(types.one("x"), 0)
        _check_kind(name, attrs["indexer"])
        return (ArrayType(window(x.shape, attrs, types.group("indices")), x.dtype),)

    rule.__doc__ = f"Read a window of an array: ``%w = {name} %x[...] : f32[8]``."
    return rule


def _write_rule(name: str):
    def rule(types: OperandTypes, attrs: Attrs, regions: Regions) -> Types:
        n = count_dyn(attrs)
        require(len(types) == 2 + n, f"expected {2 + n} operands, got {len(types)}")
        x = array_operand(types.one("x"), 0)
        _check_kind(name, attrs["indexer"])
        win = ArrayType(window(x.shape, attrs, types.group("indices")), x.dtype)
        same_type(types.one("update"), win, "update")
        if name == "scatter_add":
            require(x.dtype != "bool", "cannot accumulate bools")
        return (x,)

    rule.__doc__ = f"A copy of an array with a window replaced: ``%y = {name} %x[...], %w``."
    return rule


for _name in ("slice", "dynamic_slice", "gather"):
    declare(_name, operands=("x", Variadic("indices")), syntax=Windowed(0))(_read_rule(_name))
for _name in ("dynamic_update_slice", "scatter", "scatter_add"):
    _operands = ("x", Variadic("indices"), "update")
    declare(_name, operands=_operands, syntax=Windowed(1))(_write_rule(_name))


def read_op_for(indexer: tuple) -> str:
    """The pure read op that holds ``indexer``."""
    if indexing.has_arrays(indexer):
        return "gather"
    return "slice" if indexing.is_static(indexer) else "dynamic_slice"


def write_op_for(indexer: tuple, accumulate: bool = False) -> str:
    """The pure write op that holds ``indexer`` (``accumulate`` only matters for arrays)."""
    if indexing.has_arrays(indexer):
        return "scatter_add" if accumulate else "scatter"
    return "dynamic_update_slice"

"""The lowering context and the rule table: how a pure minipallas function becomes StableHLO.

Lowering is an interpreter over the IR (autodidax's ``jaxpr_subcomp``): an environment maps each
minipallas ``Value`` to the MLIR value that holds it, and each op is handed to the rule
registered for its name, which emits MLIR ops at the current insertion point and returns the
op's results. A rule file per op family (``rules/``) registers its rules with ``@rule``; an op
without a rule is an error naming it.
The block walk is ``EmitterContext.lower_block`` (``minipallas.lowering.emitter``).

Functions are emitted as ``func.func``: the entry one public as ``@main`` (what XLA runs), each
callee once, private, on its first ``call``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from minipallas.ir.core import Function, Op
from minipallas.ir.errors import PassError
from minipallas.ir.opdef import OPS
from minipallas.ir.rules import RuleTable
from minipallas.ir.types import RefType, Type
from minipallas.lowering.compat.jaxlib_shim import func, ir, make_context
from minipallas.lowering.emitter import EmitterContext
from minipallas.lowering.stablehlo.emit import tensor_type


class Rule(Protocol):
    """Lowers one op: emits MLIR at the current insertion point, returns one value per result.

    ``args`` are the MLIR values of ``op.operands``, in order. The MLIR location is already set
    to the op's source location.
    """

    def __call__(self, ctx: LoweringContext, op: Op, *args: ir.Value) -> Sequence[ir.Value]: ...


RULES: RuleTable[Rule] = RuleTable("StableHLO rule")
rule = RULES.register


class LoweringContext(EmitterContext):
    """One lowering in progress: the MLIR module being built and the functions emitted so far."""

    rules = RULES
    target = "StableHLO"

    def __init__(self, host_callbacks: list | None = None) -> None:
        super().__init__()
        self.host_callbacks = host_callbacks  # None: the caller cannot run callbacks
        self.mlir = make_context()
        self.module = ir.Module.create(loc=ir.Location.unknown(self.mlir))
        self._symbols: dict[int, str] = {}  # id(Function) -> its func.func symbol
        self._taken: set[str] = {"main"}

    # -- functions ----------------------------------------------------------------------------

    def lower_entry(self, fn: Function) -> None:
        """Emits ``fn`` as the public ``@main``."""
        with self.mlir, ir.Location.unknown():
            self._emit_function(fn, "main", public=True)

    def callee(self, fn: Function) -> str:
        """The symbol of ``fn``'s private ``func.func``, emitting it on first use."""
        if id(fn) not in self._symbols:
            name, k = fn.name, 0
            while name in self._taken:
                k += 1
                name = f"{fn.name}_{k}"
            self._taken.add(name)
            self._symbols[id(fn)] = name
            self._emit_function(fn, name, public=False)
        return self._symbols[id(fn)]

    def _emit_function(self, fn: Function, name: str, public: bool) -> None:
        params = [self.array_type(p.type, f"parameter of @{fn.name}") for p in fn.params]
        results = [self.array_type(t, f"result of @{fn.name}") for t in fn.result_types]
        signature = ir.FunctionType.get(params, results)
        with ir.InsertionPoint(self.module.body), ir.Location.unknown():
            op = func.FuncOp(name, signature)
            if not public:
                op.attributes["sym_visibility"] = ir.StringAttr.get("private")
            entry = op.add_entry_block()
            with ir.InsertionPoint(entry):
                func.ReturnOp(self.lower_body(fn, list(entry.arguments)))

    # -- types and errors ---------------------------------------------------------------------

    def array_type(self, t: Type, what: str) -> ir.Type:
        """The tensor type of an array; a ``Ref`` here means the program was not discharged."""
        if isinstance(t, RefType):
            raise PassError(
                f"{what} is a Ref ({t}); StableHLO has no mutable references",
                fix="discharge the function first (minipallas.lower does)",
            )
        return tensor_type(t)

    def missing_rule_fix(self, op: Op) -> str:
        opdef = OPS.get(op.name)
        if (opdef is not None and opdef.effect) or op.name.startswith("ref."):
            return "state ops must be discharged before lowering (minipallas.lower does this)"
        return "add a rule with @rule in minipallas.lowering.stablehlo"

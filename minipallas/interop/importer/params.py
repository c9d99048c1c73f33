"""How an import rule declares the parameters of its primitive: each one is honoured or refused.

A jax equation carries parameters (``eqn.params``): ``tanh[accuracy=None]``,
``dot_general[dimension_numbers=... precision=... preferred_element_type=... out_sharding=...]``.
An import rule that reads some of them and ignores the rest changes what the program means
without a word, so every rule registers with a declaration of *all* the parameters its
primitive's equations carry, each with one of three policies:

- ``READ``: the rule reads it and honours every value (sub-jaxprs, shapes, dimensions, dtypes;
  a value the rule cannot import it refuses itself, naming it);
- ``Only(values..., fix=..., upstream=...)``: the values minipallas imports (``accuracy`` only
  ``None``); any other is refused with the fix and, where upstream's own lowering refuses it
  too, upstream's message (``"Not implemented: accuracy"``); ``Only(test=..., accepted=...)``
  accepts what a predicate accepts (every sharding of a ``jit`` unspecified);
- ``NoEffect("reason")``: it cannot change the values computed (a scheduling hint such as
  ``scan``'s ``unroll``, a name, a fact for differentiation), said in words.

The declaration is given where the rule registers, ``@rule("tanh", params={"accuracy":
ACCURACY})`` (``ImportRuleTable.register``), and kept by primitive in ``RULES.params``.
Before a rule runs, ``check`` holds the equation to it: a parameter the rule did not declare
(a newer jax's, or one a rule forgot) and a value outside the accepted ones are each a
``JaxprImportError`` naming the parameter, its value and the user's line.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from minipallas.ir.errors import MiniPallasError
from minipallas.ir.rules import Named, RuleTable

R = TypeVar("R", bound=Callable[..., Any])

_SHOWN = 80  # characters of a parameter's value shown in an error


def shown(value: object) -> str:
    """A parameter's value as an error shows it: its repr, cut short."""
    text = " ".join(repr(value).split())
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


@dataclass(frozen=True)
class Read:
    """The rule reads the parameter: every value it takes means what upstream means."""


READ = Read()


@dataclass(frozen=True)
class NoEffect:
    """The parameter cannot change the values computed; ``reason`` says why in words."""

    reason: str

    def __post_init__(self) -> None:
        if not self.reason:
            raise ValueError("NoEffect needs its reason in words")


def _same(value: object, accepted: object) -> bool:
    """Equal and of one type (``False`` is not ``0``); an unorderable value is not equal."""
    if value is accepted:
        return True
    try:
        return type(value) is type(accepted) and bool(value == accepted)
    except Exception:  # an array compares elementwise: not one of the accepted values
        return False


@dataclass(frozen=True, init=False)
class Only:
    """The values minipallas imports: ``values`` (equal and of the same type) or those
    ``test`` accepts (said in words by ``accepted``). Another value is refused with ``fix``,
    and with ``upstream``, upstream's own message, where upstream's lowering refuses it too."""

    values: tuple
    fix: str
    upstream: str
    test: Callable[[object], bool] | None
    accepted: str

    def __init__(
        self,
        *values: object,
        fix: str,
        upstream: str = "",
        test: Callable[[object], bool] | None = None,
        accepted: str = "",
    ) -> None:
        if test is not None and not accepted:
            raise ValueError("Only(test=...) needs the accepted values in words (accepted=...)")
        if not values and test is None:
            raise ValueError("Only accepts no value: give the values or a test")
        for name, v in (("values", values), ("fix", fix), ("upstream", upstream),
                        ("test", test), ("accepted", accepted)):  # fmt: skip
            object.__setattr__(self, name, v)

    def admits(self, value: object) -> bool:
        return any(_same(value, v) for v in self.values) or bool(self.test and self.test(value))

    def describe(self, name: str) -> str:
        """The accepted values, as an error says them."""
        if self.accepted:
            return self.accepted
        return " or ".join(f"{name}={shown(v)}" for v in self.values)


Policy = Read | Only | NoEffect
Params = Mapping[str, Policy]

# Declarations many rules share.
ACCURACY = Only(
    None,
    upstream="Not implemented: accuracy",
    fix="drop accuracy= (minipallas computes each transcendental one way, XLA's)",
)


def whole_values(sharding: object) -> bool:
    """A sharding that places whole values: one device's, or a ``NamedSharding`` or
    ``PartitionSpec`` with no axis left unreduced (each device's partial sum) or reduced.
    Placement never changes a value (upstream's flash attention's broadcasts carry one);
    another kind of sharding is refused, as it may mean more than placement."""
    if type(sharding).__name__ == "SingleDeviceSharding":
        return True
    spec = getattr(sharding, "spec", sharding)  # a NamedSharding's, or the spec itself
    if not (hasattr(spec, "unreduced") and hasattr(spec, "reduced")):
        return False
    return not spec.unreduced and not spec.reduced


SHARDING = Only(
    None,
    test=whole_values,
    accepted="a sharding with no unreduced or reduced axis (placement only)",
    fix="drop the unreduced axes (out_sharding=, sharding=): minipallas computes whole "
    "values, and an unreduced result holds each device's partial sum",
)

# A Pallas kernel's parameters that leave its values alone (pallas_call, mpmd_map, core_map).
KERNEL_HINTS: dict[str, Policy] = {
    "cost_estimate": NoEffect("an estimate of the kernel's cost, for XLA's scheduling"),
    "metadata": NoEffect("strings carried with the compiled kernel"),
    "debug": NoEffect("whether upstream prints the kernel's jaxpr and module as it lowers it"),
    "interpret": NoEffect(
        "whether upstream runs the kernel in its interpreter; the values are the kernel's"
    ),
}


def declared(params: Mapping[str, object]) -> dict[str, Policy]:
    """A rule's declaration, checked: parameter names to policies."""
    for name, policy in params.items():
        if not isinstance(name, str) or not isinstance(policy, Read | Only | NoEffect):
            raise ValueError(
                f"parameter {name!r} is declared as {policy!r}; declare each parameter as "
                "READ, Only(...) or NoEffect('why')"
            )
    return dict(params)


ErrorMaker = Callable[..., MiniPallasError]


def check(
    primitive: str,
    policies: Mapping[str, Policy] | None,
    params: Mapping[str, Any],
    error: ErrorMaker,
) -> None:
    """Holds one equation's ``params`` to its rule's declaration; ``error(message, fix=...)``
    makes the exception (``ImportScope.error``: it carries the primitive and the user's line).
    ``policies`` None: the rule declared none (a rule registered without ``params=``)."""
    for name, value in params.items():
        policy = (policies or {}).get(name)
        if policy is None:
            raise error(
                f"minipallas does not know parameter '{name}' of '{primitive}' "
                f"(value {shown(value)}), so it cannot tell whether it changes the values",
                fix="this is a jax newer than the importer's rules or a rule that forgot it; "
                "please report it with the program. A rule of one's own declares each "
                f"parameter: @rule('{primitive}', params={{'{name}': READ}}) "
                "(minipallas.interop.importer.params)",
            )
        if isinstance(policy, Only) and not policy.admits(value):
            upstream = (
                f" (upstream's lowering refuses it too: {policy.upstream})"
                if policy.upstream
                else ""
            )
            raise error(
                f"'{primitive}' with {name}={shown(value)} cannot be imported: minipallas "
                f"imports {policy.describe(name)} only{upstream}",
                fix=policy.fix,
            )


class ImportRuleTable(RuleTable[R], Generic[R]):
    """The importer's rule tables: a ``RuleTable`` whose ``register`` also takes the rule's
    parameter declaration, ``params``, kept by primitive in ``self.params``.

    A rule registered without one (``params`` None) declares nothing: an equation of its
    primitive that carries any parameter is refused when imported, and the importer's tests
    refuse a rule of its own without a declaration (``tests/interop/test_import_params.py``).
    """

    def __init__(self, what: str, known: Callable[[], Collection[str]], kind: str) -> None:
        super().__init__(what, known, kind)
        self.params: dict[str, dict[str, Policy]] = {}

    def register(
        self, *keys: str | Named, params: Mapping[str, Policy] | None = None
    ) -> Callable[[R], R]:
        """Registers the decorated rule for each of ``keys`` (``RuleTable.register``) with
        ``params``, its declaration of every parameter of those primitives."""
        add = super().register(*keys)
        policies = None if params is None else declared(params)
        names = [k if isinstance(k, str) else k.name for k in keys]

        def add_declared(rule: R) -> R:
            add(rule)
            if policies is not None:
                for name in names:
                    self.params[name] = policies
            return rule

        return add_declared

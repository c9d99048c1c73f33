"""What the sampler's statements share: a body's scope of variables, and the small random
shapes they draw. It sits below ``sampler``, ``state`` and ``regions``: the sampler's menu holds
the state and region statements, which build on these, so none of them imports the sampler
(``Sampler`` appears in their annotations only).
"""

from __future__ import annotations

from minipallas.ir.types import ArrayType, Type
from minipallas.tools.generate.choices import Choices
from minipallas.tools.generate.program import Body, Var


class SampleScope:
    """The variables one body defines, filed for quick picking, and what it may write."""

    __slots__ = (
        "parent", "body", "depth", "arrays", "all_arrays", "refs", "roots", "readonly", "windows"
    )  # fmt: skip

    def __init__(
        self, parent: SampleScope | None, body: Body, readonly: frozenset[Var] = frozenset()
    ) -> None:
        self.parent = parent
        self.body = body
        self.depth = parent.depth + 1 if parent else 0
        self.arrays: dict[Type, list[Var]] = {}
        self.all_arrays: list[Var] = []
        self.refs: list[Var] = []
        self.roots: list[Var] = []  # parameters and allocations: refs no view is built from
        self.readonly = readonly  # roots this body must not write (``None`` member: none)
        self.windows: list[tuple] = []  # (ref, indexer, dyn, unique) state ops used here

    def chain(self) -> list[SampleScope]:
        scopes, s = [], self
        while s is not None:
            scopes.append(s)
            s = s.parent
        return scopes

    def add(self, v: Var) -> None:
        if isinstance(v.type, ArrayType):
            self.arrays.setdefault(v.type, []).append(v)
            self.all_arrays.append(v)


NO_WRITES = frozenset({None})  # a ``readonly`` set that forbids every write (while conditions)


BITCAST_PARTNERS = {
    "float32": ("int32", "uint32"),
    "int32": ("float32", "uint32"),
    "uint32": ("float32", "int32"),
    "bfloat16": ("float16", "int16", "uint16"),
    "float16": ("bfloat16", "int16", "uint16"),
    "int16": ("bfloat16", "float16", "uint16"),
    "uint16": ("bfloat16", "float16", "int16"),
    "int8": ("uint8",),
    "uint8": ("int8",),
}


def factor_shape(c: Choices, size: int, old: tuple[int, ...]) -> tuple[int, ...]:
    """A random shape with ``size`` elements (rank 0 to 3); ``old`` itself when size is 0."""
    if size == 0:
        return old
    factors, n, p = [], size, 2
    while n > 1:
        while n % p == 0:
            factors.append(p)
            n //= p
        p += 1
    dims = [1] * c.integer(1 if size > 1 else 0, 3)
    for f in factors:
        dims[c.integer(0, len(dims) - 1)] *= f
    return tuple(dims)


def permutation(c: Choices, n: int) -> list[int]:
    perm = list(range(n))
    for i in range(n - 1, 0, -1):
        j = c.integer(0, i)
        perm[i], perm[j] = perm[j], perm[i]
    return perm

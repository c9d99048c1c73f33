"""Random collective kernels: programs that share scratch and meet at barriers (issue 15).

A ``CollectiveSpec`` is plain data: a grid ``(groups, n)`` named ``("y", "x")``, each program
with one ``(1, width)`` row of the input and the output; a shared ``(n, width)`` buffer along
``"x"``, with one row more; and 1-3 epochs. In each epoch every program computes a value from
what it keeps (an elementwise op), writes it to the shared row a permutation assigns it, and
the epoch's *leader*, if it has one, also writes its negation into the extra row under
``when(i == leader)`` (a write only one program makes); all meet at a barrier, then each reads
a row (any written one: a read after the barrier races with no write) and keeps its
difference with the value it wrote; a second barrier closes the epoch. So the kernel is race-free
by construction, whatever the draws. ``plant`` drops the first barrier and makes each program
read the row its successor wrote: a race a correct simulator must report.

With ``semaphores``, the first barrier of each epoch is a handoff instead: the writer of a row
signals that row's semaphore of the epoch (the leader its extra row's too), and a reader waits on
the semaphore of the row it reads, keeping the count (several may read one row). Planted, the
first epoch's waits are dropped.

Decisions come from a ``Choices`` (hypothesis draws in tests, ``random.Random`` in campaigns).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import minipallas as mp
import minipallas.numpy as mnp
from minipallas.frontend.refs import TracedRef
from minipallas.kernels.pallas_call import PallasCall
from minipallas.tools.generate.choices import Choices
from minipallas.tpu import VMEM, SemaphoreType

OPS = ("double", "add_one", "tanh", "negate")


@dataclass(frozen=True)
class Epoch:
    op: str
    writes: tuple[int, ...]  # program i writes shared row writes[i] (a permutation)
    reads: tuple[int, ...]  # then reads row reads[i] (row n: the leader's)
    leader: int | None = None  # the program that also writes row n, under a condition


@dataclass(frozen=True)
class CollectiveSpec:
    groups: int
    n: int
    width: int
    epochs: tuple[Epoch, ...]
    plant: bool = False
    semaphores: bool = False

    @property
    def rows(self) -> int:
        return self.groups * self.n


def draw_collective(c: Choices, plant: bool = False, semaphores: bool = False) -> CollectiveSpec:
    n = c.integer(2, 5)
    epochs = []
    for e in range(c.integer(1, 3)):
        writes = _permutation(c, n)
        leader = c.integer(0, n - 1) if c.chance(0.5) else None
        last = n if leader is not None else n - 1
        reads = tuple(c.integer(0, last) for _ in range(n))
        if plant and e == 0:
            reads = tuple(writes[(i + 1) % n] for i in range(n))
        epochs.append(Epoch(c.pick(OPS), writes, reads, leader))
    return CollectiveSpec(c.integer(1, 2), n, c.pick((8, 128)), tuple(epochs), plant, semaphores)


def collective_call(spec: CollectiveSpec) -> PallasCall:
    """The spec as ``pallas_call(..., collectives="simulate")``."""
    n = spec.n

    def pick(table: tuple[int, ...], i: object) -> object:
        value = mnp.int32(table[0])
        for k in range(1, n):
            value = mnp.where(i == k, mnp.int32(table[k]), value)
        return value

    def kernel(x_ref: TracedRef, o_ref: TracedRef) -> None:
        def body(shared: TracedRef, *sems: TracedRef) -> None:
            i = mp.axis_index("x")
            kept = x_ref[...]
            for e, epoch in enumerate(spec.epochs):
                new = _apply(epoch.op, kept)
                row = pick(epoch.writes, i)
                shared[mp.ds(row, 1), :] = new
                if sems:
                    mp.semaphore_signal(sems[0].at[e, row])
                if epoch.leader is not None:

                    @mp.when(i == epoch.leader)
                    def _(new: object = new, e: int = e) -> None:
                        shared[mp.ds(n, 1), :] = -new
                        if sems:
                            mp.semaphore_signal(sems[0].at[e, n])

                read = pick(epoch.reads, i)
                if not (spec.plant and e == 0):
                    if sems:
                        mp.semaphore_wait(sems[0].at[e, read], 1, decrement=False)
                    else:
                        mp.barrier("x")
                kept = shared[mp.ds(read, 1), :] - new
                mp.barrier("x")
            o_ref[...] = kept

        scratch = [VMEM((n + 1, spec.width), mnp.float32)]
        if spec.semaphores:
            scratch.append(SemaphoreType.REGULAR((len(spec.epochs), n + 1)))
        mp.run_scoped(body, *scratch, collective_axes=("x",))

    row = mp.BlockSpec((1, spec.width), lambda j, i: (j * n + i, 0))
    return mp.pallas_call(
        kernel,
        mp.ArrayType((spec.rows, spec.width), mnp.float32),
        grid=(spec.groups, n),
        in_specs=[row],
        out_specs=row,
        grid_names=("y", "x"),
        collectives="simulate",
        name="collective",
    )


def collective_inputs(spec: CollectiveSpec, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((spec.rows, spec.width)).astype(np.float32)


def _apply(op: str, x: object) -> object:
    if op == "double":
        return x * 2.0
    if op == "add_one":
        return x + 1.0
    if op == "tanh":
        return mnp.tanh(x)
    return -x


def _permutation(c: Choices, n: int) -> tuple[int, ...]:
    items = list(range(n))
    for k in range(n - 1, 0, -1):  # Fisher-Yates, one draw a step
        j = c.integer(0, k)
        items[k], items[j] = items[j], items[k]
    return tuple(items)

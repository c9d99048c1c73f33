"""Pass-directed kernels: a kernel campaign's next kernel, drawn so a pass under test rewrites it.

Plain random kernels rarely hold what one pass rewrites: a pass that fires on one kernel in
twenty is exercised on five of a hundred, and "no disagreements" then says little. Directed at
some passes of a pipeline (``fuzz.targeted_passes``), ``Director.next`` draws a kernel so:

1. draw up to ``CANDIDATES`` specs, each fresh or, once a targeted pass has fired on a
   kernel, every other one a mutation of such a kernel (its recorded decisions replayed, each
   drawn afresh with chance ``MUTATION``: ``Replay``); once ``GIVE_UP`` were drawn and none
   fired, ``HOPELESS`` (the campaign then runs near plain generation's speed, and its summary
   says the pass was never exercised);
2. trace each in minipallas (milliseconds; upstream is not asked) and run the pipeline on it
   (``user_passes.pipeline_texts``);
3. take the first on which a targeted pass changes the kernel (for a pass applying the
   ``@pattern`` rewrites of a ``--load`` file, such as ``cleanup``: on which one of those
   rewrites an op), kept for step 1; failing that, the one holding the most of the op names
   the passes name (``user_passes.pass_targets``); failing that, the first.

Undirected, it draws one spec as the campaigns always did (``RandomChoices``), so a seed's
kernels stay what they were.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from minipallas.ir.errors import MiniPallasError
from minipallas.tools.generate.choices import Choices, RandomChoices
from minipallas.tools.generate.kernels import KernelSpec, kernel_inputs, minipallas_call
from minipallas.tools.user_passes import (
    REWRITES,
    PassCoverage,
    applies_patterns,
    pass_targets,
    pipeline_texts,
)

CANDIDATES = 32  # specs drawn for one kernel, at most
MUTATION = 0.1  # the chance that a replayed decision is drawn afresh
POOL = 16  # kernels a targeted pass fired on, kept to mutate (the latest)
GIVE_UP, HOPELESS = 4 * CANDIDATES, 4  # after GIVE_UP candidates none fired on, HOPELESS each

Draw = Callable[[Choices, Choices], KernelSpec]  # (the kernel's choices, its parameters') -> spec


class Replay(Choices):
    """Decisions from ``rng``, recorded in ``drawn``; given ``recorded`` decisions, those are
    replayed instead, each drawn afresh with chance ``mutation`` or where it no longer fits
    its range. Fresh decisions take from ``rng`` what ``RandomChoices`` takes: a pass that
    fires on every kernel is given the kernels plain generation draws."""

    def __init__(
        self, rng: random.Random, recorded: Sequence[int] = (), mutation: float = 0.0
    ) -> None:
        self.rng, self.recorded, self.mutation = rng, recorded, mutation
        self.drawn: list[int] = []

    def integer(self, lo: int, hi: int) -> int:
        return self._decide(lo, hi, lambda: self.rng.randint(lo, hi))

    def chance(self, p: float) -> bool:
        return bool(self._decide(0, 1, lambda: int(self.rng.random() < p)))

    def _decide(self, lo: int, hi: int, fresh: Callable[[], int]) -> int:
        old = self.recorded[len(self.drawn)] if len(self.drawn) < len(self.recorded) else None
        mutate = old is None or not lo <= old <= hi or self.rng.random() < self.mutation
        self.drawn.append(fresh() if mutate else old)
        return self.drawn[-1]


@dataclass
class Drawn:
    """A kernel of the campaign: its spec and, when the director traced it, the kernel's text
    before the pipeline and after each pass (``PassCoverage.record``'s; empty: minipallas
    refuses it)."""

    spec: KernelSpec
    texts: list[str] | None = None
    ops: set[str] = field(default_factory=set)  # the op names of the traced kernel


@dataclass
class Director:
    """Draws a campaign's kernels with ``draw`` (module doc), directed at the passes
    ``targets`` (names) of ``pipeline``; no targets: plain draws."""

    draw: Draw
    pipeline: str = ""
    targets: Sequence[str] = ()
    pool: list[tuple[list[int], list[int]]] = field(default_factory=list)
    tried: int = 0  # candidates drawn

    def __post_init__(self) -> None:
        self.ops = {op for name in self.targets for op in pass_targets(name)[0]}
        self.patterned = {name for name in self.targets if applies_patterns(name)}

    def next(self, rng: random.Random, params: random.Random) -> Drawn:
        """The next kernel, its decisions from ``rng`` and its parameters' from ``params``."""
        if not self.targets:
            return Drawn(self.draw(RandomChoices(rng), RandomChoices(params)))
        rewrites = Counter(REWRITES)  # the candidates' are not the campaign's (PassCoverage)
        best: tuple[int, Drawn] | None = None
        try:
            hopeful = bool(self.pool) or self.tried < GIVE_UP
            for k in range(CANDIDATES if hopeful else HOPELESS):
                self.tried += 1
                parent = self.pool[rng.randrange(len(self.pool))] if self.pool and k % 2 else None
                c, d = (Replay(rng), Replay(params)) if parent is None else (
                    Replay(rng, parent[0], MUTATION), Replay(params, parent[1], MUTATION)
                )  # fmt: skip
                drawn = Drawn(self.draw(c, d))
                if self._fired(drawn):
                    self.pool = [*self.pool, (c.drawn, d.drawn)][-POOL:]
                    return drawn
                held = len(self.ops & drawn.ops)
                if best is None or held > best[0]:
                    best = (held, drawn)
        finally:
            REWRITES.clear()
            REWRITES.update(rewrites)
        assert best is not None
        return best[1]

    def _fired(self, drawn: Drawn) -> bool:
        """Traces ``drawn`` (its texts and ops) and says whether a targeted pass changed it,
        or, for one applying patterns, whether a pattern rewrote an op."""
        try:
            kernel = minipallas_call(drawn.spec).trace(*kernel_inputs(drawn.spec, 0))
        except MiniPallasError:
            drawn.texts = []
            return False
        before = sum(REWRITES.values())
        drawn.texts = pipeline_texts(kernel, self.pipeline)
        maps = [s.index_map for s in (*kernel.in_specs, *kernel.out_specs)]
        fns = (*kernel.body.callees(), kernel.body, *maps)
        drawn.ops = {op.name for f in fns for op in f.walk()}
        if self.patterned and sum(REWRITES.values()) != before:
            return True
        fired = PassCoverage(self.pipeline).fired(drawn.texts)
        steps = {step.partition("{")[0].strip() for step in fired}
        return bool(steps & (set(self.targets) - self.patterned))

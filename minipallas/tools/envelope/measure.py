"""The numerics envelope: how far each float output may legally move under a correct compiler.

XLA may compute a float sum, dot, contractible add, transcendental or bfloat16 chain with other bits
than the reference interpreter (``minipallas/tools/envelope/perturb.py`` lists the freedoms).
``envelope(fn, args)`` interprets ``fn`` ``SAMPLES`` times under random ``Perturbation`` s and
records, per element of each float output, the spread: the largest ulp distance of a perturbed value
from the plain interpreter's. A value another way computed is within the envelope when

    ulp_distance(interpret, value) <= SAFETY * max(spread, pooled) + floor + ulps

where ``floor`` is 1 ulp when the program has a perturbable op (else 0), ``ulps`` the case's
explicit tolerance, and NaN equals NaN. Outputs that are not floats, and outputs of programs
with nothing to perturb, stay bit for bit.

``pooled`` is for the elements whose own few samples undershoot: the envelope measured on an Intel
Xeon called two correct kernels bugs on an AMD EPYC, at one element of 98304 whose samples had
happened to stay close. Each float ``reduce_sum``/``dot`` op's order bound
(``minipallas/tools/envelope/reorder.py``: how far any order may move a sum, from its terms'
magnitudes, whatever CPU picks it) is run through the program once, and the ulps each run moves each
output element add up to that element's ``orders``: how sensitive it is to sum orders, with no
sampling luck. ``pooled = ratio * orders``, where ``ratio`` is the output's largest ``spread /
orders``: the scale of the orders' effect measured over every element, given to each in proportion
to its sensitivity. ``SAFETY * pooled`` never exceeds ``orders`` itself, so neither a spread that
other freedoms made nor a wide ratio loosens an element past its bound. An output of one element (a
grid-wide sum) has nothing to pool: its own samples judge it, as before.

A program whose kernels ran at ``optimize="fast"`` (``reassociated``) summed some terms in an
order no sample draws: each sum's bound then counts the terms of all its executions
(``reorder.OrderBound``'s ``runs``), and that bound, ``orders``, is allowed as it is.

The envelope starts from ``SAMPLES`` runs and takes ``SAMPLES`` more, up to ``MOST_SAMPLES``,
while a value lies outside it (a sequential test: only suspect values pay for more runs).
``SAMPLES``, ``MOST_SAMPLES`` and ``SAFETY`` were chosen by measurement
(``bench/numerics/envelope_rates.py``): see docs/parity.md and docs/numerics.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.core import Function
from minipallas.tools.difftest.outputs import interpret_outputs
from minipallas.tools.envelope.chips import Chip
from minipallas.tools.envelope.perturb import Perturbation, ordered, perturbable
from minipallas.tools.envelope.reorder import Executions, OrderBound, sites

SAMPLES = 8  # perturbed runs per envelope, at first
MOST_SAMPLES = 24  # at most, in rounds of SAMPLES, while some value lies outside
SAFETY = 4  # how many spreads a compiled value may stray
_FAR = np.iinfo(np.int64).max // 8  # a NaN on one side only: the element may move anywhere


def is_float(a: np.ndarray) -> bool:
    """Whether ``a`` holds floats (numpy's, or ml_dtypes' bfloat16)."""
    return a.dtype.kind == "f" or a.dtype == dtypes.to_numpy("bfloat16")


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """How many representable floats lie between ``a`` and ``b``, elementwise (same dtype)."""
    return np.abs(ordered(a) - ordered(b))


def _nan(a: np.ndarray) -> np.ndarray:
    return np.isnan(np.asarray(a).astype(np.float32))


def _moved(base: np.ndarray, other: np.ndarray) -> np.ndarray:
    """How many ulps each element of ``other`` lies from ``base`` (NaN against NaN: 0; a NaN
    on one side only: ``_FAR``)."""
    nan_b, nan_o = _nan(base), _nan(other)
    far = np.where(nan_b | nan_o, 0, ulp_distance(np.asarray(base), other))
    return np.where(nan_b != nan_o, _FAR, far)


@dataclass
class Envelope:
    """Per output of ``fn`` on ``args``: the spread in ulps around ``base`` (an int64 array;
    None for non-float outputs) over ``samples`` perturbed runs, the sum orders' bound in ulps
    (``orders``, same shapes), and the floor every element of a float output gets (1 ulp if
    ``fn`` has a perturbable op, else 0)."""

    fn: Function
    args: Sequence[Any]
    base: Sequence[np.ndarray]
    spreads: list[np.ndarray | None]
    floor: int
    seed: int = 0
    samples: int = 0
    orders: list[np.ndarray | None] | None = None
    chip: Chip | None = None  # a TPU's numerics (``chips``), else XLA:CPU's
    reassociated: bool = False  # kernels ran at optimize="fast" (module docstring)

    def allowed(self, k: int, ulps: int = 0) -> np.ndarray | None:
        """How many ulps each element of output ``k`` may differ (None: bit for bit): its
        own spread's share, or, where more, its share of the spread pooled over the output
        (module docstring)."""
        spread = self.spreads[k]
        if spread is None:
            return None
        allowed = SAFETY * spread
        orders = None if self.orders is None else self.orders[k]
        if orders is not None and orders.any():
            bounded = orders > 0
            ratio = float(np.max(spread[bounded] / orders[bounded]))
            pooled = np.minimum(orders, np.ceil(SAFETY * ratio * orders)).astype(np.int64)
            allowed = np.maximum(allowed, orders if self.reassociated else pooled)
        return np.minimum(allowed + self.floor + ulps, _FAR)

    def bound_orders(self) -> None:
        """The sum orders' bound: one run per float sum or dot op (``reorder``)."""
        self.orders = [None if s is None else np.zeros_like(s) for s in self.spreads]
        runs = Executions()
        if self.reassociated:
            interpret_outputs(self.fn, self.args, perturb=runs)
        for site in sites(self.fn):
            bound = OrderBound(site, runs.counts.get(id(site), 1))
            outputs = interpret_outputs(self.fn, self.args, perturb=bound)
            for k, (b, o) in enumerate(zip(self.base, outputs, strict=True)):
                if self.orders[k] is not None:
                    self.orders[k] = np.minimum(self.orders[k] + _moved(b, o), _FAR)

    def sample(self, count: int) -> None:
        """``count`` more perturbed runs (seeds going on from the last), widening the spreads."""
        for s in range(self.samples, self.samples + count):
            perturbation = Perturbation(self.seed + s, self.chip)
            outputs = interpret_outputs(self.fn, self.args, perturb=perturbation)
            for k, (b, o) in enumerate(zip(self.base, outputs, strict=True)):
                if self.spreads[k] is not None:
                    self.spreads[k] = np.maximum(self.spreads[k], _moved(b, o))
        self.samples += count

    def judge(self, k: int, want: np.ndarray, got: np.ndarray, ulps: int = 0) -> Distance | None:
        """How far ``got`` is from ``want`` (output ``k``'s base) against the envelope, which
        takes more samples (up to ``MOST_SAMPLES``) while ``got`` lies outside: a few samples
        can miss a rare order that XLA happens to use. None for a bit-for-bit output."""
        while True:
            allowed = self.allowed(k, ulps)
            if allowed is None:
                return None
            d = distance(want, got, allowed)
            if d.within or self.floor == 0 or self.samples >= MOST_SAMPLES:
                return d
            self.sample(SAMPLES)


def envelope(
    fn: Function,
    args: Sequence[Any],
    base: Sequence[np.ndarray],
    samples: int = SAMPLES,
    seed: int = 0,
    chip: Chip | None = None,
    reassociated: bool = False,
) -> Envelope:
    """The envelope of ``fn`` around its plain interpreter outputs ``base`` (harness order:
    results, then final ref values), from ``samples`` perturbed runs seeded ``seed``,
    ``seed + 1``, ..., and the sum orders' bound (neither when ``fn`` has nothing to
    perturb). ``chip``: the runs model that TPU's numerics instead of XLA:CPU's;
    ``reassociated``: its kernels ran at ``optimize="fast"``."""
    spreads: list[np.ndarray | None] = [
        np.zeros(np.shape(b), np.int64) if is_float(np.asarray(b)) else None for b in base
    ]
    floor = 1 if perturbable(fn, chip) else 0
    env = Envelope(fn, args, base, spreads, floor, seed, chip=chip, reassociated=reassociated)
    if env.floor:
        env.bound_orders()
        env.sample(samples)
    return env


@dataclass(frozen=True)
class Distance:
    """How far a value is from the interpreter's: the most ulps of any element, and the
    largest fraction of its allowed distance (<= 1 inside the envelope); ``at``: where the
    largest fraction is."""

    ulps: int
    fraction: float
    at: tuple[int, ...]

    @property
    def within(self) -> bool:
        return self.fraction <= 1


def distance(want: np.ndarray, got: np.ndarray, allowed: np.ndarray) -> Distance:
    """``got`` measured against ``want`` and the per-element ``allowed`` ulps (same dtype and
    shape, floats; NaN equals NaN, a NaN on one side only is infinitely far)."""
    want, got = np.asarray(want), np.asarray(got)
    nan_w, nan_g = _nan(want), _nan(got)
    far = np.where(nan_w | nan_g, 0, ulp_distance(want, got))
    with np.errstate(divide="ignore", invalid="ignore"):
        fraction = np.where(far == 0, 0.0, far / np.maximum(allowed, 0).astype(np.float64))
    fraction = np.where(nan_w != nan_g, np.inf, fraction)
    if fraction.size == 0:
        return Distance(0, 0.0, ())
    at = tuple(int(i) for i in np.unravel_index(int(np.argmax(fraction)), fraction.shape))
    return Distance(int(far.max()), float(fraction.max()), at)

"""What a correct compiler may legally change in float results, as random interpreter rules.

XLA computes some float ops with other bits than the reference interpreter and is still right: it
sums in an order chosen by shape and fusion, contracts a multiply feeding an add into one fused
multiply-add, keeps bfloat16/float16 chains in float32 (``jax.jit``'s default excess precision), and
its transcendentals differ from ours by up to ``transcendental.ULP_BOUND``. ``interpret(fn, *args,
perturb=Perturbation(seed))`` runs the program with those freedoms taken at random, in the manner of
stochastic arithmetic (CADNA, Verificarlo); the spread of a few such runs estimates how far each
output may legally move (``minipallas.tools.envelope.measure``).

Replaced rules (``Perturbation.rules``), every decision drawn from one generator seeded by
``seed`` in execution order, so a run is reproducible:

1. float ``reduce_sum`` and ``dot``: the same sum in a random order: the reduced (contracted)
   elements randomly permuted, then accumulated into ``2**j`` lanes (``j`` random; one lane is
   a sequential sum, the most lanes a pairwise tree) and the lanes added as a balanced tree, in
   float32 with FTZ (bfloat16/float16 accumulate in float32 and round once, as the plain rules
   do). A ``dot`` accumulates each lane with an FMA for a random half of its output elements;
   ``reduce_sum`` flushes its operand and result, not partial sums (only an exact
   cancellation of normal values makes a subnormal partial sum);
2. FMA contraction: a float ``add``/``sub`` with an operand that a float ``mul`` made (in the
   same block: regions are closed) is one fused multiply-add for a random half of its elements;
3. ops in ``transcendental.ULP_BOUND``: the float32 result moved by a random whole number of
   ulps in ``[-bound, bound]`` (NaN and infinity stay; finite values stay finite);
4. bfloat16/float16 elementwise arithmetic (``ELEMENTWISE``): the float32 result rounded to one
   of its two neighbouring values in the dtype, at random (random rounding), instead of the
   nearest;
5. division by a constant: a float ``div`` whose divisor a ``constant`` made (or a
   ``broadcast_in_dim`` of one) is, for a random half of its elements, the product with the
   divisor's float32 reciprocal, as XLA's algebraic simplifier rewrites it (measured: XLA:CPU
   computes a float32 ``x / 3.0`` as ``x * (1 / 3.0)`` on every element, a third of them one
   ulp from the quotient); that product may be contracted (rule 2) like a ``mul``'s, as XLA
   fuses ``x / c - m`` into ``fma(x, 1 / c, -m)``. A power-of-two divisor has an exact
   reciprocal and changes nothing.

``Perturbation(seed, chip=chips.TPU_V5E)`` models a TPU instead (``chips``): rule 3 takes the
chip's measured bounds, a float32 ``dot`` rounds its operands to bfloat16 first unless its
precision is ``HIGHEST`` for both, and

6. a ``reciprocal`` with ``approx`` is ``1 / x`` (of ``x`` itself, not the interpreter's
   bfloat16 stand-in) moved by a random relative error within the chip's ``approx_reciprocal``;
7. a ``convert`` of a bfloat16/float16 elementwise result to float32 sees, for a random half of
   its elements, that result as computed all in float32 from the chain's float32 values, a
   float32 value converted into the chain unrounded (XLA:TPU keeps bfloat16 chains in float32
   and drops the float32 -> bfloat16 -> float32 pairs around them, ``jax.jit``'s default excess
   precision: rule 4's rounding covers a chain that ends in bfloat16, not one widened at its
   end).

Everything else (data movement, integers, bitwise ops, comparisons, ``select``, ``convert``,
``max``/``min``, ``neg``/``abs``) keeps its rule and stays bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.conversions import round_float
from minipallas.ir.core import Block, Function, Op, Value
from minipallas.ir.errors import InterpretError
from minipallas.ir.interpret.engine import RULES, Interpreter, Rule
from minipallas.ir.interpret.xla import numerics, transcendental
from minipallas.ir.interpret.xla.numerics import F32, LOW_PRECISION, flush, widen
from minipallas.ir.types import ArrayType
from minipallas.tools.envelope.chips import Chip

# float ops whose bfloat16/float16 result XLA may keep in float32 (rule 4)
ELEMENTWISE = (
    "add",
    "sub",
    "mul",
    "div",
    "rem",
    "pow",
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "tanh",
    "sin",
    "cos",
    "logistic",
)
_SUMS = ("reduce_sum", "dot")
_BITS = {2: np.int16, 4: np.int32}


def ordered(x: Any) -> np.ndarray:
    """The bits of float32/bfloat16/float16 values as int64 in float order (-0 just below +0),
    so that ulp distances are differences."""
    x = np.asarray(x)
    top = np.int64(1) << (8 * x.dtype.itemsize - 1)
    i = np.array(x).view(_BITS[x.dtype.itemsize]).astype(np.int64)  # 0-d stays 0-d
    return np.where(i < 0, -1 - (i + top), i)


def _from_ordered(i: np.ndarray, dtype: np.dtype) -> np.ndarray:
    top = np.int64(1) << (8 * dtype.itemsize - 1)
    bits = np.where(i < 0, -1 - i - top, i).astype(_BITS[dtype.itemsize])
    return bits.view(dtype)


def step_ulps(x: Any, k: Any) -> np.ndarray:
    """``x`` moved by ``k`` ulps of its own dtype (elementwise; no wrap past infinity)."""
    x = np.asarray(x)
    return _from_ordered(ordered(x) + np.asarray(k, np.int64), x.dtype)


def perturbable(fn: Function, chip: Chip | None = None) -> bool:
    """Whether a perturbation (``chip``'s, if given) may change some value of ``fn`` (or of a
    function it calls)."""
    bounds = _bounds() if chip is None else chip.ulp_bound
    approx = chip is not None and chip.approx_reciprocal is not None
    return any(_block_perturbable(f.body, bounds, approx) for f in (fn, *fn.callees()))


def _block_perturbable(block: Block, bounds: dict[str, int], approx: bool) -> bool:
    products = set()
    constants: dict[Value, np.ndarray] = {}  # float constants (and their broadcasts)
    for op in block.ops:
        if any(_block_perturbable(r, bounds, approx) for r in op.regions):
            return True
        if not op.results or not dtypes.is_float(op.results[0].type.dtype):
            continue
        dtype = op.results[0].type.dtype
        if op.name in _SUMS or op.name in bounds:
            return True
        if approx and op.name == "reciprocal" and op.attrs["approx"]:
            return True
        if op.name in ELEMENTWISE and dtype in LOW_PRECISION:
            return True
        if op.name == "constant":
            constants[op.results[0]] = op.attrs["value"].array()
        elif op.name == "broadcast_in_dim" and op.operands[0] in constants:
            constants[op.results[0]] = constants[op.operands[0]]
        elif op.name == "mul":
            products.add(op.results[0])
        elif op.name == "div" and op.operands[1] in constants:
            divisor = np.asarray(constants[op.operands[1]], np.float64)
            if np.any(np.frexp(divisor)[0] != 0.5):  # not a power of two: inexact reciprocal
                return True
        elif op.name in ("add", "sub") and products.intersection(op.operands):
            return True
    return False


def _bounds() -> dict[str, int]:
    return transcendental.ULP_BOUND  # read when used: other ops get their bounds added


@dataclass(frozen=True)
class Perturbation:
    """One random choice of the freedoms a correct compiler has (see the module docstring);
    ``seed`` fixes every decision. Pass as ``interpret(..., perturb=Perturbation(seed))``."""

    seed: int
    chip: Chip | None = None  # a TPU's numerics (``chips``) instead of XLA:CPU's

    def __post_init__(self) -> None:
        if not isinstance(self.seed, int | np.integer) or self.seed < 0:
            raise InterpretError(
                f"Perturbation seed must be a non-negative int, got {self.seed!r}",
                fix="pass e.g. Perturbation(0)",
            )

    def rules(self) -> dict[str, Rule]:
        """The interpreter's rule table with the replaced rules, over fresh random state (one
        table per run, so each run with this seed makes the same decisions)."""
        state = _State(np.random.default_rng(int(self.seed)), self.chip)
        table: dict[str, Rule] = dict(RULES)
        for name in {*ELEMENTWISE, *state.bounds}:
            if name in RULES:
                table[name] = state.elementwise_rule(name, RULES[name])
        for name in ("constant", "broadcast_in_dim"):
            table[name] = state.constant_rule(RULES[name])
        table["reduce_sum"] = state.guard(RULES["reduce_sum"], state.reduce_sum)
        table["dot"] = state.guard(RULES["dot"], state.dot)
        if self.chip is not None and self.chip.approx_reciprocal is not None:
            table["reciprocal"] = state.approx_reciprocal(table["reciprocal"])
        if self.chip is not None:
            table["convert"] = state.excess(RULES["convert"])
        return table


class _State:
    """The generator, the products ``mul`` made (for FMA contraction) and the values constants
    made (for division by a constant) of one run."""

    def __init__(self, rng: np.random.Generator, chip: Chip | None = None) -> None:
        self.rng = rng
        self.chip = chip
        self.bounds = _bounds() if chip is None else chip.ulp_bound
        self.products: dict[Value, tuple[Any, Any]] = {}
        self.constants: set[Value] = set()
        self.shadows: dict[Op, Op] = {}
        self.wide: dict[Value, Any] = {}  # rule 7: low-precision results, computed in float32

    # -- wrappers ---------------------------------------------------------------------------

    def guard(self, plain: Rule, perturbed: Rule) -> Rule:
        """``perturbed`` for float results, ``plain`` otherwise."""

        def apply(interp: Interpreter, op: Op, args: Sequence[Any]) -> Sequence[Any]:
            if dtypes.is_float(op.results[0].type.dtype):
                return perturbed(interp, op, args)
            return plain(interp, op, args)

        return apply

    def constant_rule(self, plain: Rule) -> Rule:
        """``plain``, noting a float result that a constant made (a ``constant``, or a
        ``broadcast_in_dim`` of such a value): rule 5's divisors."""

        def apply(interp: Interpreter, op: Op, args: Sequence[Any]) -> Sequence[Any]:
            made = op.name == "constant" or op.operands[0] in self.constants
            if made and dtypes.is_float(op.results[0].type.dtype):
                self.constants.add(op.results[0])
            return plain(interp, op, args)

        return apply

    def elementwise_rule(self, name: str, plain: Rule) -> Rule:
        """Rules 2-5 around an elementwise op's own rule."""
        bound = self.bounds.get(name, 0)

        def apply(interp: Interpreter, op: Op, args: Sequence[Any]) -> Sequence[Any]:
            dtype = op.results[0].type.dtype
            if not dtypes.is_float(dtype):
                return plain(interp, op, args)
            low = dtype in LOW_PRECISION
            if low:  # the float32 value XLA may keep: the rule on a float32 twin of the op
                out = plain(interp, self.shadow(op), [widen(a, dtype) for a in args])[0]
            else:
                out = plain(interp, op, args)[0]
            if name == "mul":
                self.products[op.results[0]] = (args[0], args[1])
            elif name == "div" and op.operands[1] in self.constants:
                out = self.reciprocal(op, args, out, dtype)
            elif name in ("add", "sub"):
                out = self.contract(op, args, out, dtype)
            if bound:
                out = self.offset(out, bound)
            if low and self.chip is not None:  # rule 7: the chain in float32
                pairs = zip(op.operands, args, strict=True)
                wide = [self.wide.get(v, widen(a, dtype)) for v, a in pairs]
                self.wide[op.results[0]] = plain(interp, self.shadow(op), wide)[0]
            return (self.random_round(out, dtype) if low else out,)

        return apply

    def excess(self, plain: Rule) -> Rule:
        """Rule 7 around ``convert``."""

        def apply(interp: Interpreter, op: Op, args: Sequence[Any]) -> Sequence[Any]:
            out = plain(interp, op, args)
            source, target = op.operands[0].type.dtype, op.results[0].type.dtype
            if source == "float32" and target in LOW_PRECISION:  # into a chain, unrounded
                self.wide[op.results[0]] = np.asarray(args[0], F32)
                return out
            wide = self.wide.get(op.operands[0])
            if wide is None or target != "float32":
                return out
            take = self.rng.random(np.shape(wide)) < 0.5
            return (np.where(take, np.asarray(wide, F32), out[0]).astype(F32),)

        return apply

    def shadow(self, op: Op) -> Op:
        """``op`` over float32 operands and results (same attributes), made once per op."""
        twin = self.shadows.get(op)
        if twin is None:
            f32 = [Value(ArrayType(v.type.shape, "float32")) for v in (*op.operands, *op.results)]
            n = len(op.operands)
            twin = self.shadows[op] = Op(
                op.name, tuple(f32[:n]), tuple(f32[n:]), op.attrs, op.regions, op.loc
            )
        return twin

    # -- rule 2: FMA contraction ------------------------------------------------------------

    def contract(self, op: Op, args: Sequence[Any], plain: Any, dtype: str) -> Any:
        """``plain`` (float32 values of ``a + b`` / ``a - b``) with a random half of its
        elements fused with the ``mul`` that made an operand."""
        fused = None
        sign = -1 if op.name == "sub" else 1
        for k in (0, 1):
            product = self.products.get(op.operands[k])
            if product is None:
                continue
            x, y = (flush(widen(v, dtype)) for v in product)
            other = flush(widen(args[1 - k], dtype))
            if k == 0:  # x*y + (+-other)
                fused = transcendental.fma(x, y, sign * other)
            else:  # other +- x*y
                fused = transcendental.fma(sign * x, y, other)
            break
        if fused is None:
            return plain
        take = self.rng.random(np.shape(plain)) < 0.5
        return np.where(take, fused, plain).astype(F32)

    # -- rule 5: division by a constant ---------------------------------------------------------

    def reciprocal(self, op: Op, args: Sequence[Any], plain: Any, dtype: str) -> np.ndarray:
        """``plain`` (float32 values of ``x / c``) with a random half of its elements
        ``x * (1 / c)``, the reciprocal rounded to float32; the product is noted for rule 2."""
        x, c = (flush(widen(v, dtype)) for v in args)
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            inverse = flush(np.divide(F32.type(1), np.asarray(c, F32)))
            product = flush(np.multiply(np.asarray(x, F32), inverse))
        self.products[op.results[0]] = (args[0], inverse)
        take = self.rng.random(np.shape(plain)) < 0.5
        return np.where(take, product, plain).astype(F32)

    # -- rule 3: transcendental bounds --------------------------------------------------------

    def offset(self, out: Any, bound: int) -> np.ndarray:
        """float32 ``out`` moved by a random number of ulps in ``[-bound, bound]``; NaN and
        infinity stay, finite values stay finite and subnormal results are flushed."""
        out = np.asarray(out, F32)
        k = self.rng.integers(-bound, bound + 1, np.shape(out))
        limit = ordered(F32.type(np.finfo(F32).max))
        moved = _from_ordered(np.clip(ordered(out) + k, -limit - 1, limit), F32)
        return np.where(np.isfinite(out), flush(moved), out)

    # -- rule 4: random rounding --------------------------------------------------------------

    def random_round(self, value: Any, dtype: str) -> np.ndarray:
        """float32 ``value`` rounded to ``dtype``: the nearest value or, for a random half of
        the inexact elements, the neighbour on the value's other side."""
        nearest = round_float(value, dtype)
        back = widen(nearest, dtype)
        with np.errstate(invalid="ignore"):
            direction = np.sign(np.asarray(value, np.float64) - np.asarray(back, np.float64))
        inexact = (direction != 0) & np.isfinite(direction)
        if not inexact.any():
            return nearest
        take = inexact & (self.rng.random(np.shape(nearest)) < 0.5)
        other = step_ulps(nearest, np.where(take, direction, 0).astype(np.int64))
        return np.where(take, other, nearest).astype(nearest.dtype)

    # -- rule 6: the chip's approximate reciprocal ----------------------------------------------

    def approx_reciprocal(self, plain: Rule) -> Rule:
        """``plain`` (rule 3's, when the chip bounds ``reciprocal``) for an exact reciprocal;
        with ``approx`` (of float32), ``1 / x`` times ``1 + e``, ``e`` uniform in the chip's
        relative bound, per element."""
        bound = self.chip.approx_reciprocal

        def apply(interp: Interpreter, op: Op, args: Sequence[Any]) -> Sequence[Any]:
            if not op.attrs["approx"] or op.results[0].type.dtype != "float32":
                return plain(interp, op, args)  # the chip takes float32 only
            x = np.asarray(flush(np.asarray(args[0], F32)), np.float64)
            e = self.rng.uniform(-bound, bound, np.shape(x))
            with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
                out = np.asarray(np.divide(1.0, x) * (1.0 + e), F32)
            return (flush(out),)

        return apply

    # -- rule 1: sums in a random order --------------------------------------------------------

    def lanes(self, n: int) -> int:
        """A random power of two at most ``n`` (at least 1): how many partial sums to keep."""
        top = max(n, 1).bit_length() - 1
        return 1 << int(self.rng.integers(0, top + 1))

    def tree(self, lanes: list[Any]) -> Any:
        """The lanes added pairwise (a balanced tree), flushing each sum."""
        while len(lanes) > 1:
            pairs = [flush(np.add(a, b)) for a, b in zip(lanes[::2], lanes[1::2], strict=False)]
            lanes = pairs + lanes[len(pairs) * 2 :]
        return lanes[0]

    def reduce_sum(self, interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
        dtype = op.operands[0].type.dtype
        axes = tuple(op.attrs["axes"])
        x = flush(widen(np.asarray(args[0]), dtype))
        kept = [d for d in range(x.ndim) if d not in axes]
        n = int(np.prod([x.shape[d] for d in axes], dtype=np.int64))
        rows = np.transpose(x, (*kept, *axes)).reshape(*(x.shape[d] for d in kept), n)
        if n == 0:
            total = np.zeros(rows.shape[:-1], F32)
        else:
            rows = rows[..., self.rng.permutation(n)]
            k = self.lanes(n)
            pad = -n % k  # -0.0 is the exact identity of addition
            rows = np.concatenate([rows, np.full((*rows.shape[:-1], pad), -0.0, F32)], -1)
            steps = rows.reshape(*rows.shape[:-1], -1, k)
            sums = np.add.accumulate(steps, axis=-2)[..., -1, :]  # sequential per lane
            total = flush(self.tree([sums[..., j] for j in range(k)]))
        total = np.asarray(total, F32)
        return (round_float(total, dtype) if dtype in LOW_PRECISION else total,)

    def dot(self, interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
        src, dst = op.operands[0].type.dtype, op.results[0].type.dtype
        a, b = (flush(widen(numerics.convert(x, src, dst), dst)) for x in args)
        a, b = np.asarray(a, F32), np.asarray(b, F32)
        one_pass = tuple(op.attrs.get("precision", ())) != ("highest", "highest")
        if self.chip is not None and self.chip.dot_operands and src == "float32" and one_pass:
            rounded = self.chip.dot_operands  # one low-precision pass (``chips``)
            a, b = (np.asarray(widen(round_float(x, rounded), rounded), F32) for x in (a, b))
        shape = (*a.shape[:-1], b.shape[-1])
        n = a.shape[-1]
        k = self.lanes(n)
        fused = self.rng.random(shape) < 0.5
        acc: list[Any] = []
        for step, j in enumerate(self.rng.permutation(n)):
            x, y = a[..., :, j, None], b[..., None, j, :]
            if step < k:
                acc.append(flush(x * y))
                continue
            lane = step % k
            plain = flush(acc[lane] + flush(x * y))
            acc[lane] = np.where(fused, transcendental.fma(x, y, acc[lane]), plain)
        total = np.asarray(flush(self.tree(acc)) if acc else np.zeros(shape, F32), F32)
        return (round_float(total, dst) if dst in LOW_PRECISION else total,)

"""The verdicts' vocabulary: the kinds of finding (``KINDS``), the known upstream defects and
semantic differences (``KNOWN``), the mistakes in a case itself (``CASE_ERRORS``), and
``check_expect``, which holds a ``Case.expect`` to these words.

The classifier (``classify``) reads them; ``report.Case`` checks its ``expect`` with them when it
is made. This module imports nothing of the difftest but the kernel checks' ``BUG_KINDS``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from minipallas.ir.errors import MiniPallasError
from minipallas.ir.location import user_location
from minipallas.tools.difftest.checks.bug import BUG_KINDS

KINDS = (
    "agree",
    "within-envelope",
    "upstream-crash",
    "upstream-divergence",
    "semantic-difference",
    "minipallas-bug",
    "beyond-upstream",
    "upstream-hangs",
    "upstream-wrong",
    "kernel-bug",
    "pass-bug",
    "case-error",
)


@dataclass(frozen=True)
class Known:
    """A known upstream defect or semantic difference; crashes carry how to recognize them."""

    kind: str
    reason: str
    repro: str
    stages: tuple[str, ...] = ()  # upstream stages a crash happens at: trace, discharge, eval
    error: str = ""  # exception class name
    message: str = ""  # regex the message matches
    where: str = ""  # name of a jax function on the traceback


DISCHARGE = ("discharge", "eval")  # a run_scoped body is discharged when it is evaluated


def _crash(
    reason: str,
    repro: str,
    *,
    stages: tuple[str, ...] = DISCHARGE,
    error: str = "",
    message: str = "",
    where: str = "",
) -> Known:
    return Known("upstream-crash", reason, repro, stages, error, message, where)


KNOWN: dict[str, Known] = {
    "strided-slice-with-int-index": _crash(
        "discharge_state sends an indexer with a strided slice (or an integer array) down its "
        "gather path, which cannot take a static integer index (_convert_to_gather_arrays: "
        "'Invalid type of idxer')",
        "def f(r): return r[0, ::2]  # r: Ref{f32[3,4]}",
        error="ValueError",
        message=r"Invalid type of idxer",
    ),
    "transpose-view": _crash(
        "discharge_state has no rule for reading or writing through ref.transpose views",
        "def f(r): return r.transpose((1, 0))[0]  # r: Ref{f32[4,4]}",
        error="NotImplementedError",
        message=r"Unsupported transform: TransposeTransform",
    ),
    "swap-through-reshape-or-bitcast": _crash(
        "discharge_state writes through views with transform_swap_array, whose write phase "
        "handles only indexers (and whose read phase drops a reshape's or bitcast's result)",
        "def f(r): r.reshape(8)[0:2] = jnp.zeros(2)  # r: Ref{f32[2,4]}",
        message=r"Unsupported transform: (Reshape|Bitcast)Transform|Length of slice indices "
        r"must match|Too many indices",
        where="transform_swap_array",
    ),
    "addupdate-through-view": _crash(
        "discharge of addupdate handles a single indexer only: accumulating through any view "
        "fails, with 'Only single indexer is supported.' (ref.at, or several views) or, "
        "through one reshape or bitcast, by taking it for an indexer ('ReshapeTransform' "
        "object has no attribute 'indices')",
        "def f(r): ref_addupdate(r.at[1:3], (0,), 1.0)  # r: Ref{f32[4]}",
        message=r"Only single indexer is supported|Transform' object has no attribute 'indices'",
    ),
    "bitcast-view-rank-below-2": _crash(
        "ref.bitcast computes its shape for TPU sublane packing, indexing shape[-2], so a "
        "bitcast view of a 0-d or 1-d ref fails at trace time even for equal widths",
        "def f(r): return r.bitcast(jnp.int32)[0]  # r: Ref{f32[4]}",
        stages=("trace",),
        error="IndexError",
        where="bitcast",
    ),
    "pallas-strided-window": _crash(
        "discharge of Pallas load/store rejects strided slices ('Unimplemented stride support.')",
        "def f(r): return pl.load(r, (pl.ds(0, 2, 2),))  # r: Ref{f32[4]}",
        error="NotImplementedError",
        message=r"Unimplemented stride support",
    ),
    "pallas-slice-and-array-window": _crash(
        "discharge of Pallas load/store rejects a window mixing slices and integer arrays "
        "(a bare NotImplementedError)",
        "def f(r, i): return pl.load(r, (i, slice(None)))  # r: Ref{f32[4,4]}, i: i32[2]",
        error="NotImplementedError",
        message=r"^$",
    ),
    "pallas-static-int-index": _crash(
        "discharge of Pallas load/store asks every non-slice index for its shape, which a "
        "static integer index does not have ('TypedInt' object has no attribute 'shape')",
        "def f(r): return pl.load(r, (0, slice(None)))  # r: Ref{f32[2,4]}",
        error="AttributeError",
        message=r"has no attribute 'shape'",
    ),
    "gather-from-constant-value": _crash(
        "discharge indexes a ref's current value with jnp-style indexing on its gather and "
        "scatter paths (integer arrays, strided slices, Pallas array loads); when that value "
        "is a constant of the program (the ref was just overwritten with one) it is a numpy "
        "array, which cannot be indexed with tracers (TracerArrayConversionError) and has no "
        "`.at` (AttributeError)",
        "def f(r, i): r[...] = np.ones(3, np.float32); return r[i]  # i: i32[2]",
        message=r"__array__\(\) was called on traced array|object has no attribute 'at'",
    ),
    "empty-slice-at-end": _crash(
        "the indexer's bounds check rejects a static slice starting at the end of its "
        "dimension even when it is empty (numpy's x[n:n])",
        "def f(r): return r[4:4]  # r: Ref{f32[4]}",
        stages=("trace",),
        error="ValueError",
        message=r"Out of bound slice: start=(\d+), dim=\1\.",
    ),
    "empty-strided-slice": _crash(
        "discharge turns a static slice into lax.slice with limit start + (size-1)*stride + 1, "
        "which is below start for an empty slice with stride > 1",
        "def f(r): return r[:, 1:1:2]  # r: Ref{f32[2,2]}",
        error="TypeError",
        message=r"limit_indices must (be greater than or equal to start|have every element be)",
    ),
    "jit-call-with-scratch-ref": _crash(
        "inside run_scoped the scratch refs are not to be discharged, but the discharge rule "
        "of a jit call passed a scratch ref and an outer ref discharges both ('Did not ask "
        "for inval to be discharged but it was')",
        "def f(o):\n"
        "    def body(s): jax.jit(lambda r, q: q.__setitem__(0, r[1]))(s, o)\n"
        "    pl.run_scoped(body, pl.ANY((4,), f32))",
        error="ValueError",
        message=r"Did not ask for inval to be discharged",
    ),
    "while-cond-reads-written-ref": Known(
        "upstream-divergence",
        "discharge of while_loop gives the condition its own copy of every ref it reads, "
        "which the body's writes never reach: the condition keeps seeing the ref's value "
        "from before the loop (sequential execution sees every write)",
        "def f(r):\n"
        "    def cond(c): return (r[0] < 3) & (c < 5)\n"
        "    def body(c): r[0] += 1; return c + 1\n"
        "    return lax.while_loop(cond, body, 0)  # r = [0]: upstream 5 trips, sequential 3",
    ),
    "while-ref-written-by-cond-and-body": _crash(
        "discharge of while_loop refuses a ref that both the condition and the body write "
        "(upstream's own test_while_errors_if_same_ref_in_body_and_cond expects the error)",
        "def f(r):\n"
        "    def cond(i): r[...] += 1; return i < 3\n"
        "    def body(i): r[...] += 1; return i + 1\n"
        "    lax.while_loop(cond, body, 0)",
        error="NotImplementedError",
        message=r"Cannot write to the same ref in both cond and body",
    ),
    "while-cond-writes-ref": Known(
        "upstream-divergence",
        "discharge of while_loop drops the writes of a condition's last evaluation (the "
        "one that ends the loop): it evaluates the condition without keeping its writes and "
        "replays it at the start of the body, where they are kept; a condition that only "
        "accumulates (addupdate) loses all its writes, and a ref the body takes too comes out "
        "as the body's copy, which the condition's writes never reach. Sequential execution "
        "keeps the writes "
        "of every evaluation: upstream's own test_while_with_state_in_cond expects 10 and 7 "
        "where sequential execution gives 12 and 10",
        "def f(x, y, z):\n"
        "    @run_state\n"
        "    def body(x_ref):\n"
        "        def cond(i): x_ref[...] += z; return i < y\n"
        "        lax.while_loop(cond, lambda i: i + 1, 0)\n"
        "    return body(x)  # (0, 5, 2): upstream 10, sequential 12; (1, 2, 3): 7 and 10",
    ),
    "pallas-store-through-view": Known(
        "upstream-divergence",
        "discharge of a Pallas store (masked_swap) through a view writes into the view's "
        "array and returns that as the whole ref's new value: the ref comes out with the "
        "view's shape and contents",
        "def f(r, i): pl.store(r.at[:, 0], (i,), -1.0)  # r: Ref{f32[2,2]} ends up f32[2]",
    ),
    "bf16-sum-in-bf16": Known(
        "upstream-divergence",
        "XLA:CPU accumulates a bfloat16 reduce_sum (lax.reduce with lax.add) in bfloat16, "
        "rounding every partial sum; minipallas sums in float32 and rounds once (jnp.sum "
        "widens bf16 in the jaxpr itself, so only a bf16 reduce_sum in the jaxpr shows it)",
        "lax.reduce(x, bf16(0), lax.add, (0,))  # x: 64 x 256.0 then 960 x 1.0 in bf16: "
        "upstream 16384, float32 accumulation 17408",
    ),
    "uninitialized-read": Known(
        "semantic-difference",
        "the program reads scratch it never wrote, whose contents are unspecified: the two "
        "sides are not comparable there",
        "def f(o): pl.run_scoped(lambda s: o.__setitem__(..., s[...]), pl.ANY((4,), f32))",
    ),
    "negative-dynamic-index": Known(
        "semantic-difference",
        "a negative dynamic index reaching an IR op: upstream adds the dimension once "
        "(numpy style) before clamping, the op clamps it to 0 (the front end and the importer "
        "emit upstream's wrap as ops; IR written or built directly has none)",
        "def f(r, i): return r[i]  # i = -1: upstream r[n-1], minipallas r[0]",
    ),
    "gather-window-clamp": Known(
        "semantic-difference",
        "an out-of-range dynamic window in an indexer upstream discharges as a gather or "
        "scatter (one with an integer array or a strided slice): upstream clamps (reads) or "
        "drops (writes) each position start + k*stride on its own, minipallas shifts the "
        "window back inside as a whole, as upstream itself does for unstrided windows",
        "def f(r, i): return r[pl.ds(i, 2, 2)]  # r: f32[4], i = 2: upstream positions "
        "2, 4 clamped one by one: [r2, r3]; minipallas start clamped to 1: [r1, r3]",
    ),
    "nan-bit-pattern": Known(
        "semantic-difference",
        "IEEE 754 leaves the sign and payload of a NaN that arithmetic makes unspecified: "
        "x86 (and so numpy and XLA at run time) makes 0xFFC00000, XLA's constant folder "
        "0x7FC00000. NaNs compare equal, but a bitcast to an integer shows the bits",
        "def f(r): return lax.bitcast_convert_type(r[...] / r[...], jnp.int32)  "
        "# r = 0.0: folded or not",
    ),
    "masked-load-fill": Known(
        "semantic-difference",
        "a masked load without `other` reads the fill value (NaN, integer minimum, False) "
        "in masked-off lanes in minipallas, and the memory's contents upstream",
        "def f(r, m): return pl.load(r, (slice(None),), mask=m)",
    ),
}

# Upstream defects only a case that spans devices shows (upstream's TPU interpret mode on
# several devices): apart from ``KNOWN``, whose every entry has a case in the single-device
# corpus (minipallas/tools/corpora/difftest_cases.py); these have theirs in
# tests/difftest/device_verdict_cases.py
KNOWN_ON_DEVICES: dict[str, Known] = {
    "interpret-vma-mismatch": _crash(
        "upstream's TPU interpret mode evaluates a kernel that spans devices in a shard_map with "
        "check_vma=True, and mixes a device-varying value (axis_index) with an invariant one "
        "in its own index arithmetic: 'Primitive sub requires varying manual axes to match' "
        "(the message asks for an issue, and for check_vma=False meanwhile)",
        "def k(x, o, s, r): right = lax.rem(lax.axis_index('x') + 1, 4); ...  # right permute "
        "in jax.shard_map(pl.pallas_call(k, ...), check_vma=True)",
        stages=("eval",),
        error="ValueError",
        message=r"requires varying manual axes to match",
    ),
    "interpret-select-ref": _crash(
        "upstream's TPU interpret mode (jax 0.10.2) has no rule for a ref chosen with "
        "pl.select_ref (a SelectTransform): 'Unsupported transform: SelectTransform', or the "
        "transform's class as the whole message",
        "src = pl.select_ref((a_ref, b_ref), i); pltpu.make_async_remote_copy(src, ...)",
        stages=("eval",),
        error="NotImplementedError",
        message=r"SelectTransform",
    ),
    "interpret-semaphore-output": _crash(
        "upstream's TPU interpret mode cannot run a pallas_call whose output is a semaphore "
        "(out_specs in pltpu.SEMAPHORE, made by one kernel for the next): it starts every "
        "buffer at an uninitialized value, which get_uninitialized_value knows for floats and "
        "integers only ('nan + semaphore')",
        "pl.pallas_call(alloc, out_specs=pl.BlockSpec(memory_space=pltpu.SEMAPHORE), "
        "out_shape=pltpu.SemaphoreType.REGULAR(()))()",
        stages=("eval",),
        error="NotImplementedError",
        message=r"nan \+ semaphore",
        where="get_uninitialized_value",
    ),
}


# The user's mistakes in a case, which no way of either side can run: the finding's name, the
# upstream error that shows it (stage, exception class, message regex), and the fix.
@dataclass(frozen=True)
class CaseError:
    stage: str
    error: str
    message: str
    fix: str


CASE_ERRORS: dict[str, CaseError] = {
    "wrong-arity": CaseError(
        "trace",
        "TypeError",
        r"takes \d+ positional arguments? but \d+ (were|was) given|missing \d+ required "
        r"positional argument",
        "the kernel takes one ref per input and per output (then its scratch shapes), in "
        "order: give the function that many parameters, or the call that many inputs and "
        "out_shape entries",
    ),
    "no-interpret": CaseError(
        "eval",
        "ValueError",
        r"Only interpret mode is supported on CPU backend",
        "the difftest runs upstream on the CPU, where a pallas_call runs only in interpret "
        "mode: pass interpret=True to pallas_call (or pl.kernel)",
    ),
    "case-not-found": CaseError(
        "load",
        "CaseNotFound",
        r"defines no case|was not made in a file",
        "upstream runs a case that spans devices in a worker process, which finds the case by "
        "name in the file that made it: define the Case at module level of a file (or in a "
        "list or tuple there), under a name no other case of the file has",
    ),
}
# the kernel bugs a simulation of a mesh kernel's cores finds (``collectives="simulate"``)
SIMULATED_BUGS = {"RaceError": "race", "DeadlockError": "deadlock"}
# what else the simulator raises (an ``InterpretError``) that is a kernel's bug, by its message
# (the checks' kinds, ``checks.BUG_KINDS``): a copy the kernel ends with in flight halts the
# chip (``dma``); a semaphore not back at 0 when the kernel ends, the next kernel inherits
SIMULATED_MESSAGES = (
    (r"never waited for", "dma"),
    (r"semaphore buffer holds -?\d+ when every program has finished", "semaphore"),
)
# a kernel whose results differ between the simulator's schedules with no race named
SCHEDULE_DEPENDENT = "schedule-dependent"
OTHER_NAMES = (
    *("agree", "same-rejection", "collectives simulated", "unrecognized divergence"),
    *("upstream disagrees with the import", "import disagrees with upstream"),
    *("reference disagrees with upstream and import", "upstream, import and reference all differ"),
    *("varies between runs", "disagrees with every minipallas way"),  # upstream-wrong's names
)
# the names ``classify`` makes of a way, a stage or a pass: "compile disagrees with interpret"
# (what a planted bug gives), "xla crash at compile", "pass my-pass", "unrecognized eval crash"
NAMED_FORMS = (
    re.compile(r"[\w-]+ disagrees with interpret"),
    re.compile(r"[\w-]+ crash at \w+"),
    re.compile(r"pass (pattern )?\S+"),  # a pass, or a loaded @pattern (user_pipeline.blame)
    re.compile(r"unrecognized \w+ crash"),
)


def verdicts() -> list[str]:
    """Every word a ``Case.expect`` may hold: a kind, or the name of a finding of one."""
    names = (*KINDS, *OTHER_NAMES, *KNOWN, *KNOWN_ON_DEVICES, *CASE_ERRORS, *BUG_KINDS,
             *SIMULATED_BUGS.values(), SCHEDULE_DEPENDENT)  # fmt: skip
    return list(dict.fromkeys(names))


def check_expect(expect: str | None, case: str) -> None:
    """Raises a ``MiniPallasError`` naming the valid words unless ``expect`` is one (or a
    finding name of one of the ``NAMED_FORMS``)."""
    if expect is None or expect in verdicts() or any(f.fullmatch(expect) for f in NAMED_FORMS):
        return
    raise MiniPallasError(
        f"case {case!r}: expect={expect!r} is not a verdict the difftest gives",
        op="Case",
        loc=user_location(),
        fix=f"use one of {', '.join(verdicts())}, a name such as 'compile disagrees with "
        "interpret' or 'pass NAME' (or None: agreement)",
    )

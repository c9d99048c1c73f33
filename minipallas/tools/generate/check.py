"""The discharge property, as one function the tests and the fuzzer share.

``interpret(fn, *refs)`` (refs mutated in place) must equal ``interpret(discharge(fn), *arrays)``
(original results, then the final value of each discharged ref, in parameter order) bit for
bit, for full and partial discharge, with and without cleanup; every program a pass produces
must pass the verifier. Bitwise means the bytes agree, except that any NaN equals any NaN.

``check_pipeline`` checks a user's pipeline the same way: run after full discharge and
cleanup, it must keep every output's bits; a failure names the pass (``user_passes.Blame``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.core import Function
from minipallas.ir.interpret import interpret
from minipallas.ir.types import ArrayType, RefType
from minipallas.ir.verifier import verify
from minipallas.passes.cleanup import cleanup
from minipallas.passes.discharge import discharge
from minipallas.passes.pipeline import run as run_pipeline
from minipallas.tools.user_passes import Blame, first_bad_pass

STATE_OPS = frozenset(
    {"get", "swap", "addupdate", "load", "store", "ref.at", "ref.reshape", "ref.bitcast"}
    | {"ref.transpose", "run_scoped"}
)


class PropertyFailure(Exception):
    """The property failed; ``stage`` says where: original, discharge, cleanup, verify,
    interpret or compare."""

    def __init__(self, stage: str, message: str) -> None:
        super().__init__(f"[{stage}] {message}")
        self.stage = stage
        self.mode: tuple[bool | list[bool], bool] | None = None  # (should_discharge, cleanup)
        self.blame: Blame | None = None  # check_pipeline's: the pass, its IR before and after


def same_bits(a: object, b: object) -> bool:
    """Equal shape, dtype and bytes; NaNs compare equal to each other whatever their payload."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind == "f" or a.dtype == dtypes.to_numpy("bfloat16"):
        nan_a, nan_b = np.isnan(a), np.isnan(b)
        if not np.array_equal(nan_a, nan_b):
            return False
        a, b = np.where(nan_a, 0, a).astype(a.dtype), np.where(nan_b, 0, b).astype(b.dtype)
    return np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


def run(fn: Function, args: Sequence[np.ndarray]) -> tuple[tuple, list[np.ndarray]]:
    """Interprets ``fn`` on copies of ``args``: (results, every argument's final value)."""

    copies = [np.array(a, copy=True) for a in args]
    with np.errstate(all="ignore"):
        results = interpret(fn, *copies)
    return tuple(results), copies


def _stage(stage: str, thunk):  # noqa: ANN001, ANN202 - internal
    try:
        return thunk()
    except PropertyFailure:
        raise
    except Exception as e:  # every crash of a pass is a finding, whatever its class
        raise PropertyFailure(stage, f"{type(e).__name__}: {e}") from e


def check_discharge(
    fn: Function,
    args: Sequence[np.ndarray],
    should_discharge: bool | Sequence[bool] = True,
    clean: bool = False,
    expected: tuple[tuple, list[np.ndarray]] | None = None,
) -> Function:
    """Checks the property for one program and mode; returns the (cleaned) discharged program.

    ``expected`` is ``run(fn, args)`` when the caller already has it. Raises
    ``PropertyFailure`` naming the stage that failed.
    """

    if expected is None:
        _stage("original", lambda: verify(fn))
        expected = _stage("original", lambda: run(fn, args))
    results, finals = expected
    mask = (
        [should_discharge] * len(fn.params)
        if isinstance(should_discharge, bool)
        else list(should_discharge)
    )
    out = _stage("discharge", lambda: discharge(fn, mask))
    _stage("verify", lambda: verify(out))
    if clean:
        out = _stage("cleanup", lambda: cleanup(out))
        _stage("verify", lambda: verify(out))

    gone = [
        i for i, t in enumerate(fn.param_types) if isinstance(t, RefType) and mask[i]
    ]  # discharged ref parameters
    want_types = [*fn.result_types, *(fn.param_types[i].value_type for i in gone)]
    for i in gone:
        if not isinstance(out.param_types[i], ArrayType):
            raise PropertyFailure("discharge", f"parameter {i} is still {out.param_types[i]}")
    if list(out.result_types) != want_types:
        raise PropertyFailure(
            "discharge",
            f"result types {[str(t) for t in out.result_types]}, "
            f"expected {[str(t) for t in want_types]}",
        )
    if all(mask) and any(op.name in STATE_OPS for f in (out, *out.callees()) for op in f.walk()):
        raise PropertyFailure("discharge", "a state op is left after full discharge")

    got, got_args = _stage("interpret", lambda: run(out, args))
    want = [*results, *(finals[i] for i in gone)]
    for k, (w, g) in enumerate(zip(want, got, strict=True)):
        if not same_bits(w, g):
            what = (
                f"result {k}"
                if k < len(results)
                else f"final value of ref {gone[k - len(results)]}"
            )
            raise PropertyFailure("compare", f"{what}: expected\n{w!r}\ngot\n{g!r}")
    for i, t in enumerate(fn.param_types):
        if isinstance(t, RefType) and not mask[i] and not same_bits(finals[i], got_args[i]):
            raise PropertyFailure(
                "compare",
                f"kept ref {i}: expected\n{finals[i]!r}\ngot\n{got_args[i]!r}",
            )
    return out


def check_all_modes(
    fn: Function, args: Sequence[np.ndarray], partial: Sequence[bool]
) -> list[Function]:
    """Full and ``partial`` discharge, each with and without cleanup; returns the four outputs."""

    _stage("original", lambda: verify(fn))
    expected = _stage("original", lambda: run(fn, args))
    outs = []
    for mode in (True, list(partial)):
        for clean in (False, True):
            try:
                outs.append(check_discharge(fn, args, mode, clean, expected))
            except PropertyFailure as e:
                e.mode = (mode, clean)
                e.add_note(f"mode: should_discharge={mode}, cleanup={clean}")
                raise
    return outs


def check_pipeline(
    fn: Function, args: Sequence[np.ndarray], pipeline: str, texts: list[str] | None = None
) -> Function:
    """Checks that ``pipeline``, run on ``fn`` fully discharged and cleaned up, keeps the bits
    of every output (results, then each ref's final value) and verifies after each pass;
    returns its result. A failure is a ``PropertyFailure`` at stage ``pass NAME`` whose
    ``blame`` names the pass and holds its IR before and after. ``texts``, when given, gets
    the IR before the pipeline and after each of its passes, as far as they ran (what
    ``user_passes.PassCoverage`` counts)."""
    _stage("original", lambda: verify(fn))
    results, finals = _stage("original", lambda: run(fn, args))
    want = [*results, *(finals[i] for i, t in enumerate(fn.param_types) if isinstance(t, RefType))]
    base = _stage("discharge", lambda: cleanup(discharge(fn)))

    made: dict[str, Function] = {}  # each prefix of the pipeline is run once

    def program(prefix: str) -> Function:
        if prefix not in made:
            made[prefix] = run_pipeline(base, prefix, verify=True)
            if texts is not None:
                texts.append(str(made[prefix]))
        return made[prefix]

    def differs(want: Sequence[np.ndarray], got: Sequence[np.ndarray]) -> str | None:
        if len(got) != len(want):
            return f"{len(got)} outputs, expected {len(want)}"
        bad = next(
            (k for k, (w, g) in enumerate(zip(want, got, strict=True)) if not same_bits(w, g)), None
        )
        return None if bad is None else f"output {bad}: expected\n{want[bad]!r}\ngot\n{got[bad]!r}"

    blame = first_bad_pass(
        pipeline, lambda p: run(program(p), args)[0], lambda p: str(program(p)), differs, want
    )
    if blame is not None:
        error = PropertyFailure(f"pass {blame.name}", str(blame))
        error.blame = blame
        raise error
    return program(pipeline)

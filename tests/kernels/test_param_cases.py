"""Issue 46's parameter corpus (``param_cases.py``) without a chip: for every one-parameter
kernel, what must hold on the chip between upstream (``jax.jit(f)``) and minipallas
(``jax.jit(on_tpu(f))``) is checked as far as a machine without one can:

- libtpu compiles both sides ahead of time for a v5e: both compile (``same-bits``), both refuse
  with upstream's message (``both-refuse``), or only minipallas compiles (``beyond-upstream``);
- for a ``same-bits`` case whose parameter lives in the custom call (compiler params, its own
  fields) or shows in the module (``case.shows``), minipallas's custom call carries every field
  upstream's does (the backend config less the module: compiler params, cost estimate; the
  name, the metadata, the aliases), and its Mosaic module holds the text upstream's shows;
- on the CPU, minipallas's import of the program (``from_jaxpr``) gives upstream's interpret
  mode's bits (a case upstream refuses on the chip may be refused here too), and the case's
  float64 reference agrees with interpret mode (so that the chip script's errors mean something).

A check that fails because the work of issue 46 has not landed yet is in ``NOT_YET_HONOURED``
(strict: one that passes fails the run, so the list only shrinks). ``bench/chip/tpu_params.py``
runs the same cases on a TPU.
"""

from __future__ import annotations

import base64
import json
from collections import Counter

import jax
import numpy as np
import pytest
from kernel_helpers import as_tuple, assert_same_bits
from test_tpu_custom_call import decoded

import minipallas as mp
from minipallas.interop import from_jaxpr
from minipallas.lowering.compat.jaxlib_shim import ir
from minipallas.lowering.runtime import libtpu
from minipallas.lowering.tpu.aot import MosaicCompileError
from minipallas.platforms.mesh_tpu import on_tpu
from minipallas.tools.corpora.param_cases import PARAM_CASES
from minipallas.tools.corpora.param_op_cases import BEYOND_UPSTREAM, BOTH_REFUSE, SAME_BITS

# (check, case) -> why minipallas does not yet do what upstream does (issue 46): strict, so a
# fix that lands makes its entries fail until they are removed here
NOT_YET_HONOURED: dict[tuple[str, str], str] = {}

needs_libtpu = pytest.mark.skipif(
    not libtpu.libtpu_available(), reason="libtpu is not installed (make test installs it)"
)


# Cases whose module minipallas emits and Mosaic refuses, as upstream's: tests/mosaic_compile.py
# compiles every module a test emits after it, and raises that refusal.
REFUSED_BY_MOSAIC = {"block_element_low_padding"}


def checked(check: str, cases: list) -> list:
    """``cases`` as pytest params, those in ``NOT_YET_HONOURED`` for ``check`` marked xfail, and
    in the compile check those of ``REFUSED_BY_MOSAIC`` marked as the conftest asks."""
    params = []
    for case in cases:
        reason = NOT_YET_HONOURED.get((check, case.name))
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        if check == "compile" and case.name in REFUSED_BY_MOSAIC:
            why = "Mosaic refuses minipallas's module, as upstream's (tests/mosaic_compile.py)"
            marks.append(pytest.mark.xfail(raises=MosaicCompileError, strict=True, reason=why))
        params.append(pytest.param(case, id=case.name, marks=marks))
    return params


def lower_for_v5e(fn, args):
    """``jax.jit(fn)`` lowered on ``args``'s shapes for a v5e (libtpu's compile-only device), as
    on the chip: not ``lowering_platforms``, which lowers forward-compatibly (no hints)."""
    device = libtpu.tpu_device()
    sharding = jax.sharding.SingleDeviceSharding(device)  # as arrays put on the chip have
    with jax.default_device(device):
        specs = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding) for a in args]
        return jax.jit(fn).lower(*specs)


def compile_for_v5e(fn, args) -> str | None:
    """None when libtpu compiles ``jax.jit(fn)`` for a v5e, else the refusal (its class and
    whole message, and its cause's: jax re-raises Mosaic's errors)."""
    try:
        lower_for_v5e(fn, args).compile()
    except Exception as e:  # a refusal, whatever its class: upstream's, minipallas's, Mosaic's
        return f"{type(e).__name__}: {e} {e.__cause__ or ''}"
    return None


@needs_libtpu
@pytest.mark.parametrize("case", checked("compile", PARAM_CASES))
def test_both_sides_compile_or_refuse_for_a_v5e_as_the_case_expects(case):
    args = case.inputs()
    theirs = compile_for_v5e(case.upstream(), args)
    ours = compile_for_v5e(on_tpu(case.upstream()), args)
    expect = case.expect
    if expect.outcome == SAME_BITS:
        assert (theirs, ours) == (None, None)
    elif expect.outcome == BOTH_REFUSE:
        assert theirs is not None and expect.message in theirs, theirs
        assert ours is not None, "minipallas compiles what upstream refuses"
        assert expect.our_message in ours, ours
    else:
        assert theirs is not None and expect.message in theirs, theirs
        assert ours is None, ours


# -- the custom call and its module --------------------------------------------------------


def custom_call(fn, args) -> dict:
    """The one ``tpu_custom_call`` of ``jax.jit(fn)`` lowered for a v5e: its fields, the
    backend config's module decoded to text under ``"module"``."""
    (op,) = _custom_calls(lower_for_v5e(fn, args).compiler_ir("stablehlo").operation)
    attrs = op.attributes
    config = json.loads(ir.StringAttr(attrs["backend_config"]).value)
    body = config["custom_call_config"].pop("body")
    fields = {name: str(attrs[name]) for name in attrs if name != "backend_config"}
    return {**fields, "config": config, "module": decoded(base64.b64decode(body))}


def _custom_calls(op) -> list:
    found = []
    for region in op.regions:
        for block in region:
            for inner in block:
                if inner.operation.name == "stablehlo.custom_call":
                    found.append(inner.operation)
                found += _custom_calls(inner.operation)
    return found


# the cases whose parameter is in the custom call or shows in the module
CALLS = [
    case
    for case in PARAM_CASES
    if case.expect.outcome == SAME_BITS
    and (case.shows or case.family in ("compiler_params", "custom_call"))
]


@needs_libtpu
@pytest.mark.parametrize("case", checked("custom_call", CALLS))
def test_the_custom_call_is_upstreams_and_its_module_shows_the_parameter(case):
    args = case.inputs()
    theirs = custom_call(case.upstream(), args)
    ours = custom_call(on_tpu(case.upstream()), args)
    for text in case.shows:
        assert text in theirs["module"], f"upstream's module has no {text!r}: fix the case"
        assert text in ours["module"], f"minipallas's module has no {text!r}"
    theirs.pop("module"), ours.pop("module")
    assert ours == theirs


# -- on the CPU ----------------------------------------------------------------------------


def relative_error(got, want) -> float:
    """The largest distance from the reference over the reference's largest magnitude."""
    got, want = np.asarray(got).astype(np.float64), np.asarray(want, np.float64)
    return float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-30))


def tolerance(case, out) -> float:
    """How far interpret mode may lie from the float64 reference: a float32 result's rounding
    (sums and dots over 128 terms), or a bfloat16 one's (approx=True rounds to bfloat16)."""
    coarse = np.asarray(out).dtype.itemsize < 4 or "approx=True" in case.parameter
    return 2e-2 if coarse else 2e-5


@pytest.mark.parametrize("case", checked("cpu", [c for c in PARAM_CASES if not c.cpu]))
def test_the_import_gives_upstreams_interpret_bits_on_the_cpu(case):
    args = case.inputs()
    want = as_tuple(jax.jit(case.upstream(interpret=True))(*args))
    for w, r in zip(want, case.expected(*args), strict=True):
        assert relative_error(w, r) <= tolerance(case, w), "the reference is not the kernel's"
    try:
        got = mp.compile(from_jaxpr(jax.make_jaxpr(case.upstream())(*args)))(*args)
    except Exception as e:  # honoured or refused: refused is right where the chip refuses
        if case.expect.outcome != BOTH_REFUSE:
            raise
        assert case.expect.our_message in str(e)
        return
    for g, w in zip(got, want, strict=True):
        assert_same_bits(g, np.asarray(w))


def test_the_corpus_covers_every_family_and_outcome():
    names = [case.name for case in PARAM_CASES]
    assert len(names) == len(set(names)) >= 60
    families = Counter(case.family for case in PARAM_CASES)
    assert set(families) >= {
        "dot_general", "convert_element_type", "round", "reduce_sum", "argmax", "roll", "exp",
        "reciprocal", "integer_pow", "pow", "clamp", "select_n", "iota", "mul", "multiple_of",
        "grid", "block_spec", "compiler_params", "custom_call",
    }  # fmt: skip
    outcomes = Counter(case.expect.outcome for case in PARAM_CASES)
    assert set(outcomes) == {SAME_BITS, BOTH_REFUSE, BEYOND_UPSTREAM}
    for case in PARAM_CASES:
        assert (case.expect.message != "") == (case.expect.outcome != SAME_BITS), case.name
        assert (case.expect.reason != "") == (case.expect.outcome == BEYOND_UPSTREAM), case.name
    stale = {name for _, name in NOT_YET_HONOURED} - set(names)
    assert not stale, f"NOT_YET_HONOURED names cases that do not exist: {stale}"

"""Shared checks for the discharge tests: structure, convention and meaning.

``check(fn, *args)`` discharges ``fn`` and asserts, in order:
1. the discharged function passes the verifier, and ``fn`` itself is unchanged;
2. the convention: discharged ``Ref`` params are arrays, results are the original results then
   the discharged refs' final values in parameter order;
3. no state op or view touches a discharged ref: every ref left in the output descends from a
   ref that was kept (a kept parameter or a kept scoped allocation);
4. meaning: ``interpret(fn, *refs)`` (refs mutated) equals ``interpret(discharge(fn), *arrays)``
   bit for bit (any NaN equals any NaN), and kept refs end with the same contents.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

import minipallas
from minipallas.ir import dtypes
from minipallas.ir.core import Block, Function, Value
from minipallas.ir.effects import region_operand_map
from minipallas.ir.types import RefType
from minipallas.passes.discharge import discharge
from minipallas.tools.generate.check import same_bits  # noqa: F401  (re-exported for the tests)

STATE = {"get", "swap", "addupdate", "load", "store"}
VIEWS = {"ref.at", "ref.reshape", "ref.bitcast", "ref.transpose"}


def op_names(fn: Function) -> Counter:
    """How many ops of each name ``fn`` and its callees hold."""
    return Counter(op.name for f in (fn, *fn.callees()) for op in f.walk())


def random_args(fn: Function, seed: int = 0) -> list[np.ndarray]:
    """Deterministic inputs: small ints for index-typed params, mixed values otherwise."""
    rng = np.random.default_rng(seed)
    out = []
    for t in fn.param_types:
        np_dtype = dtypes.to_numpy(t.dtype)
        if t.dtype == "bool":
            a = rng.random(t.shape) < 0.5
        elif dtypes.is_int(t.dtype):
            a = rng.integers(0, 6, size=t.shape)
        else:
            a = rng.standard_normal(t.shape) * 4
        out.append(np.asarray(a).astype(np_dtype))
    return out


def _snapshot(fn: Function) -> tuple[str, list[int]]:
    return str(fn), [id(op) for f in (fn, *fn.callees()) for op in f.walk()]


def _kept_refs_only(out: Function, kept_params: set[int], scoped_kept: bool) -> None:
    """Every ref value in ``out`` descends from a kept param or a kept scoped allocation."""
    allowed: set[Value] = {p for i, p in enumerate(out.params) if i in kept_params}

    def walk(block: Block) -> None:
        for op in block.ops:
            refs = [v for v in op.operands if isinstance(v.type, RefType)]
            for v in refs:
                assert v in allowed, f"'{op.name}' uses a ref that was discharged:\n{out}"
            if op.name in VIEWS:
                allowed.add(op.result)
            for r, region in enumerate(op.regions):
                if op.name == "run_scoped":
                    n_alloc = len(region.params) - len(op.operands)
                    assert scoped_kept or n_alloc == 0, f"a scoped allocation is left:\n{out}"
                    allowed.update(region.params[:n_alloc])
                for k, pos in region_operand_map(op, r).items():
                    if op.operands[pos] in allowed:
                        allowed.add(region.params[k])
                walk(region)

    walk(out.body)


def run(fn: Function, args) -> tuple[tuple, list[np.ndarray]]:
    copies = [np.array(a, copy=True) for a in args]
    with np.errstate(all="ignore"):
        results = minipallas.interpret(fn, *copies)
    return tuple(results), copies


def check(
    fn: Function | str,
    *args,
    should_discharge=True,
    discharge_scoped=True,
    seed: int = 0,
) -> Function:
    """Discharges ``fn`` (a function or its text) and checks it; returns the result."""
    if isinstance(fn, str):
        fn = minipallas.parse(fn)
    if not args:
        args = random_args(fn, seed)
    before = _snapshot(fn)
    out = discharge(fn, should_discharge, discharge_scoped=discharge_scoped)
    minipallas.verify(out)
    assert _snapshot(fn) == before, "discharge changed its input"

    mask = (
        [should_discharge] * len(fn.params)
        if isinstance(should_discharge, bool)
        else list(should_discharge)
    )
    gone = [i for i, t in enumerate(fn.param_types) if isinstance(t, RefType) and mask[i]]
    kept = {i for i, t in enumerate(fn.param_types) if isinstance(t, RefType) and not mask[i]}
    for i, (old, new) in enumerate(zip(fn.param_types, out.param_types, strict=True)):
        assert new == (old.value_type if i in gone else old), f"param {i}: {new}"
    assert list(out.result_types) == [
        *fn.result_types,
        *(fn.param_types[i].value_type for i in gone),
    ]
    scoped_kept = discharge_scoped is not True
    _kept_refs_only(out, kept, scoped_kept)
    if not kept and not scoped_kept:
        left = [
            op.name
            for f in (out, *out.callees())
            for op in f.walk()
            if op.name in STATE | VIEWS | {"run_scoped"}
        ]
        assert not left, f"state ops left after full discharge: {left}"

    results, finals = run(fn, args)
    got, got_args = run(out, args)
    want = [*results, *(finals[i] for i in gone)]
    assert len(got) == len(want)
    for k, (w, g) in enumerate(zip(want, got, strict=True)):
        assert same_bits(w, g), f"output {k}: expected\n{w!r}\ngot\n{g!r}\n{fn}\n{out}"
    for i in kept:
        assert same_bits(finals[i], got_args[i]), f"kept ref {i} differs"
    return out

"""The random-program generator: reproducible, sized as asked, well typed, and covering every
feature the discharge property needs (op kinds, indexer kinds, dtypes, nesting, captures)."""

import random
import subprocess
import sys
from collections import Counter

import numpy as np
from hypothesis import HealthCheck, given, settings

import minipallas as mp
from minipallas.ir.indexing import Array, Dyn, Int, Slice
from minipallas.ir.types import RefType
from minipallas.tools.generate import Config, programs, random_inputs, random_program
from minipallas.tools.generate.check import same_bits


def _all_ops(fn):
    return [op for f in (fn, *fn.callees()) for op in f.walk()]


def _corpus(n=150, size=40):
    return [random_program(random.Random(seed), size) for seed in range(n)]


def test_random_program_is_reproducible_and_sized():
    a = random_program(random.Random(7), 500)
    b = random_program(random.Random(7), 500)
    assert str(a) == str(b)
    assert str(a) != str(random_program(random.Random(8), 500))
    # The sampler stops at the first statement reaching the target; a region adds its body.
    assert 500 <= len(_all_ops(a)) <= 560


def test_every_feature_appears_in_a_small_corpus():
    ops, entries, dtypes, depth_runs = Counter(), Counter(), set(), 0
    captures = zero_d_refs = while_reads_ref = 0
    for fn in _corpus():
        dtypes |= {t.dtype for t in fn.param_types}
        zero_d_refs += any(isinstance(t, RefType) and t.shape == () for t in fn.param_types)
        for op in _all_ops(fn):
            ops[op.name] += 1
            for e in op.attrs.get("indexer", ()):
                if isinstance(e, Int):
                    entries["dyn int" if isinstance(e.index, Dyn) else "int"] += 1
                elif isinstance(e, Slice):
                    kind = "dyn slice" if isinstance(e.start, Dyn) else "slice"
                    entries[kind + (" strided" if e.stride > 1 else "")] += 1
                else:
                    assert isinstance(e, Array)
                    entries["array"] += 1
            if op.name == "run_scoped":
                captures += any(isinstance(v.type, RefType) for v in op.operands)
                depth_runs = max(depth_runs, _scoped_depth(op))
            if op.name == "while":
                while_reads_ref += any(o.name == "get" for o in op.regions[0].walk())
    kinds = {"get", "swap", "addupdate", "load", "store", "run_scoped", "for", "while", "cond",
             "call", "ref.at", "ref.reshape", "ref.bitcast", "ref.transpose", "select"}  # fmt: skip
    assert kinds <= set(ops), kinds - set(ops)
    assert set(entries) == {"int", "dyn int", "slice", "slice strided", "dyn slice",
                            "dyn slice strided", "array"}  # fmt: skip
    assert {"float32", "bfloat16", "int32", "bool"} <= dtypes
    assert zero_d_refs and captures and while_reads_ref
    assert depth_runs == 3


def _scoped_depth(op):
    inner = [o for o in op.regions[0].walk() if o.name == "run_scoped"]
    return 1 + max((_scoped_depth(o) for o in inner), default=0)


def test_out_of_range_dynamic_starts_are_drawn():
    """Constant dynamic starts sometimes fall outside [0, dim - span], so clamping is tested."""
    out_of_range = 0
    for fn in _corpus(60):
        consts = {
            op.result: op.attrs["value"].array() for op in _all_ops(fn) if op.name == "constant"
        }
        for op in _all_ops(fn):
            idx = op.attrs.get("indexer")
            if idx is None:
                continue
            ref_shape = op.operands[0].type.shape
            for e, dim in zip(idx, ref_shape, strict=True):
                if isinstance(e, Slice) and isinstance(e.start, Dyn):
                    start = consts.get(op.operands[1 + e.start.pos])
                    span = (e.size - 1) * e.stride + 1 if e.size else 0
                    out_of_range += start is not None and not 0 <= int(start) <= dim - span
    assert out_of_range > 0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(max_stmts=6))
def test_drawn_programs_verify_and_round_trip_through_text(fn):
    mp.verify(fn)
    assert str(mp.parse(str(fn))) == str(fn)


def test_config_switches_features_off():
    cfg = Config(view_kinds=(), scoped=False, loops=False, conds=False, calls=False, masked=False)
    names = {
        op.name
        for seed in range(30)
        for op in _all_ops(random_program(random.Random(seed), 60, cfg))
    }
    assert not names & {"ref.at", "ref.reshape", "run_scoped", "for", "while", "cond", "call",
                        "load", "store"}  # fmt: skip
    assert {"get", "swap"} <= names


def test_inputs_match_parameter_types_and_are_reproducible():
    fn = random_program(random.Random(3), 200)
    a, b = random_inputs(fn, seed=5), random_inputs(fn, seed=5)
    for t, x, y in zip(fn.param_types, a, b, strict=True):
        assert x.shape == t.shape and x.dtype == mp.ir.dtypes.to_numpy(t.dtype)
        assert same_bits(x, y)


def test_same_bits_is_bitwise_but_nan_aware():
    assert same_bits(np.array([np.nan, 1.0]), np.array([-np.nan, 1.0]))
    assert not same_bits(np.array([0.0]), np.array([-0.0]))
    assert not same_bits(np.array([1], np.int32), np.array([1], np.uint32))
    assert not same_bits(np.array([np.nan]), np.array([1.0]))


def test_importing_the_generator_does_not_import_hypothesis():
    code = "import sys, minipallas.tools.generate; assert 'hypothesis' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)

"""Print, parse, print: the text must come back identical, and the parsed IR must be the same
IR (same ops, operands, attributes bit for bit, types and regions)."""

import random

import pytest
import textir_programs as programs
from hypothesis import HealthCheck, given, settings

from minipallas.ir import (
    OPS,
    UNKNOWN,
    Block,
    Function,
    Location,
    Module,
)
from minipallas.ir.parser import parse, parse_module
from minipallas.ir.printer import print_function, print_module
from minipallas.ir.syntax import Rule
from minipallas.ir.verifier import verify
from minipallas.tools.generate import programs as program_strategy
from minipallas.tools.generate import random_program


def assert_same_function(a: Function, b: Function) -> None:
    assert a.name == b.name
    assert_same_block(a.body, b.body)


def assert_same_block(x: Block, y: Block) -> None:
    """Structural equality; a region gets a fresh value map because regions are closed."""
    same: dict = {}
    assert [p.type for p in x.params] == [p.type for p in y.params]
    same.update(zip(x.params, y.params, strict=True))
    assert len(x.ops) == len(y.ops)
    for o, q in zip(x.ops, y.ops, strict=True):
        assert o.name == q.name
        assert len(o.operands) == len(q.operands), o.name
        assert all(same[v] is w for v, w in zip(o.operands, q.operands, strict=True)), o.name
        assert set(o.attrs) == set(q.attrs), o.name
        for key, value in o.attrs.items():
            if key == "callee":
                assert_same_function(value, q.attrs[key])
            else:
                assert value == q.attrs[key], (o.name, key)
        assert [r.type for r in o.results] == [r.type for r in q.results], o.name
        assert len(o.regions) == len(q.regions)
        for r1, r2 in zip(o.regions, q.regions, strict=True):
            assert_same_block(r1, r2)
        same.update(zip(o.results, q.results, strict=True))
    assert all(same[v] is w for v, w in zip(x.results, y.results, strict=True))


@pytest.mark.parametrize("build", programs.ALL, ids=lambda f: f.__name__)
def test_print_parse_print(build):
    fn = build()
    verify(fn)
    text = str(fn)
    parsed = parse(text)
    assert str(parsed) == text
    assert_same_function(fn, parsed)
    verify(parsed)


@pytest.mark.parametrize("build", programs.ALL, ids=lambda f: f.__name__)
def test_roundtrip_with_locations(build):
    fn = build()
    text = print_function(fn, locations=True)
    parsed = parse(text)
    assert print_function(parsed, locations=True) == text
    assert [op.loc for op in parsed.walk()] == [op.loc for op in fn.walk()]


def test_located_ops_keep_file_line_and_col():
    parsed = parse(print_function(programs.located(), locations=True))
    assert [op.loc for op in parsed.walk()] == [
        Location("/src/kernel.py", 12),
        Location("", 3, 7),
        Location('we"ird.py', 4, 2),
        UNKNOWN,
    ]
    assert parse(str(programs.located())).body.ops[3].loc == Location("", 5, 8)


def test_programs_use_every_op_and_every_op_has_syntax():
    used = {op.name for build in programs.ALL for op in build().walk()}
    assert used == set(OPS)
    assert all(isinstance(opdef.syntax, Rule) for opdef in OPS.values())


def test_constants_are_bit_exact():
    fn = programs.constants()
    parsed = parse(str(fn))
    for a, b in zip(fn.walk(), parsed.walk(), strict=True):
        assert a.attrs["value"].data == b.attrs["value"].data
        assert a.attrs["value"].type == b.attrs["value"].type


def test_module_roundtrip():
    control = programs.control()
    module = Module([programs.views(), control])
    text = print_module(module)
    parsed = parse_module(text)
    assert [f.name for f in parsed.functions] == ["views", "<lambda>", "control"]
    assert print_module(parsed) == text
    assert_same_function(control, parsed.entry)


@pytest.mark.parametrize("seed", range(12))
def test_random_programs_roundtrip(seed):
    fn = random_program(random.Random(seed), 150)
    text = str(fn)
    parsed = parse(text)
    assert str(parsed) == text
    assert_same_function(fn, parsed)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program_strategy())
def test_generated_programs_roundtrip(fn):
    text = str(fn)
    assert str(parse(text)) == text

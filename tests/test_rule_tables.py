"""Every op-by-op pass keeps its rules in a ``RuleTable`` filled by its module's ``@rule``.

One class and one decorator name for all of them (``@register`` is the pass registry's), so a
hand-rolled dict that silently lets a second rule replace the first cannot come back.
"""

import importlib

import pytest

from minipallas.ir.rules import RuleTable

TABLES = [
    "minipallas.ir.interpret.engine",
    "minipallas.passes.discharge.engine",
    "minipallas.passes.batching.engine",
    "minipallas.lowering.stablehlo.context",
    "minipallas.lowering.tpu.context",
    "minipallas.lowering.gpu.context",
    "minipallas.interop.importer.engine",
    "minipallas.interop.exporter.engine",
    "minipallas.interop.exporter.stateful",
]


@pytest.mark.parametrize("module", TABLES)
def test_rules_live_in_a_rule_table_filled_by_rule(module):
    mod = importlib.import_module(module)
    importlib.import_module(module.rsplit(".", 1)[0])  # the package registers every rule file
    assert isinstance(mod.RULES, RuleTable)
    assert mod.rule.__self__ is mod.RULES and mod.rule.__func__ is type(mod.RULES).register
    assert len(mod.RULES) > 0


@pytest.mark.parametrize("module", TABLES)
def test_a_second_rule_for_one_name_is_refused(module):
    rules = importlib.import_module(module).RULES
    name = sorted(rules)[0]
    saved = rules.pop(name)
    try:
        first = rules.register(name)(lambda *args: ())
        with pytest.raises(ValueError, match=f"{rules.what} for '{name}' registered twice"):
            rules.register(name)(lambda *args: ())
        assert rules[name] is first
    finally:
        rules[name] = saved


@pytest.mark.parametrize("module", TABLES)
def test_a_rule_for_a_name_that_is_no_op_is_refused_with_the_nearest(module):
    """A misspelt name would be a rule that never runs: registering it is an error naming the
    nearest names (ops, or jax primitives for the importer's table), and nothing is added."""
    rules = importlib.import_module(module).RULES
    with pytest.raises(
        ValueError,
        match=f"{rules.what} for 'dynamic_slise': there is no {rules.kind} named "
        "'dynamic_slise'; did you mean 'dynamic_slice'",
    ):
        rules.register("dynamic_slise")
    assert "dynamic_slise" not in rules
    with pytest.raises(ValueError, match="there is no"):
        rules.register("zzzz")  # nothing near: no suggestion, still refused


def test_the_jaxpr_importer_takes_jax_primitive_names_and_the_others_op_names():
    from minipallas.interop.importer import engine as importer

    assert importer.RULES.kind == importer.SCOPED_RULES.kind == "jax primitive"
    assert {"jit", "dot_general", "pallas_call", "dma_start"} <= importer.RULES.known()
    ops = importlib.import_module("minipallas.interop.exporter.engine").RULES.known()
    assert "get" in ops and "dot_general" not in ops


def test_a_cleanup_pattern_for_a_name_that_is_no_op_is_refused():
    from minipallas.passes.cleanup_patterns import pattern

    table = {}
    with pytest.raises(
        ValueError, match="cleanup pattern for 'ad': there is no op named 'ad'; did you mean"
    ):
        pattern("add", "ad", table=table)
    assert table == {}
    pattern("add", table=table)(lambda op, defs: None)
    assert list(table) == ["add"]


def test_discharge_runs_region_and_scope_rules_for_every_op():
    from minipallas.passes.discharge import engine

    assert engine.RULES.always == {"for", "while", "cond", "call", "mesh_call", "run_scoped"}
    assert {"get", "swap", "ref.at"} <= engine.RULES.keys() - engine.RULES.always


# tables a pass indexes by op name beside its RULES (issue 50 point 5): built by RuleTable.of
OP_TABLES = [
    ("minipallas.ir.interpret.rules.arrays", "BINARY"),
    ("minipallas.ir.interpret.rules.arrays", "FLOAT_UNARY"),
    ("minipallas.ir.interpret.rules.arrays", "DTYPE_UNARY"),
    ("minipallas.lowering.tpu.ranges", "_ARITH"),
    ("minipallas.lowering.tpu.ranges", "_COMPARE"),
    ("minipallas.lowering.tpu.ranges", "_LOGIC"),
    ("minipallas.lowering.tpu.semantics", "_EVAL"),
    ("minipallas.lowering.tpu.semantics", "_ZERO_TESTS"),
    ("minipallas.lowering.tpu.widen", "EXTENSION"),
    ("minipallas.lowering.gpu.module", "_FOLDS"),
    ("minipallas.lowering.gpu.module", "_RANGES"),
]


@pytest.mark.parametrize(("module", "name"), OP_TABLES)
def test_tables_keyed_by_op_name_are_checked_rule_tables(module, name):
    assert isinstance(getattr(importlib.import_module(module), name), RuleTable)


def test_a_table_written_as_a_dict_refuses_a_name_that_is_no_op():
    assert RuleTable.of("test rule", {"add": 1, "mul": 2}) == {"add": 1, "mul": 2}
    with pytest.raises(ValueError, match="there is no op named 'mull'; did you mean 'mul'"):
        RuleTable.of("test rule", {"mull": 2})

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
    "minipallas.difftest.jax_emit",
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
    first = rules.register("twice_for_test")(lambda *args: ())
    try:
        with pytest.raises(ValueError, match=f"{rules.what} for 'twice_for_test' registered twice"):
            rules.register("twice_for_test")(lambda *args: ())
        assert rules["twice_for_test"] is first
    finally:
        del rules["twice_for_test"]


def test_discharge_runs_region_and_scope_rules_for_every_op():
    from minipallas.passes.discharge import engine

    assert engine.RULES.always == {"for", "while", "cond", "call", "mesh_call", "run_scoped"}
    assert {"get", "swap", "ref.at"} <= engine.RULES.keys() - engine.RULES.always

"""``minipallas.tools.user_passes``: the tools' ``--load`` and ``--pass-pipeline``, a pipeline cut
into its passes, and the pass a finding comes from with its IR before and after."""

import argparse

import numpy as np
import pytest

import minipallas as mp
import minipallas.numpy as jnp
from minipallas.ir.errors import PassError
from minipallas.ir.interpret import interpret
from minipallas.passes.pipeline import run, split_pipeline
from minipallas.passes.registry import PASSES
from minipallas.tools.user_passes import add_arguments, argv_of, first_bad_pass, loaded

WRONG = """
from minipallas.ir.core import Block, Function
from minipallas.passes.registry import register


def _block(block):
    ops = [op.replace(name="sub" if op.name == "add" else op.name,
                      regions=tuple(_block(r) for r in op.regions)) for op in block.ops]
    return Block(block.params, tuple(ops), block.results)


@register("add-to-sub", doc="every add becomes a sub (wrong on purpose)")
def add_to_sub(fn: Function) -> Function:
    return Function(fn.name, _block(fn.body))


@register("boom", doc="raises")
def boom(fn: Function) -> Function:
    raise ValueError("boom")
"""


@pytest.fixture
def wrong_passes(tmp_path):
    path = tmp_path / "wrong_passes.py"
    path.write_text(WRONG)
    return str(path)


def parsed(*argv):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


def test_steps_keep_each_pass_with_its_options():
    assert split_pipeline("") == []
    assert split_pipeline("cleanup, discharge{discharge_scoped=false,keep_params=1},cleanup") == [
        "cleanup",
        "discharge{discharge_scoped=false,keep_params=1}",
        "cleanup",
    ]


def test_loaded_passes_last_as_long_as_the_command(wrong_passes):
    args = parsed("--load", wrong_passes, "--pass-pipeline", "cleanup,add-to-sub")
    assert argv_of(args) == ["--load", wrong_passes, "--pass-pipeline", "cleanup,add-to-sub"]
    for _ in range(2):  # loaded again: registered anew, not "already registered"
        with loaded(args) as pipeline:
            assert pipeline == "cleanup,add-to-sub" and "add-to-sub" in PASSES
        assert "add-to-sub" not in PASSES and "boom" not in PASSES
    with (
        pytest.raises(PassError, match="unknown pass 'add-to-sub'"),
        loaded(parsed("--pass-pipeline", "add-to-sub")),
    ):
        pass


def _double_plus_one(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0 + 1.0


def test_first_bad_pass_names_the_pass_with_its_ir(wrong_passes):
    fn = mp.cleanup(mp.discharge(mp.trace(_double_plus_one, *[mp.RefType((4,), jnp.float32)] * 2)))
    x = np.arange(4, dtype=np.float32)

    def outputs(prefix):
        return list(interpret(run(fn, prefix), x, np.zeros(4, np.float32)))

    def differs(want, got):
        same = all(np.array_equal(w, g) for w, g in zip(want, got, strict=True))
        return None if same else "the values differ"

    with loaded(parsed("--load", wrong_passes)):
        blame = first_bad_pass(
            "cleanup,add-to-sub,cleanup", outputs, lambda p: str(run(fn, p)), differs
        )
        assert (blame.step, blame.number, blame.name) == ("add-to-sub", 2, "add-to-sub")
        assert " add " in blame.before and " sub " not in blame.before and " sub " in blame.after
        text = blame.text()
        assert "--- IR before pass 'add-to-sub' ---" in text
        assert "(pass 2 of 'cleanup,add-to-sub,cleanup'): the outputs change" in text
        raised = first_bad_pass("cleanup,boom", outputs, lambda p: str(run(fn, p)), differs)
        assert raised.name == "boom" and raised.after is None
        assert raised.why == "it raised ValueError: boom"
        assert (
            first_bad_pass("cleanup,cleanup", outputs, lambda p: str(run(fn, p)), differs) is None
        )

"""Pass options declared with types next to each pass: parsed from the pipeline string (bool,
int, list of ints, a choice of words), and every bad name or value an error naming the pass, the
option and what it accepts, before any pass runs."""

import ast
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import minipallas as mp
from minipallas.ir.errors import PassError
from minipallas.passes.pipeline import PASSES, parse_pipeline, run
from minipallas.passes.registry import (
    BOOL,
    INT,
    INTS,
    REQUIRED,
    Option,
    choice,
    describe,
    register,
)

SCRATCH = mp.RefType((8,), "float32")


def scoped_kernel():
    """o = 2 * x through a run_scoped scratch ref."""

    def k(x, o):
        def body(s):
            s[...] = x[...] * 2.0
            o[...] = s[...]

        mp.run_scoped(body, SCRATCH)

    return mp.trace(k, SCRATCH, SCRATCH)


@pytest.fixture
def scratch_pass():
    """A test-only pass with one option of every type; removed afterwards."""
    seen = []

    @register(
        "probe",
        Option("flag", BOOL, "a bool"),
        Option("count", INT, "an int"),
        Option("shape", INTS, "ints"),
        Option("mode", choice("fast", "slow"), "a word"),
    )
    def probe(fn, *, flag=False, count=1, shape=(1,), mode="fast"):
        seen.append((flag, count, shape, mode))
        return fn

    yield seen
    del PASSES["probe"]


def test_option_values_are_parsed_with_their_types(scratch_pass):
    steps = parse_pipeline("probe{flag=true,count=-3,shape=4x2x1,mode=slow}")
    assert steps == [("probe", {"flag": True, "count": -3, "shape": (4, 2, 1), "mode": "slow"})]
    run(scoped_kernel(), "probe{shape=7},probe")
    assert scratch_pass == [(False, 1, (7,), "fast"), (False, 1, (1,), "fast")]


@pytest.mark.parametrize(
    "text, accepts",
    [
        ("flag=yes", "true or false"),
        ("flag=1", "true or false"),
        ("count=1.5", "an integer"),
        ("shape=4,2", None),  # the comma starts another option: '2' is not key=value
        ("shape=4x", "non-negative integers joined by 'x'"),
        ("shape=-4", "non-negative integers joined by 'x'"),
        ("mode=medium", "one of fast, slow"),
    ],
)
def test_a_bad_value_names_the_pass_the_option_and_what_it_accepts(scratch_pass, text, accepts):
    item = f"probe{{{text}}}"
    with pytest.raises(PassError) as info:
        run(scoped_kernel(), f"cleanup,{item}", after_each=lambda n, f: scratch_pass.append(n))
    assert scratch_pass == []  # nothing ran
    if accepts is None:
        assert str(info.value) == f"option '2' of '{item}' is not key=value"
        return
    name, _, value = text.partition("=")
    example = {"flag": "false", "count": "1", "shape": "4x2", "mode": "fast"}[name]
    doc = {"flag": "a bool", "count": "an int", "shape": "ints", "mode": "a word"}[name]
    assert str(info.value) == (
        f"pass 'probe': option '{name}' takes {accepts}, got '{value}' in '{item}'\n"
        f"  fix: e.g. probe{{{name}={example}}} ({doc})"
    )


def test_unknown_repeated_and_missing_options(scratch_pass):
    with pytest.raises(PassError) as info:
        parse_pipeline("probe{flags=true}")
    assert str(info.value) == (
        "pass 'probe' has no option 'flags'\n  fix: its options: flag (true or false), "
        "count (an integer), shape (non-negative integers joined by 'x'), mode (one of fast, slow)"
    )
    with pytest.raises(PassError, match="option 'flag' is given twice in 'probe{flag=true"):
        parse_pipeline("probe{flag=true,flag=false}")
    with pytest.raises(PassError) as info:
        parse_pipeline("batch{exact=false}")
    assert str(info.value) == (
        "pass 'batch' needs option 'sizes' (non-negative integers joined by 'x')\n"
        "  fix: e.g. batch{sizes=4x2} (the batch grid's shape; its axes go in front of every "
        "parameter)"
    )


def test_an_option_must_be_a_keyword_only_parameter():
    with pytest.raises(PassError, match="declares option 'x', which is not a keyword-only"):
        register("bad", Option("x", BOOL, "doc"))(lambda fn, x=True: fn)
    assert "bad" not in PASSES


def test_every_builtin_option_is_declared_with_the_function_default():
    declared = {
        name: {o.name: info.defaults[o.name] for o in info.options} for name, info in PASSES.items()
    }
    assert declared == {
        "batch": {"sizes": REQUIRED, "exact": True},
        "bind-grid": {"grid": REQUIRED},
        "cleanup": {"fold": True},
        "collectives": {"context": "discharge", "mode": "reject"},
        "discharge": {"discharge_scoped": True, "keep_params": 0, "collectives": "reject"},
        "drop-inputs": {"count": REQUIRED},
        "fuse-grid-steps": {
            "max_unroll": None,  # None: the cost model's (passes/kernel/grid_fusion/cost.py)
            "target_bytes": None,
            "vmem_budget": None,
            "min_steps": 64,
            "max_carried": 1,
            "wide_block": None,
            "discharge_carried": True,
            "carried_bytes": 131072,
            "substep_loop": False,
            "thread_outputs": True,
            "rows_alone": False,  # the TPU target sets it: Mosaic sums each row alone
        },
        "hoist-invariant": {"grid": REQUIRED, "inputs": REQUIRED},
        "promote-scratch": {"budget": 131072},
        "reassociate-sums": {"window_bytes": 0},
    }


def test_discharge_keep_params_keeps_the_first_parameters_refs():
    """The Triton pipeline's partial discharge: a kernel's operands stay refs, its scratch not."""

    def f(x_ref, scratch_ref):
        scratch_ref[...] = x_ref[...] * 2
        x_ref[...] = scratch_ref[...]

    ref = mp.RefType((8,), "float32")
    fn = mp.trace(f, ref, ref)
    kept = run(fn, "discharge{keep_params=1}", verify=True)
    assert [type(p.type) for p in kept.params] == [mp.RefType, mp.ArrayType]
    assert str(kept) == str(mp.discharge(fn, [False, True]))


def test_discharge_scoped_false_keeps_the_scratch_a_ref_and_computes_the_same():
    """The pipeline option that used to be a str ('str' object is not callable)."""
    fn = scoped_kernel()
    kept = run(fn, "discharge{discharge_scoped=false}", verify=True)
    direct = mp.discharge(fn, discharge_scoped=False)
    assert str(kept) == str(direct)
    (scoped,) = [op for op in kept.walk() if op.name == "run_scoped"]
    assert isinstance(scoped.regions[0].params[0].type, mp.RefType)
    x = np.arange(8, dtype=np.float32)
    x_out, o_out = mp.interpret(kept, x, np.zeros(8, np.float32))
    np.testing.assert_array_equal(o_out, x * 2)
    np.testing.assert_array_equal(x_out, x)
    full = run(fn, "discharge{discharge_scoped=true}", verify=True)
    assert not [op for op in full.walk() if op.name == "run_scoped"]


def test_the_python_discharge_rejects_a_non_bool_non_predicate():
    with pytest.raises(PassError) as info:
        mp.discharge(scoped_kernel(), discharge_scoped="false")
    assert str(info.value) == (
        "'discharge': discharge_scoped must be a bool or a predicate on RefType, got 'false'\n"
        "  fix: pass True, False or a function of the allocation's RefType"
    )


def test_describe_lists_every_pass_and_option():
    text = describe()
    for info in PASSES.values():
        kind = " [kernel pass]" if info.subject == "kernel" else ""
        assert f"  {info.name}{kind}: {info.doc}" in text
        for o in info.options:
            assert f"      {o.name}  ({o.type.accepts}; " in text
            assert f"          {o.doc}" in text
    assert "sizes  (non-negative integers joined by 'x'; required, e.g. sizes=4x2)" in text
    assert "discharge_scoped  (true or false; default true)" in text  # no example shown


def test_every_builtin_pass_is_declared_in_passes():
    """Every pass minipallas registers is declared in ``passes/`` (issue 50 point 3): after
    importing every module that once registered one (the CPU programs, the command line), each
    pass's function lives under ``minipallas.passes``, and each kernel pass, and each step of a
    kernel's CPU program, in its room, ``minipallas.passes.kernel``."""
    code = (
        "import minipallas, minipallas.cli, minipallas.kernels.programs.choose\n"
        "from minipallas.passes.registry import PASSES\n"
        "outside = {n: i.run.__module__ for n, i in PASSES.items()\n"
        "           if not i.run.__module__.startswith('minipallas.passes.')}\n"
        "assert not outside, outside\n"
        "kernel = {n for n, i in PASSES.items() if i.run.__module__.startswith("
        "'minipallas.passes.kernel.')}\n"
        "wanted = {n for n, i in PASSES.items() if i.subject == 'kernel'}\n"
        "wanted |= {'bind-grid', 'drop-inputs', 'hoist-invariant'}\n"
        "assert kernel == wanted, (kernel, wanted)\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr[-2000:]


def _kernel(value: ast.expr) -> bool:
    return isinstance(value, ast.Constant) and value.value == "kernel"


def _registrations(path: Path) -> list[tuple[int, bool]]:
    """(line, is a kernel pass) of each ``register(...)`` call in ``path``, under whatever name
    the file imports ``minipallas.passes.registry.register``."""
    tree = ast.parse(path.read_text())
    names = {
        a.asname or a.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "minipallas.passes.registry"
        for a in node.names
        if a.name == "register"
    }
    return [
        (node.lineno, any(k.arg == "subject" and _kernel(k.value) for k in node.keywords))
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in names
    ]


def test_passes_are_declared_in_passes_and_kernel_passes_in_their_room():
    """Issue 50 point 3, read from the source: no module outside ``passes/`` registers a pass
    (the CPU programs' steps used to, from ``kernels/programs/``), and every ``subject=``
    (kernel) pass is declared in ``passes/kernel/``."""
    root = Path(__file__).resolve().parents[2]
    found, wrong = [], []
    for folder in ("ir", "passes", "lowering", "minipallas"):
        for path in sorted((root / folder).rglob("*.py")):
            where = path.relative_to(root).as_posix()
            for line, kernel in _registrations(path):
                found.append(kernel)
                room = "passes/kernel/" if kernel else "passes/"
                if not where.startswith(room):
                    wrong.append(f"{where}:{line}: registers a pass outside {room}")
    assert wrong == []
    assert len(found) >= 10 and sum(found) >= 2  # fuse-grid-steps and reassociate-sums at least

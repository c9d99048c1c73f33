"""Verdicts that blame the right party (issue 48 §2): the user's mistakes in a case are
``case-error`` with the fix, a simulated mesh kernel's races and deadlocks are kernel bugs, a
correct mesh kernel is as expected, and ``Case.expect`` is checked against the vocabulary."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from minipallas import MiniPallasError
from minipallas.lowering.runtime.libtpu import libtpu_available
from minipallas.tools.difftest import Case, cli, run

X = np.arange(8 * 128, dtype=np.float32).reshape(8, 128)
OUT = jax.ShapeDtypeStruct((8, 128), jnp.float32)


def _one_ref(x_ref):  # the output ref is missing
    pass


def _double(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2


def test_a_kernel_of_the_wrong_arity_is_a_case_error_with_the_fix():
    case = Case("arity", lambda x: pl.pallas_call(_one_ref, out_shape=OUT, interpret=True)(x), (X,))
    finding = run(case).finding
    assert (finding.kind, finding.name) == ("case-error", "wrong-arity")
    assert "one ref per input and per output" in finding.detail


def test_a_case_without_interpret_is_a_case_error_with_the_fix():
    case = Case("no interpret", lambda x: pl.pallas_call(_double, out_shape=OUT)(x), (X,))
    finding = run(case).finding
    assert (finding.kind, finding.name) == ("case-error", "no-interpret")
    assert "interpret=True" in finding.detail


MESH = pltpu.create_tensorcore_mesh("core", num_cores=2)
X2 = np.arange(16 * 128, dtype=np.float32).reshape(16, 128)


def _mesh(barrier: bool = True, deadlock: bool = False):
    def body(x_ref, o_ref):
        def scoped(shared, sem):
            c = jax.lax.axis_index("core")
            pltpu.sync_copy(x_ref.at[pl.ds(c * 8, 8)], shared.at[pl.ds(c * 8, 8)])
            if barrier:
                pltpu.core_barrier(sem, core_axis_name="core")
            if deadlock:
                pl.semaphore_wait(sem, 1)
            o_ref[pl.ds(c * 8, 8), :] = shared[pl.ds(0, 8), :] + shared[pl.ds(8, 8), :]

        pl.run_scoped(
            scoped,
            pltpu.VMEM_SHARED((16, 128), jnp.float32),
            pltpu.SemaphoreType.REGULAR,
            collective_axes="core",
        )

    out = jax.ShapeDtypeStruct((16, 128), jnp.float32)
    return lambda x: pl.kernel(body, out_type=out, mesh=MESH, interpret=True)(x)


def test_a_correct_mesh_kernel_is_as_expected():
    report = run(Case("two cores", _mesh(), (X2,), collectives="simulate"))
    assert report.finding.kind == "beyond-upstream"
    assert report.expected


@pytest.mark.parametrize(
    ("kind", "fn"),
    [("race", _mesh(barrier=False)), ("deadlock", _mesh(barrier=False, deadlock=True))],
)
def test_a_simulated_race_or_deadlock_is_a_kernel_bug(kind, fn):
    report = run(Case(kind, fn, (X2,), collectives="simulate", expect="kernel-bug"))
    assert (report.finding.kind, report.finding.name) == ("kernel-bug", kind)
    assert f"{'Race' if kind == 'race' else 'Deadlock'}Error" in report.finding.detail
    assert report.expected  # expect="kernel-bug" matches the kind
    assert "NoneType: None" not in report.text()


def test_expect_is_checked_against_the_verdicts():
    with pytest.raises(MiniPallasError, match="strided-slice-with-int-index") as e:
        Case("typo", _double, (X,), expect="strided-slice-with-int-idx")
    assert "kernel-bug" in str(e.value)
    # the names classify makes of a way, a stage or a pass are verdicts too (the float
    # corpus's planted bugs expect "compile disagrees with interpret")
    names = ("compile disagrees with interpret", "pass add-to-sub", "xla crash at compile",
             "pass pattern double_is_add")  # fmt: skip
    for name in names:
        Case("named", _double, (X,), expect=name)


def test_the_table_says_what_the_user_must_fix_without_show(tmp_path, capsys):
    path = tmp_path / "cases.py"
    path.write_text(
        "import jax, jax.numpy as jnp, numpy as np\n"
        "from jax.experimental import pallas as pl\n"
        "from minipallas.tools.difftest import Case\n"
        "def k(x_ref, o_ref): o_ref[...] = x_ref[...]\n"
        "out = jax.ShapeDtypeStruct((8, 128), jnp.float32)\n"
        "C = Case('plain', lambda x: pl.pallas_call(k, out_shape=out)(x),\n"
        "         (np.zeros((8, 128), np.float32),))\n"
    )
    assert cli.main([str(path)]) == 1
    out = capsys.readouterr().out
    assert "case-error (no-interpret)" in out
    assert "plain: " in out and "pass interpret=True" in out


def _reads_its_output(x_ref, o_ref):
    o_ref[...] += x_ref[...]


@pytest.mark.skipif(not libtpu_available(), reason="libtpu is not installed")
def test_minipallas_refusing_its_own_program_names_its_check_not_libtpu():
    fn = lambda x: pl.pallas_call(_reads_its_output, out_shape=OUT, interpret=True)(x)  # noqa: E731
    verdict = run(Case("output read", fn, (X,)), device="tpu").tpu
    assert verdict.kind == "minipallas-refuses", verdict
    assert "libtpu refuses" not in str(verdict)
    assert "minipallas's own check check_output_reads (output_reads.py)" in str(verdict)

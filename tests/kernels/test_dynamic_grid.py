"""Dynamic grids: a grid size traced by ``jax.jit``, as upstream's ``pallas_call(grid=(n,))``.

Inside ``jax.jit`` a grid size may be a traced integer; the call then runs the CPU loop
program with a traced trip count (``platforms/jax_values.py``), its size an operand before
all others, as upstream's. Results equal upstream ``pallas_call(..., interpret=True)`` under the
same ``jax.jit`` bit for bit, for several sizes of one compiled function (including 0: the
outputs keep their fill value). ``from_jaxpr`` imports upstream's dynamic-grid calls. Outside
``jax.jit`` a non-int grid size is a ``MiniPallasError`` with a fix; Triton refuses with
upstream's message.
"""

import numpy as np
import pytest
from dynamic_cases import CASES, both, columns, normal_f32, rows
from kernel_helpers import assert_same_bits

import minipallas as mp
from minipallas.interop.importer.rules.kernel_call import kernel_from_jaxpr
from minipallas.ir.errors import MiniPallasError
from minipallas.kernels.programs.choose import cpu_program
from minipallas.lowering.runtime.compiled import compile
from minipallas.tools.corpora.suite import MP


@pytest.mark.parametrize("name", CASES)
def test_under_jax_jit_matches_upstream_for_several_sizes(name):
    make, args, sizes = CASES[name]
    ours, theirs = both(make)
    for n in sizes:
        got = ours(*args(), np.int32(n))
        assert_same_bits(got, theirs(*args(), np.int32(n)))
    assert ours._cache_size() == 1  # one trace: the size is a traced value


def test_what_the_dynamic_grid_computes():
    """Stated without upstream: the first n row blocks are written, the rest keep NaN."""
    (x,) = CASES["rows"][1]()
    ours, _ = both(rows)
    out = np.asarray(ours(x, np.int32(3)))
    for i in range(3):
        np.testing.assert_array_equal(out[8 * i : 8 * i + 8], x[8 * i : 8 * i + 8] + i + 30)
    assert np.isnan(out[24:]).all()
    assert np.isnan(np.asarray(ours(x, np.int32(0)))).all()


def test_the_kernel_has_a_none_size():
    import jax

    kernels = []

    def f(x, n):
        call = columns(mp, MP, n)
        kernels.append(call.trace(x))
        return call(x)

    jax.make_jaxpr(f)(normal_f32(32, 256), np.int32(2))
    (kernel,) = kernels
    assert kernel.grid == (None, 2) and kernel.dynamic_axes == (0,)
    assert cpu_program(kernel).param_types[0] == mp.ArrayType((), "int32")


@pytest.mark.parametrize("name", ["rows", "prefetch_aliasing"])
def test_from_jaxpr_imports_upstream_dynamic_grids(name):
    import jax

    make, args, sizes = CASES[name]
    _, theirs = both(make)
    n = np.int32(sizes[-1])
    jaxpr = jax.make_jaxpr(theirs)(*args(), n)
    kernel = kernel_from_jaxpr(jaxpr)
    assert None in kernel.grid
    program = compile(mp.from_jaxpr(jaxpr))
    for n in sizes:
        (got,) = program(*args(), np.int32(n))
        assert_same_bits(got, theirs(*args(), np.int32(n)))


@pytest.mark.parametrize("size", [np.float32(2), 2.0, "2", -1])
def test_a_non_int_grid_outside_jit_is_an_error_with_a_fix(size):
    with pytest.raises(MiniPallasError) as err:
        rows(mp, MP, size)
    assert "grid sizes must be non-negative ints" in err.value.message
    assert "jax.jit" in err.value.fix and err.value.loc is not None


def test_a_concrete_jax_scalar_outside_jit_is_an_error():
    import jax.numpy as jnp

    with pytest.raises(MiniPallasError, match="non-negative ints"):
        rows(mp, MP, jnp.int32(2))


def test_triton_refuses_a_dynamic_grid_as_upstream():
    import jax

    def f(x, n):
        rows(mp, MP, n).lower(x, target="gpu")
        return x

    with pytest.raises(MiniPallasError, match="dynamic grid bounds not supported in the Triton"):
        jax.make_jaxpr(f)(normal_f32(32, 128), np.int32(2))


def test_jvp_of_a_dynamic_grid_forward_mode():
    """A traced trip count is a ``while``: forward mode works (upstream has no JVP for a
    dynamic grid); the tangent of the written blocks is the input's, NaN-free rows only."""
    import jax

    (x,) = CASES["rows"][1]()
    ours, theirs = both(rows)
    t = np.ones_like(x)
    _, tangent = jax.jvp(lambda x: ours(x, np.int32(2)), (x,), (t,))
    np.testing.assert_array_equal(np.asarray(tangent)[:16], t[:16])
    with pytest.raises(NotImplementedError, match="dynamic grid bounds"):
        jax.jvp(lambda x: theirs(x, np.int32(2)), (x,), (t,))

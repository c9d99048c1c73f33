"""Scalar prefetch (``grid_spec=minipallas.tpu.PrefetchScalarGridSpec(...)``), as upstream's.

The call's first ``num_scalar_prefetch`` operands are whole arrays that every index map
receives as refs after its grid indices (data-dependent block indices) and the kernel
receives first. Each kernel of ``prefetch_cases`` runs on the CPU (the loop program: the
batched one declines them), under ``jax.jit`` with traced prefetch operands, and imported by
``from_jaxpr`` from upstream's call; every result equals upstream ``pallas_call(...,
interpret=True)`` bit for bit. Bad grid specs raise ``MiniPallasError``s with a location and a
fix; the Triton target refuses with upstream's message.
"""

import numpy as np
import pytest
from kernel_helpers import assert_same_bits
from prefetch_cases import BY_NAME, CASES

import minipallas as mp
from minipallas.interop.importer.rules.kernel_call import kernel_from_jaxpr
from minipallas.ir.errors import MiniPallasError
from minipallas.ir.types import TPU_SMEM
from minipallas.kernels.programs.choose import cpu_program
from minipallas.kernels.programs.vectorized_grid import vectorized_grid_plan
from minipallas.lowering.runtime.compiled import compile


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_cpu_matches_upstream_interpret(case):
    args = case.inputs()
    expected = case.upstream()(*args)
    call = case.minipallas()
    assert_same_bits(call(*args), expected)
    assert_same_bits(case.minipallas(match_upstream=False)(*args), expected)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_under_jax_jit_with_traced_prefetch_operands(case):
    import jax

    args = case.inputs()
    call = case.minipallas()
    assert_same_bits(jax.jit(call)(*args), case.upstream()(*args))
    # the table is a traced value: another table gives other blocks, without retracing
    other = tuple(np.roll(a, 1, axis=-1) if a.dtype == np.int32 else a for a in args)
    assert_same_bits(jax.jit(call)(*other), case.upstream()(*other))


@pytest.mark.parametrize("in_axes", [(None, 0), (0, 0)])
def test_under_jax_vmap_matches_upstream(in_axes):
    """A batch of inputs, with one table or one table per batch element."""
    import jax

    case = BY_NAME["gather_rows"]
    idx, x = case.inputs()
    args = (np.stack([idx, idx[::-1]]) if in_axes[0] == 0 else idx, np.stack([x, -x]))
    got = jax.vmap(case.minipallas(), in_axes=in_axes)(*args)
    assert_same_bits(got, jax.vmap(case.upstream(), in_axes=in_axes)(*args))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_from_jaxpr_imports_upstream_prefetch_calls(case):
    import jax

    args = case.inputs()
    upstream = case.upstream()
    jaxpr = jax.make_jaxpr(upstream)(*args)
    kernel = kernel_from_jaxpr(jaxpr)
    assert len(kernel.scalar_prefetch) == case.num_scalar_prefetch
    assert all(t.memory_space == TPU_SMEM for t in kernel.scalar_prefetch)
    expected = upstream(*args)
    (got,) = compile(cpu_program(kernel))(*args)
    assert_same_bits(got, expected)
    (whole,) = compile(mp.from_jaxpr(jaxpr))(*args)
    assert_same_bits(whole, expected)


def test_the_kernel_model():
    case = BY_NAME["block_sparse_matmul"]
    kernel = case.minipallas().trace(*case.inputs())
    assert kernel.scalar_prefetch == (mp.RefType((2, 2), "int32", TPU_SMEM),)
    assert kernel.num_inputs == 2  # the table is not an input
    assert kernel.body.param_types[0] == kernel.scalar_prefetch[0]
    for spec in kernel.in_specs:  # index maps: (i, k, cols_ref) -> block indices
        assert spec.index_map.param_types[2:] == kernel.scalar_prefetch
    assert vectorized_grid_plan(kernel) is None


def test_the_gathered_blocks_are_the_tables():
    """What the kernels compute, stated without upstream: output block i is x's block idx[i]."""
    case = BY_NAME["gather_rows"]
    idx, x = case.inputs()
    out = case.minipallas()(idx, x)
    for i, j in enumerate(idx):
        np.testing.assert_array_equal(
            out[8 * i : 8 * i + 8], x[8 * j : 8 * j + 8] * 2 + np.float32(j)
        )
    cols, x, y = BY_NAME["block_sparse_matmul"].inputs()
    got = BY_NAME["block_sparse_matmul"].minipallas()(cols, x, y)
    for i in range(2):
        want = sum(
            x[8 * i : 8 * i + 8, 128 * c : 128 * c + 128] @ y[128 * c : 128 * c + 128]
            for c in cols[i]
        )
        np.testing.assert_allclose(got[8 * i : 8 * i + 8], want, rtol=1e-5, atol=1e-4)


def test_writes_to_a_prefetch_ref_do_not_reach_the_next_step():
    """Upstream's interpret mode drops the body's writes to prefetch refs at every step."""
    case = BY_NAME["writes_prefetch"]
    idx, x = case.inputs()
    out = case.minipallas()(idx, x)
    for i, j in enumerate(idx):
        np.testing.assert_array_equal(
            out[8 * i : 8 * i + 8], x[8 * j : 8 * j + 8] + np.float32(idx[0])
        )


def _call(**overrides):
    fields = {
        "num_scalar_prefetch": 1,
        "grid": (4,),
        "in_specs": [mp.BlockSpec((8, 128), lambda i, idx: (idx[i], 0))],
        "out_specs": mp.BlockSpec((8, 128), lambda i, idx: (i, 0)),
    }
    fields.update(overrides)
    return mp.pallas_call(
        lambda idx, x, o: None,
        mp.ArrayType((32, 128), "float32"),
        grid_spec=mp.tpu.PrefetchScalarGridSpec(**fields),
    )


IDX, X = mp.ArrayType((4,), "int32"), mp.ArrayType((32, 128), "float32")


@pytest.mark.parametrize(
    ("make", "args", "message"),
    [
        (lambda: _call(num_scalar_prefetch=-1), (), "num_scalar_prefetch must be"),
        (lambda: _call(num_scalar_prefetch=True), (), "num_scalar_prefetch must be"),
        (lambda: _call(), (IDX,), "got 0 inputs after 1 scalar-prefetch operands"),
        (lambda: _call(num_scalar_prefetch=2), (IDX,), "num_scalar_prefetch=2, but got 1"),
        (
            lambda: _call(in_specs=[mp.BlockSpec((8, 128), lambda i: (i, 0))]),
            (IDX, X),
            "and the call 1 scalar-prefetch refs",
        ),
        (
            lambda: mp.pallas_call(
                lambda i, x, o: None, X, grid=(4,), grid_spec=mp.tpu.PrefetchScalarGridSpec(1)
            ),
            (),
            "got grid_spec and also grid",
        ),
        (lambda: mp.pallas_call(lambda x, o: None, X, grid_spec=(4,)), (), "must be a grid spec"),
        (
            lambda: mp.pallas_call(
                lambda i, x, o: None,
                X,
                grid_spec=mp.tpu.PrefetchScalarGridSpec(1, grid=(4,)),
                input_output_aliases={0: 0},
            ),
            (IDX, X),
            "a scalar-prefetch operand",
        ),
    ],
)
def test_bad_grid_specs_are_errors_with_a_fix(make, args, message):
    with pytest.raises(MiniPallasError) as err:
        make().trace(*args)
    assert message in err.value.message
    assert err.value.fix and err.value.loc is not None


def test_aliases_count_the_prefetch_operands_as_upstream():
    """``{1: 0}`` names operand 1, the first input after the table (upstream's counting)."""
    case = BY_NAME["gather_rows"]
    idx, x = case.inputs()
    got = case.minipallas(input_output_aliases={1: 0})(idx, x)
    assert_same_bits(got, case.upstream(input_output_aliases={1: 0})(idx, x))
    assert case.minipallas(input_output_aliases={1: 0}).trace(idx, x).input_output_aliases == (
        (0, 0),
    )


@pytest.mark.parametrize("target", ["gpu", "ptx"])
def test_triton_refuses_as_upstream(target):
    case = BY_NAME["gather_rows"]
    with pytest.raises(MiniPallasError, match="scalar prefetch not implemented in the Triton"):
        case.minipallas().lower(*case.inputs(), target=target)


def test_grad_through_a_gather_counts_each_block_once_per_visit():
    """Upstream's ``pallas_call`` has no JVP with scalar prefetch (``NotImplementedError``);
    minipallas's CPU program differentiates: block j's gradient is 2 per visit of j."""
    import jax

    case = BY_NAME["gather_rows"]
    _, x = case.inputs()
    idx = np.array([1, 1, 0, 3], np.int32)
    grad = jax.grad(lambda x: case.minipallas()(idx, x).sum())(x)
    visits = np.bincount(idx, minlength=4).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(grad), np.repeat(2 * visits, 8)[:, None] + 0 * x)
    with pytest.raises(NotImplementedError):
        jax.grad(lambda x: case.upstream()(idx, x).sum())(x)

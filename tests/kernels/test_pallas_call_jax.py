"""A ``pallas_call`` on JAX arrays and tracers: under ``jax.jit``, ``vmap``, ``grad`` and ``jvp``.

Given a JAX value the call runs its CPU program as ``jax.lax`` ops
(``platforms/jax_values.py``),
so it stages out into the caller's trace. Results are compared bit for bit with the eager
(numpy) call and with upstream ``pallas_call(interpret=True)`` under the same transformation.
Where XLA legitimately rounds differently, the test says why and compares with a tolerance:
``jax.jit`` lets XLA keep bf16 intermediates in f32 across a fusion (``bf16_gelu``), and
``match_upstream=False`` batches float reductions (eagerly and under ``vmap``).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from kernel_helpers import assert_same_bits

import minipallas as mp
import minipallas.numpy as mnp
from minipallas.platforms import jax_values as jax_call
from minipallas.tools.corpora.suite import BY_NAME

# data movement, ints, elementwise f32, and matmul (a dot per block, summed across a grid axis)
EXACT = [
    "add", "add_partial_blocks", "bias_relu", "pick_rows", "transpose_blocks", "int_ops",
    "compare_int8", "reversed_blocks", "negative_block_index", "input_written", "matmul",
]  # fmt: skip
# float reductions: their bits depend on batching (match_upstream)
REDUCTIONS = ["row_sum", "softmax", "sum_and_max", "layer_norm_partial"]


def parts(x):
    return list(x) if isinstance(x, tuple | list) else [x]


def assert_all_same_bits(got, expected):
    got, expected = parts(got), parts(expected)
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert_same_bits(g, e)


def stacked(case, axis):
    """Two seeds' inputs stacked along ``axis``, and the eager result of each seed."""
    call = case.minipallas()
    seeds = [case.inputs(0), case.inputs(1)]
    args = [np.stack(xs, axis=axis) for xs in zip(*seeds, strict=True)]
    return call, args, [call(*xs) for xs in seeds]


def slice_of(batched, k, axis):
    return [np.take(np.asarray(b), k, axis=axis) for b in parts(batched)]


# ----- numpy in, numpy out; JAX in, JAX out -----


def test_numpy_inputs_keep_the_compiled_path_and_jax_inputs_give_jax_arrays():
    case = BY_NAME["add"]
    call, args = case.minipallas(), case.inputs()
    eager = call(*args)
    assert type(eager) is np.ndarray and call not in jax_call._FUNCTIONS
    got = call(jnp.asarray(args[0]), args[1])  # one JAX array is enough
    assert isinstance(got, jax.Array) and len(jax_call._FUNCTIONS[call]) == 1
    assert_same_bits(got, eager)


def test_the_jax_function_is_built_once_per_input_types():
    case = BY_NAME["add"]
    call, args = case.minipallas(), case.inputs()
    jax.jit(call)(*args)
    jax.jit(lambda x, y: call(x, y) * 2)(*args)
    assert len(jax_call._FUNCTIONS[call]) == 1
    call(*(jnp.asarray(a[:8]) for a in case.inputs()))  # other shapes: a second program
    assert len(jax_call._FUNCTIONS[call]) == 2


# ----- jax.jit -----


@pytest.mark.parametrize("name", [*EXACT, *REDUCTIONS])
def test_jit_with_surrounding_ops_equals_eager_and_upstream_bit_for_bit(name):
    """Ops before and after fuse with the kernel; scaling by 2 and 0.5 is exact, so the bits
    are the kernel's: measured equal to the eager call on every f32 and int suite kernel."""
    case = BY_NAME[name]
    call, up, args = case.minipallas(), case.upstream(), case.inputs()

    def around(kernel):
        def f(*xs):
            xs = [x * 2 if jnp.issubdtype(x.dtype, jnp.floating) else x for x in xs]
            return [
                o * 0.5 if jnp.issubdtype(o.dtype, jnp.floating) else o for o in parts(kernel(*xs))
            ]

        return jax.jit(f)

    got = around(call)(*args)
    assert_all_same_bits(got, around(up)(*args))
    eager = call(*[x * 2 if np.issubdtype(x.dtype, np.floating) else x for x in args])
    assert_all_same_bits(
        got, [e * 0.5 if np.issubdtype(e.dtype, np.floating) else e for e in parts(eager)]
    )


def test_jit_of_a_bf16_chain_rounds_as_xla_fuses_it():
    """Under ``jax.jit`` XLA's CPU fusion keeps bf16 intermediates in f32 (excess precision);
    op by op the same JAX program equals the eager call bit for bit. Measured: 14% of the
    gelu's elements differ, by at most 1.1% (a few bf16 ulps, through tanh)."""
    case = BY_NAME["bf16_gelu"]
    call, args = case.minipallas(), case.inputs()
    eager = call(*args)
    with jax.disable_jit():
        assert_same_bits(call(*map(jnp.asarray, args)), eager)
    got = np.asarray(jax.jit(call)(*args)).astype(np.float32)
    np.testing.assert_allclose(got, eager.astype(np.float32), rtol=2e-2, atol=1e-2)


# ----- jax.vmap -----


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("name", [*EXACT, *REDUCTIONS])
def test_vmap_equals_each_eager_slice_and_upstream_vmap(name, axis):
    """One kernel run per batch element, as upstream's added grid axis: float reductions keep
    the unbatched bits too."""
    case = BY_NAME[name]
    call, args, eager = stacked(case, axis)
    got = jax.vmap(call, in_axes=axis, out_axes=axis)(*args)
    assert_all_same_bits(got, jax.vmap(case.upstream(), in_axes=axis, out_axes=axis)(*args))
    for k in range(2):
        assert_all_same_bits(slice_of(got, k, axis), eager[k])


def test_vmap_with_an_unbatched_input_and_vmap_of_vmap():
    case = BY_NAME["bias_relu"]
    call, (x, b) = case.minipallas(), case.inputs()
    xs = np.stack([x, case.inputs(1)[0]])
    got = jax.vmap(call, in_axes=(0, None))(xs, b)
    for k in range(2):
        assert_same_bits(got[k], call(xs[k], b))
    twice = jax.vmap(jax.vmap(call, in_axes=(0, None)), in_axes=(0, None))(np.stack([xs, xs]), b)
    assert_same_bits(twice[1], got)


@pytest.mark.parametrize("inner, outer", [((0, 1), (0, 2)), ((1, 0), (2, 0)), ((0, 0), (1, 1))])
def test_vmap_of_vmap_of_a_dot_kernel_with_operands_batched_on_different_axes(inner, outer):
    """Each (outer, inner) slice of a doubly vmapped blocked matmul (scratch accumulator over
    a k grid axis) gives the eager call's bits, whichever axes each operand is batched on."""
    case = BY_NAME["matmul"]
    call = case.minipallas()
    rng = np.random.default_rng(7)
    shapes = [list(a.shape) for a in case.inputs()]
    for shape, i, o in zip(shapes, inner, outer, strict=True):
        shape.insert(i, 3)
        shape.insert(o, 2)
    x, y = (rng.standard_normal(shape).astype(np.float32) for shape in shapes)
    got = jax.vmap(jax.vmap(call, in_axes=inner), in_axes=outer)(x, y)
    for a in range(2):
        for b in range(3):
            one = [
                np.take(np.take(v, a, o), b, i)
                for v, i, o in zip((x, y), inner, outer, strict=True)
            ]
            assert_same_bits(np.asarray(got)[a, b], call(*one))


@pytest.mark.parametrize("name", REDUCTIONS)
def test_vmap_without_match_upstream_batches_the_ops(name):
    """``match_upstream=False`` batches the reductions themselves (faster): close to the exact
    call, not equal, as its eager call is; on these kernels measured equal to that eager call."""
    case = BY_NAME[name]
    fast, exact = case.minipallas(match_upstream=False), case.minipallas()
    args = [np.stack(xs) for xs in zip(case.inputs(0), case.inputs(1), strict=True)]
    got = jax.vmap(fast)(*args)
    for k in range(2):
        one = [a[k] for a in args]
        assert_all_same_bits(slice_of(got, k, 0), fast(*one))
        for g, e in zip(slice_of(got, k, 0), parts(exact(*one)), strict=True):
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["int_ops", "transpose_blocks", "matmul"])
def test_jit_of_vmap_and_vmap_of_jit(name):
    case = BY_NAME[name]
    call, args, eager = stacked(case, 0)
    for got in (jax.jit(jax.vmap(call))(*args), jax.vmap(jax.jit(call))(*args)):
        for k in range(2):
            assert_all_same_bits(slice_of(got, k, 0), eager[k])


# ----- jax.grad and jax.jvp -----


def test_grad_of_an_elementwise_kernel_equals_grad_of_its_jnp_equivalent():
    """A fully batched grid (no loops) is differentiable op by op: ``where`` and the affine
    map give the gradient ops of the jnp program."""
    case = BY_NAME["bias_relu"]
    call, (x, b) = case.minipallas(), case.inputs()

    def reference(x, b):
        y = x * 0.5 + b
        return jnp.where(y > 0, y, y * 0.01)

    for argnum in (0, 1):
        got = jax.jit(jax.grad(lambda *a: jnp.sum(call(*a) ** 2), argnums=argnum))(x, b)
        want = jax.jit(jax.grad(lambda *a: jnp.sum(reference(*a) ** 2), argnums=argnum))(x, b)
        np.testing.assert_allclose(got, want, rtol=1e-6)
        assert got.shape == (x, b)[argnum].shape


def test_jvp_of_a_looping_kernel_is_the_kernel_on_the_tangent():
    """matmul's grid reduces over K in a loop; forward mode goes through the loop, and the
    tangent of ``x @ y`` along ``t`` is the kernel on ``(t, y)``, bit for bit."""
    case = BY_NAME["matmul"]
    call, (x, y) = case.minipallas(), case.inputs()
    t = case.inputs(1)[0]
    out, tangent = jax.jvp(lambda x: call(x, y), (x,), (t,))
    assert_same_bits(out, call(x, y))
    assert_same_bits(tangent, call(t, y))


# the jnp program each looping kernel computes
LOOP_REFERENCES = {
    "matmul": jnp.dot,
    "row_sum": lambda x: x.sum(axis=1, keepdims=True),
    "softmax": lambda x: jax.nn.softmax(x, axis=1),
}


@pytest.mark.parametrize("name", sorted(LOOP_REFERENCES))
def test_grad_through_grid_loops_is_close_to_grad_of_the_jnp_program(name):
    """Grid loops run as ``fori_loop`` over constant bounds, which JAX turns into a reversible
    ``scan`` (upstream's interpret-mode pallas_call has no reverse mode). The kernel sums in
    blocks, the jnp program at once: close, not equal."""
    case = BY_NAME[name]
    call, args = case.minipallas(), case.inputs()
    out, pullback = jax.vjp(call, *args)
    cotangent = np.random.default_rng(1).standard_normal(out.shape).astype(np.float32)
    _, reference = jax.vjp(LOOP_REFERENCES[name], *args)
    for got, want in zip(pullback(cotangent), reference(cotangent), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_grad_through_a_loop_over_traced_bounds_is_jaxs_reverse_mode_limit():
    """A ``fori_loop`` whose trip count depends on the grid index is a ``while`` loop: forward
    mode works, reverse mode is JAX's documented limit."""

    def kernel(x_ref, o_ref):
        def step(i, acc):
            return acc + x_ref[...]

        zeros = mnp.zeros(x_ref.shape, mnp.float32)
        o_ref[...] = mp.fori_loop(0, mp.program_id(0) + 1, step, zeros)

    spec = mp.BlockSpec((1, 8), lambda i: (i, 0))
    call = mp.pallas_call(
        kernel, mp.ArrayType((4, 8), "float32"), grid=(4,), in_specs=[spec], out_specs=spec
    )
    x = np.ones((4, 8), np.float32)
    _, tangent = jax.jvp(call, (x,), (x,))
    assert_same_bits(tangent, call(x))
    assert_same_bits(tangent[:, 0], np.array([1, 2, 3, 4], np.float32))
    with pytest.raises(ValueError, match="Reverse-mode differentiation does not work"):
        jax.grad(lambda x: jnp.sum(call(x)))(x)


def test_grad_of_vmap_and_vmap_of_grad_agree():
    case = BY_NAME["matmul"]
    call, args, _ = stacked(case, 0)

    def loss(x, y):
        return jnp.sum(jnp.sin(call(x, y)))

    per_slice = jax.vmap(jax.grad(loss))(*args)
    batched = jax.grad(lambda x, y: jnp.sum(jax.vmap(loss)(x, y)))(*args)
    np.testing.assert_allclose(per_slice, batched, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(per_slice[1], jax.grad(loss)(args[0][1], args[1][1]), rtol=1e-5)

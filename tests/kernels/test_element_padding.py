"""``Element(n, padding=(low, high))`` on the CPU: bit for bit with upstream ``interpret=True``,
which pads the operand with its fill value (``low`` before, ``high`` after, then up to whole
blocks), lets the index map pick element offsets into that padded array, and crops outputs
back. Also: from_jaxpr of a padded upstream call, under ``jax.jit``, and the refusals."""

import numpy as np
import pytest
from element_cases import BY_NAME, CPU_CASES, Calls, E

import minipallas
from minipallas.interop.importer.rules.kernel_call import kernel_from_jaxpr
from minipallas.ir.errors import MiniPallasError, TraceError

jax = pytest.importorskip("jax")


@pytest.mark.parametrize("case", CPU_CASES, ids=lambda c: c.name)
def test_padded_element_dims_match_upstream_interpret_mode(case):
    expected = np.asarray(case.upstream()(*case.args))
    got = case.minipallas()(*case.args)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert got.tobytes() == expected.tobytes()


def test_the_padding_is_visible_as_the_fill_value():
    """The first window starts in the low padding: its first element reads NaN there."""
    case = BY_NAME["halo"]
    got = case.minipallas()(*case.args)
    assert np.isnan(got[0]) and not np.isnan(got[1:-1]).any() and np.isnan(got[-1])


def test_padded_element_dims_import_from_upstream_and_run_the_same():
    case = BY_NAME["rows_window"]
    jaxpr = jax.make_jaxpr(case.upstream())(*case.args)
    kernel = kernel_from_jaxpr(jaxpr)
    spec = kernel.in_specs[0]
    assert spec.element_dims == frozenset({0, 1})
    assert spec.padding == ((4, 4), (64, 64))
    (out,) = minipallas.compile(minipallas.from_jaxpr(jaxpr))(*case.args)
    assert out.tobytes() == np.asarray(case.upstream()(*case.args)).tobytes()


def test_padded_element_dims_under_jax_jit_match_upstream():
    case = BY_NAME["pad_past_blocks"]
    ours = jax.jit(case.minipallas())(*case.args)
    theirs = jax.jit(case.upstream())(*case.args)
    assert np.asarray(ours).tobytes() == np.asarray(theirs).tobytes()


def test_padded_element_dims_under_jax_vmap_match_upstream():
    case = BY_NAME["pad_past_blocks"]
    xs = np.stack([case.args[0], case.args[0] * 3 - 1])
    ours = jax.vmap(case.minipallas())(xs)
    theirs = jax.vmap(case.upstream())(xs)
    assert np.asarray(ours).tobytes() == np.asarray(theirs).tobytes()


def _aliased() -> Calls:
    return Calls(
        "aliased",
        lambda x_ref, o_ref: o_ref.__setitem__(..., x_ref[0:8] * 2.0),
        ((64,), np.float32),
        (8,),
        [((E(16, 4, 4),), lambda i: (i * 8,))],
        ((8,), lambda i: (i,)),
        (np.arange(64, dtype=np.float32),),
        aliases={0: 0},
    )


def test_padding_with_aliasing_is_refused_as_upstream():
    case = _aliased()
    with pytest.raises(NotImplementedError, match="Padding with aliasing not supported"):
        case.upstream()(*case.args)
    with pytest.raises(TraceError, match="Padding with aliasing not supported") as e:
        case.minipallas()(*case.args)
    assert e.value.op == "pallas_call"
    assert "test_element_padding.py" in str(e.value.loc)
    assert "jnp.pad" in e.value.fix


@pytest.mark.parametrize("padding", [(-1, 0), (1,), (1.5, 0), (True, 0), "ab"])
def test_a_bad_padding_is_refused_with_a_fix(padding):
    spec = minipallas.BlockSpec((minipallas.Element(16, padding),), lambda i: (i * 8,))
    call = minipallas.pallas_call(
        lambda x_ref, o_ref: None,
        minipallas.ArrayType((64,), "float32"),
        grid=(8,),
        in_specs=[spec],
        out_specs=minipallas.BlockSpec((8,), lambda i: (i,)),
    )
    with pytest.raises(TraceError, match="padding of two non-negative ints") as e:
        call.trace(minipallas.ArrayType((64,), "float32"))
    assert isinstance(e.value, MiniPallasError)
    assert "test_element_padding.py" in str(e.value.loc)
    assert "padding=(low, high)" in e.value.fix


def test_unpadded_specs_carry_no_padding():
    case = BY_NAME["halo"]
    kernel = case.minipallas().trace(*case.args)
    assert kernel.in_specs[0].padding == ((1, 1),)
    assert kernel.out_specs[0].padding == ()
    assert kernel.out_specs[0].pads == ((0, 0),)


def test_an_upstream_call_with_a_negative_padding_is_not_imported():
    from minipallas.interop.importer.avals import JaxprImportError

    case = Calls("negative", BY_NAME["halo"].kernel, ((64,), np.float32), (8,),
                 [((E(10, -1, 3),), lambda i: (i * 8,))], ((8,), lambda i: (i,)),
                 BY_NAME["halo"].args)  # fmt: skip
    with pytest.raises(JaxprImportError, match="padded by non-negative ints") as e:
        kernel_from_jaxpr(jax.make_jaxpr(case.upstream())(*case.args))
    assert "Element(10, padding=(-1, 3))" in e.value.message

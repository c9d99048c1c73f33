"""The structural ops in Mosaic, against upstream Pallas TPU lowered on this CPU machine.

``pad`` (``tpu.concatenate``) and ``argmax`` / ``argmin`` (``tpu.reduce_index``) give
upstream's module, text for text once locations and names are set aside; ``reverse``, the
cumulative ops, ``reduce_prod``, ``sort`` and ``top_k``, which upstream rejects
("Unimplemented primitive"), are rejected with a ``PassError`` naming the op, its line and a
fix; so are the ``pad`` / ``argmax`` forms upstream cannot lower.
"""

import pytest
from filecheck_util import filecheck
from tpu_util import kernel, spec

from minipallas.frontend.scopes import emit
from minipallas.frontend.values import TracedArray, constant
from minipallas.ir.errors import PassError
from minipallas.lowering.tpu import lower_to_mosaic
from minipallas.numpy import broadcast_to
from minipallas.tools.difftest.mosaic import UpstreamError, compare, upstream_mosaic

X = ((8, 128), "float32")


def _ours(fn, x, out):
    """The one-block kernel ``o_ref[...] = fn(x_ref[...])`` on a (1,) arbitrary grid."""

    def body(x_ref, o_ref):
        o_ref[...] = fn(x_ref[...])

    k = kernel(body, (1,), [spec(*x)], [spec(*out)], dimension_semantics=["arbitrary"])
    return lower_to_mosaic(k)


def _theirs(fn, x, out):
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def body(x_ref, o_ref):
        o_ref[...] = fn(x_ref[...])

    zeros = lambda shape: lambda i: (0,) * len(shape)  # noqa: E731
    call = pl.pallas_call(
        body,
        jax.ShapeDtypeStruct(out[0], jnp.dtype(out[1])),
        grid=(1,),
        in_specs=[pl.BlockSpec(x[0], zeros(x[0]))],
        out_specs=pl.BlockSpec(out[0], zeros(out[0])),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
    )
    return upstream_mosaic(call, jax.ShapeDtypeStruct(x[0], jnp.dtype(x[1])))


def _op(name, **attrs):
    def fn(x):
        return emit(TracedArray, name, [x], attrs)[0]

    return fn


def _pad(low, high, interior=(0, 0), value=0.0):
    def fn(x):
        v = constant(value, "float32")
        return emit(TracedArray, "pad", [x, v], {"low": low, "high": high, "interior": interior})[0]

    return fn


def _lax_pad(low, high, value=0.0):
    from jax import lax

    return lambda x: lax.pad(x, value, [(a, b, 0) for a, b in zip(low, high, strict=True)])


def _lax_arg(name, axis):
    import jax.numpy as jnp

    return lambda x: getattr(jnp, name)(x, axis=axis)


def _jnp_broadcast_to(x, shape):
    import jax.numpy as jnp

    return jnp.broadcast_to(x, shape)


def _spread(fn, to=None):
    """``fn``'s scalar broadcast to 128 lanes (a TPU block has rank >= 1) by ``to``'s
    ``broadcast_to`` (minipallas's unless given)."""
    return lambda x: (to or broadcast_to)(fn(x), (128,))


SUPPORTED = [
    ("pad_low_rows", _pad((8, 0), (0, 0)), _lax_pad((8, 0), (0, 0)), X, ((16, 128), "float32")),
    (
        "pad_both_dims",
        _pad((8, 128), (16, 0), value=-1.5),
        _lax_pad((8, 128), (16, 0), value=-1.5),
        X,
        ((32, 256), "float32"),
    ),
    (
        "argmax_lanes",
        _op("argmax", axis=1, dtype="int32"),
        _lax_arg("argmax", 1),
        X,
        ((8,), "int32"),
    ),
    (
        "argmin_rows",
        _op("argmin", axis=0, dtype="int32"),
        _lax_arg("argmin", 0),
        X,
        ((128,), "int32"),
    ),
    (
        "argmax_1d",
        _spread(_op("argmax", axis=0, dtype="int32")),
        _spread(_lax_arg("argmax", 0), to=_jnp_broadcast_to),
        ((128,), "float32"),
        ((128,), "int32"),
    ),
]


@pytest.mark.parametrize("ours, theirs, x, out", [c[1:] for c in SUPPORTED],
                         ids=[c[0] for c in SUPPORTED])  # fmt: skip
def test_supported_forms_give_upstreams_module(ours, theirs, x, out):
    try:
        upstream = _theirs(theirs, x, out)
    except UpstreamError as e:
        pytest.fail(f"upstream should lower this form: {e}")
    diff = compare(_ours(ours, x, out).module, upstream)
    assert diff.ops == {} and diff.signature is None and diff.memrefs == {}, str(diff)
    assert diff.same_text, str(diff)


def test_pad_is_concatenated_splats_and_argmax_a_reduce_index():
    text = _ours(_pad((8, 0), (8, 0), value=-1.5), X, ((24, 128), "float32")).as_text(
        debug_info=False
    )
    filecheck(
        text,
        """
        CHECK: %[[PAD:.*]] = arith.constant dense<-1.500000e+00> : vector<8x128xf32>
        CHECK: %[[X:.*]] = vector.load
        CHECK: %[[LOW:.*]] = tpu.concatenate %[[PAD]], %[[X]] in 0 : vector<8x128xf32>, vector<8x128xf32> -> vector<16x128xf32>
        CHECK: tpu.concatenate %[[LOW]], %[[PAD]] in 0 : vector<16x128xf32>, vector<8x128xf32> -> vector<24x128xf32>
        """,  # noqa: E501
    )
    text = _ours(
        _spread(_op("argmin", axis=0, dtype="int32")), ((128,), "float32"), ((128,), "int32")
    )
    filecheck(
        text.as_text(debug_info=False),
        """
        CHECK: %[[X2:.*]] = vector.shape_cast %{{.*}} : vector<128xf32> to vector<1x128xf32>
        CHECK: %[[I:.*]] = tpu.reduce_index %[[X2]] {axis = 1 : i32, kind = #tpu.reduction_kind<arg_min>} : vector<1x128xf32> -> vector<1xi32>
        CHECK: vector.extract %[[I]][0] : i32 from vector<1xi32>
        """,  # noqa: E501
    )


def _lax(name):
    import jax.numpy as jnp
    from jax import lax

    return {
        "reverse": lambda x: lax.rev(x, (1,)),
        "cumsum": lambda x: lax.cumsum(x, axis=1),
        "cumprod": lambda x: lax.cumprod(x, axis=1),
        "cummax": lambda x: lax.cummax(x, axis=1),
        "cummin": lambda x: lax.cummin(x, axis=1),
        "reduce_prod": lambda x: jnp.prod(x, axis=1),
        "sort": lambda x: jnp.sort(x, axis=1),
        "top_k": lambda x: lax.top_k(x, 128)[0],
    }[name]


REJECTED = [
    ("reverse", {"dims": (1,)}, X, "rev", "flip the array outside the kernel"),
    *(
        (n, {"axis": 1, "reverse": False}, X, n, f"compute the {n} outside the kernel")
        for n in ("cumsum", "cumprod", "cummax", "cummin")
    ),
    ("reduce_prod", {"axes": (1,)}, ((8,), "float32"), "reduce_prod", "product outside"),
    ("sort", {"dimension": 1, "num_keys": 1}, X, "sort", "sort outside the kernel"),
    ("top_k", {"k": 128}, X, "top_k", "top_k outside the kernel"),
]


@pytest.mark.parametrize("name, attrs, out, upstream_name, fix", REJECTED,
                         ids=[r[0] for r in REJECTED])  # fmt: skip
def test_ops_upstream_cannot_lower_are_rejected_with_a_fix(name, attrs, out, upstream_name, fix):
    with pytest.raises(UpstreamError, match=f"Unimplemented primitive .*: {upstream_name}\\."):
        _theirs(_lax(name), X, out)
    with pytest.raises(PassError, match="no Mosaic TPU lowering") as e:
        _ours(_op(name, **attrs), X, out)
    assert e.value.op == name and "test_tpu_structural.py" in str(e.value.loc)
    assert fix in e.value.fix


@pytest.mark.parametrize(
    "fn, x, out, upstream, ours",
    [
        (_pad((0, 0), (0, 0), (1, 0)), X, ((15, 128), "float32"), None, "interior padding"),
        (_pad((8, 0), (-8, 0)), X, X, _lax_pad((8, 0), (-8, 0)), "negative amounts"),
        (
            _op("argmax", axis=1, dtype="int32"),
            ((8, 128), "int32"),
            ((8,), "int32"),
            _lax_arg("argmax", 1),
            "argmax of int32",
        ),
    ],
    ids=["interior", "negative", "int_argmax"],
)
def test_forms_upstream_cannot_lower_are_rejected(fn, x, out, upstream, ours):
    """Upstream raises (or, for a negative pad, builds an invalid vector type) on each."""
    if upstream is not None:
        with pytest.raises(UpstreamError):
            _theirs(upstream, x, out)
    with pytest.raises(PassError, match=ours) as e:
        _ours(fn, x, out)
    assert e.value.fix

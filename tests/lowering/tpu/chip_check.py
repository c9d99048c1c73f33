"""On a TPU machine: the forms issue 26 found, run through minipallas's own Mosaic modules.

Not a pytest file (CI has no chip). Each kernel's module runs on the chip through jax's
``as_tpu_kernel`` with upstream ``pallas_call``'s defaults, and is compared bit for bit with
numpy's answer or upstream's ``pallas_call(interpret=False)`` on the same chip. Prints one line
a kernel; exits 1 on any difference. Run from the repository root with minipallas installed:

    python tests/lowering/tpu/chip_check.py
"""

import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import minipallas as mp
from minipallas.interop.importer.rules.kernel_call import kernel_from_jaxpr
from minipallas.lowering.compat.jax_private import tpu_custom_call
from minipallas.lowering.tpu import aot, lower_to_mosaic


def ours(call, *args, aliases=None):
    """Upstream-written ``call``'s kernel, imported, emitted by minipallas and run on the chip."""
    specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args]
    kernel = kernel_from_jaxpr(jax.make_jaxpr(call)(*specs), memory_space=mp.tpu.VMEM)
    _, results = aot.custom_call_types(kernel)
    fn = tpu_custom_call.as_tpu_kernel(
        lower_to_mosaic(kernel).module,
        tuple(jax.ShapeDtypeStruct(s, d) for s, d in results),
        input_output_aliases=tuple(kernel.input_output_aliases),
        shape_invariant_numerics=True,
        needs_layout_passes=True,
    )
    out = fn(*args)
    return [np.asarray(o) for o in (out if isinstance(out, list | tuple) else [out])]


def _ne(x_ref, y_ref, o_ref):
    o_ref[...] = jnp.where(x_ref[...] != y_ref[...], 1, 0)


def _concat(x_ref, o_ref):
    x = x_ref[...]
    o_ref[...] = jnp.concatenate([jnp.stack([x, x * 2.0]), jnp.stack([x - 1.0] * 2)], axis=0)


def _wrap(x_ref, o_ref):
    o_ref[...] = jnp.pad(x_ref[...], ((8, 8), (0, 0)), mode="wrap")


def _bdot(x_ref, y_ref, o_ref):
    o_ref[...] = jnp.einsum("bij,bjk->bik", x_ref[...], y_ref[...])


def _int8(x_ref, y_ref, o_ref, m_ref):
    x, y = x_ref[...], y_ref[...]
    o_ref[...] = (x + y) * x - (y >> 2)
    m_ref[...] = jnp.maximum(x.astype(jnp.uint8), y.astype(jnp.uint8))


def _swap_outputs(x_ref, y_ref, ox_ref, oy_ref):  # reads output blocks nothing wrote
    a, b = ox_ref[...], oy_ref[...]
    ox_ref[...] = b
    oy_ref[...] = a


def _swap(x_ref, y_ref, ox_ref, oy_ref):  # the fix: read the aliased inputs
    a, b = x_ref[...], y_ref[...]
    ox_ref[...] = b
    oy_ref[...] = a


def _fill(ox_ref, oy_ref):  # leaves known values in VMEM for the next kernel
    ox_ref[...] = jnp.full(ox_ref.shape, 7.0, ox_ref.dtype)
    oy_ref[...] = jnp.full(oy_ref.shape, 9.0, oy_ref.dtype)


def undefined_output_reads(f: np.ndarray) -> int:
    """The aliased swap that reads its outputs: minipallas refuses it ahead of time; upstream
    runs it, and after a kernel that leaves 7s and 9s in VMEM it returns them (issue 26)."""
    S = jax.ShapeDtypeStruct
    pair = (S(f.shape, f.dtype),) * 2
    upstream = pl.pallas_call(_swap_outputs, pair, input_output_aliases={0: 0, 1: 1})
    try:
        ours(upstream, jnp.asarray(f), jnp.asarray(f + 1))
        print("undefined_reads: NOT REFUSED by minipallas")
        return 1
    except mp.MiniPallasError as e:
        print(f"undefined_reads: refused ahead of time ({str(e).splitlines()[0][:90]}...)")
    jax.block_until_ready(jax.jit(pl.pallas_call(_fill, pair))())
    got = [np.asarray(o) for o in jax.jit(upstream)(jnp.asarray(f), jnp.asarray(f + 1))]
    stale = all(np.isin(g, (7.0, 9.0)).all() for g in got)
    right = all(np.array_equal(g, w) for g, w in zip(got, (f + 1, f), strict=True))
    verdict = "stale VMEM" if stale else "right" if right else "other"
    print(f"undefined_reads: upstream's run gives {verdict} values")
    return 0


def _roll_by(s_ref, x_ref, o_ref):
    o_ref[...] = pltpu.roll(x_ref[...], s_ref[0], 1) + pltpu.roll(
        x_ref[...], s_ref[1], 1, stride=3, stride_axis=0
    )


def _diagonal(x_ref, o_ref):
    o_ref[...] = jnp.diagonal(x_ref[...])[None, :] * jnp.ones((8, 1), jnp.float32)


def _through_views(x_ref, o_ref):
    o_ref[...] = jnp.zeros((16, 128), jnp.int32)
    o_ref.bitcast(jnp.int16)[0:16] = x_ref[0:16]
    o_ref.at[8:16].bitcast(jnp.int8)[0:16] = x_ref[0:16].astype(jnp.int8)
    o_ref.reshape(2, 8, 128).at[1].bitcast(jnp.int16)[8:16] = x_ref[16:24] + 1


def _roll_expected(shifts, x):
    """jnp.roll's meaning (the shift modulo the size), the strided roll slice by slice."""
    strided = np.stack([np.roll(x[i], shifts[1] + 3 * i) for i in range(x.shape[0])])
    return [np.roll(x, shifts[0] % x.shape[1], 1) + strided]


def main() -> int:
    rng = np.random.default_rng(0)
    f = rng.standard_normal((8, 128)).astype(np.float32)
    row_x = np.tile(np.array([np.nan, 1, -0.0, np.inf], np.float32), (8, 32))
    row_y = np.tile(np.array([np.nan, 1, 0.0, np.nan], np.float32), (8, 32))
    i8 = [rng.integers(-128, 128, (32, 128), dtype=np.int8) for _ in "xy"]
    bx, by = (
        rng.standard_normal((2, 8, 128), np.float32),
        rng.standard_normal((2, 128, 128), np.float32),
    )
    S = jax.ShapeDtypeStruct
    smem, vm = pl.BlockSpec(memory_space=pltpu.SMEM), pl.BlockSpec()
    shifts = np.array([-3, 130], np.int32)
    square = rng.standard_normal((128, 128)).astype(np.float32)
    i16 = rng.integers(-(2**15), 2**15, (32, 128)).astype(np.int16)
    with np.errstate(over="ignore"):
        int8_expected = [
            (i8[0] + i8[1]) * i8[0] - (i8[1] >> 2),
            np.maximum(*(a.view(np.uint8) for a in i8)),
        ]
    checks = {  # name: (upstream-written call, args, expected or None for upstream's chip run)
        "ne_nan": (pl.pallas_call(_ne, S((8, 128), jnp.int32)), (row_x, row_y),
                   [(row_x != row_y).astype(np.int32)]),
        "concat_stack": (pl.pallas_call(_concat, S((4, 8, 128), jnp.float32)), (f,), None),
        "wrap_pad": (pl.pallas_call(_wrap, S((24, 128), jnp.float32)), (f,), None),
        "batched_dot": (pl.pallas_call(_bdot, S((2, 8, 128), jnp.float32)), (bx, by), None),
        "int8": (pl.pallas_call(_int8, (S((32, 128), jnp.int8), S((32, 128), jnp.uint8))),
                 tuple(i8), int8_expected),
        "aliased_swap": (pl.pallas_call(_swap, (S((8, 128), jnp.float32),) * 2,
                                        input_output_aliases={0: 0, 1: 1}), (f, f + 1), [f + 1, f]),
        # issue 26: pltpu.roll by shifts upstream passes on unreduced (negative, past the size)
        "roll_any_shift": (pl.pallas_call(_roll_by, S((8, 128), jnp.float32), in_specs=[smem, vm]),
                           (shifts, f), _roll_expected(shifts, f)),
        "diagonal": (pl.pallas_call(_diagonal, S((8, 128), jnp.float32)), (square,), None),
        "bitcast_view_writes": (pl.pallas_call(_through_views, S((16, 128), jnp.int32)),
                                (i16,), None),
    }  # fmt: skip
    failed = 0
    for name, (call, args, expected) in checks.items():
        if expected is None:
            expected = [np.asarray(o) for o in jax.tree.leaves(jax.jit(call)(*args))]
        for run in range(3):  # the aliased swap once differed from run to run
            got = ours(call, *map(jnp.asarray, args))
            same = all(
                g.tobytes() == np.asarray(e).tobytes() for g, e in zip(got, expected, strict=True)
            )
            failed += not same
            print(f"{name:14s} run {run}: {'same bits' if same else 'DIFFERENT'}")
    return 1 if failed or undefined_output_reads(f) else 0


if __name__ == "__main__":
    sys.exit(main())

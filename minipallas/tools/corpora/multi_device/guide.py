"""The kernels of upstream's guide "Distributed Computing in Pallas for TPUs", as its interpret
tests run them (``tests/pallas/tpu_pallas_interpret_distributed_test.py``), and upstream's
shipped ``jax.experimental.pallas.ops.tpu.all_gather``.

The guide's all-gather, all-reduce and reduce-scatter step through a grid (one remote copy per
grid step, semaphores and scratch kept across steps); the reduce-scatter is the guide's
bidirectional kernel (half of each block travels left, half right). Upstream's race-detection
test is here too, with its ring closed (``[3, 0]`` added) so that every device's output is
written and numpy can say what it holds.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas.ops.tpu import all_gather as shipped

from minipallas.tools.corpora.multi_device.case import (
    DMA,
    GUIDE,
    INTERPRET_TEST,
    MESH,
    REGULAR,
    SHIPPED,
    Build,
    Case,
    Fn,
    P,
    Ref,
    blocks,
    ints,
    mesh,
)
from minipallas.tools.corpora.multi_device.rings import barrier, remote, ring, signal


def _right_permute(n: int) -> Build:
    """Each device sends its shard to its right neighbour, behind a barrier with both."""

    def kernel(input_ref: Ref, output_ref: Ref, send_sem: Ref, recv_sem: Ref) -> None:
        _, left, right = ring(n)
        barrier([left, right])
        copy = pltpu.make_async_remote_copy(
            input_ref, output_ref, send_sem, recv_sem, device_id=(right,), device_id_type=MESH
        )
        copy.start()
        copy.wait()

    def build() -> Fn:
        grid_spec = pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=0,
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[DMA] * 2,
        )
        call = pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
            grid_spec=grid_spec,
            compiler_params=pltpu.CompilerParams(collective_id=13),
        )
        return jax.shard_map(
            call,
            mesh=mesh((n,), ("x",)),
            in_specs=P(None, "x"),
            out_specs=P(None, "x"),
            check_vma=False,
        )

    return build


def _all_gather(n: int) -> Build:
    """One grid step per hop: the slot received last step goes on to the right."""

    def kernel(
        input_ref: Ref, output_ref: Ref, local_copy_sem: Ref, send_sem: Ref, recv_sems: Ref
    ) -> None:
        step = pl.program_id(0)
        me, left, right = ring(n)
        slot = lax.rem(me - step + n, jnp.int32(n))

        @pl.when(step == 0)
        def _() -> None:
            barrier([left, right])
            local = pltpu.make_async_copy(input_ref, output_ref.at[me], local_copy_sem)
            local.start()
            local.wait()

        copy = pltpu.make_async_remote_copy(
            output_ref.at[slot],
            output_ref.at[slot],
            send_sem,
            recv_sems.at[step],
            device_id=(right,),
            device_id_type=MESH,
        )
        copy.start()
        copy.wait()

    def build() -> Fn:
        grid_spec = pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=0,
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[DMA] * 2 + [DMA((n - 1,))],
            grid=(n - 1,),
        )
        call = pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((n, 8, 128), jnp.float32),
            grid_spec=grid_spec,
            compiler_params=pltpu.CompilerParams(collective_id=0),
        )
        return jax.shard_map(
            call,
            mesh=mesh((n,), ("x",)),
            in_specs=P("x", None),
            out_specs=P("x", None),
            check_vma=False,
        )

    return build


def _all_reduce(n: int) -> Build:
    """A ring of N grid steps over a double buffer kept in an HBM output, with a capacity
    semaphore so that a neighbour never writes the slot being read."""

    def kernel(
        x_ref: Ref,
        o_ref: Ref,
        hbm_scratch: Ref,
        copy_sem: Ref,
        remote_recv_sem: Ref,
        remote_send_sem: Ref,
        capacity_sem: Ref,
        receive_scratch: Ref,
    ) -> None:
        step = pl.program_id(0)
        working = lax.rem(step, jnp.int32(2))
        receiving = 1 - working
        _, left, right = ring(n)

        @pl.when(step == 0)
        def _() -> None:
            barrier([left, right])
            o_ref[...] = jnp.zeros_like(o_ref)
            receive_scratch[...] = jnp.zeros_like(receive_scratch)
            initial = pltpu.make_async_remote_copy(
                x_ref,
                hbm_scratch.at[working],
                remote_send_sem,
                remote_recv_sem,
                device_id=(right,),
                device_id_type=MESH,
            )
            initial.start()
            initial.wait()

        pl.semaphore_signal(capacity_sem, inc=1, device_id=(left,), device_id_type=MESH)
        local = pltpu.make_async_copy(hbm_scratch.at[working], receive_scratch, copy_sem)
        local.start()
        pl.semaphore_wait(capacity_sem, 1)
        remote = pltpu.make_async_remote_copy(
            hbm_scratch.at[working],
            hbm_scratch.at[receiving],
            remote_send_sem,
            remote_recv_sem,
            device_id=(right,),
            device_id_type=MESH,
        )
        remote.start()
        local.wait()
        o_ref[...] += receive_scratch[...]
        remote.wait()

    def build() -> Fn:
        grid_spec = pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=0,
            in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
            out_specs=[pl.BlockSpec(memory_space=pltpu.VMEM), pl.BlockSpec(memory_space=pl.ANY)],
            grid=(n,),
            scratch_shapes=[DMA] * 3 + [REGULAR] + [pltpu.VMEM((8, 128), jnp.float32)],
        )
        call = pl.pallas_call(
            kernel,
            out_shape=(
                jax.ShapeDtypeStruct((8, 128), jnp.float32),
                jax.ShapeDtypeStruct((2, 8, 128), jnp.float32),
            ),
            grid_spec=grid_spec,
            compiler_params=pltpu.CompilerParams(collective_id=0),
        )
        f = jax.shard_map(
            call,
            mesh=mesh((n,), ("x",)),
            in_specs=P(None, "x"),
            out_specs=P(None, "x"),
            check_vma=False,
        )
        return lambda x: f(x)[0]

    return build


def _reduce_scatter(n: int) -> Build:
    """The guide's bidirectional reduce-scatter: grid (N, 2), phase 0 sends half of a block to
    the left, phase 1 the other half to the right, each behind its capacity semaphore."""
    rows = 16
    half = rows // 2

    def kernel(
        x_ref: Ref,
        o_ref: Ref,
        hbm_scratch: Ref,
        local_copy_sem: Ref,
        left_recv_sem: Ref,
        left_send_sem: Ref,
        right_recv_sem: Ref,
        right_send_sem: Ref,
        left_capacity_sem: Ref,
        right_capacity_sem: Ref,
        accum_scratch: Ref,
    ) -> None:
        step, phase = pl.program_id(0), pl.program_id(1)
        is_start = jnp.logical_and(step == 0, phase == 0)
        last = step == pl.num_programs(0) - 1
        working = lax.rem(step, jnp.int32(2))
        receiving = 1 - working
        me, left, right = ring(n)
        left_copy_device = lax.rem(me + step + 1 + n, jnp.int32(n))
        right_copy_device = lax.rem(me - step - 1 + 2 * n, jnp.int32(n))
        left_slice, right_slice = pl.ds(0, half), pl.ds(half, half)
        phase_slice = pl.ds(phase * half, half)

        initial_left = remote(
            x_ref.at[me, left_slice],
            hbm_scratch.at[working, left_slice],
            left_send_sem,
            left_recv_sem,
            left,
        )
        initial_right = remote(
            x_ref.at[me, right_slice],
            hbm_scratch.at[working, right_slice],
            right_send_sem,
            right_recv_sem,
            right,
        )
        left_copy = remote(
            hbm_scratch.at[working, left_slice],
            hbm_scratch.at[receiving, left_slice],
            left_send_sem,
            left_recv_sem,
            left,
        )
        right_copy = remote(
            hbm_scratch.at[receiving, right_slice],
            hbm_scratch.at[working, right_slice],
            right_send_sem,
            right_recv_sem,
            right,
        )

        @pl.when(is_start)
        def _() -> None:
            barrier([left, right])
            o_ref[...] = jnp.zeros_like(o_ref[...])
            accum_scratch[...] = jnp.zeros_like(accum_scratch[...])
            initial_left.start()
            initial_left.wait()
            initial_right.start()
            signal(right_capacity_sem, left)
            signal(left_capacity_sem, right)

        @pl.when(~is_start)
        def _() -> None:
            @pl.when(phase == 0)
            def _() -> None:
                pl.semaphore_wait(right_capacity_sem, 1)
                right_copy.start()

            @pl.when(phase == 1)
            def _() -> None:
                pl.semaphore_wait(left_capacity_sem, 1)
                left_copy.start()

        load = pltpu.make_async_copy(
            hbm_scratch.at[working, phase_slice], accum_scratch, local_copy_sem
        )
        load.start()
        load.wait()

        @pl.when(~last)
        def _() -> None:
            @pl.when(phase == 0)
            def _() -> None:
                accum_scratch[...] += x_ref[left_copy_device, left_slice]

            @pl.when(phase == 1)
            def _() -> None:
                accum_scratch[...] += x_ref[right_copy_device, right_slice]

        store = pltpu.make_async_copy(
            accum_scratch, hbm_scratch.at[working, phase_slice], local_copy_sem
        )
        store.start()
        store.wait()

        @pl.when(is_start)
        def _() -> None:
            initial_right.wait()

        @pl.when(~is_start)
        def _() -> None:
            @pl.when(phase == 0)
            def _() -> None:
                right_copy.wait()
                signal(right_capacity_sem, left)

            @pl.when(phase == 1)
            def _() -> None:
                left_copy.wait()
                signal(left_capacity_sem, right)

        @pl.when(last)
        def _() -> None:
            @pl.when(phase == 0)
            def _() -> None:
                o_ref[left_slice, ...] = accum_scratch[...]
                pl.semaphore_wait(right_capacity_sem, 1)

            @pl.when(phase == 1)
            def _() -> None:
                o_ref[right_slice, ...] = accum_scratch[...]
                pl.semaphore_wait(left_capacity_sem, 1)

    def build() -> Fn:
        grid_spec = pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=0,
            in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
            out_specs=[pl.BlockSpec(memory_space=pltpu.VMEM), pl.BlockSpec(memory_space=pl.ANY)],
            grid=(n, 2),
            scratch_shapes=[DMA] * 5 + [REGULAR] * 2 + [pltpu.VMEM((half, 128), jnp.float32)],
        )

        def body(x: Any) -> Any:
            call = pl.pallas_call(
                kernel,
                out_shape=(
                    jax.ShapeDtypeStruct((rows, 128), jnp.float32),
                    jax.ShapeDtypeStruct((2, rows, 128), jnp.float32),
                ),
                grid_spec=grid_spec,
                compiler_params=pltpu.CompilerParams(collective_id=7),
            )
            return call(x.reshape(n, rows, 128))[0]

        return jax.shard_map(
            body,
            mesh=mesh((n,), ("x",)),
            in_specs=P(None, "x"),
            out_specs=P("x", None),
            check_vma=False,
        )

    return build


def _race_detection(n: int, table: list[list[int]]) -> Build:
    """Copies a table (in SMEM) names; each device then waits for all it receives at once."""

    def kernel(src_dst_ids_ref: Ref, x_ref: Ref, o_ref: Ref, send_sem: Ref, recv_sem: Ref) -> None:
        barrier_sem = pltpu.get_barrier_semaphore()

        @functools.partial(lax.fori_loop, 0, n, init_val=None)
        def _(i: Any, _: Any) -> None:
            pl.semaphore_signal(barrier_sem, inc=1, device_id=(jnp.int32(i),), device_id_type=MESH)

        pl.semaphore_wait(barrier_sem, n)
        me = lax.axis_index("x")
        ids = src_dst_ids_ref[:]
        recv_count = 0
        for i in range(ids.shape[0]):
            src_id, dst_id = ids[i, 0], ids[i, 1]

            @pl.when(src_id == me)
            def _(dst_id: Any = dst_id) -> None:
                dma = pltpu.make_async_remote_copy(
                    x_ref, o_ref, send_sem, recv_sem, device_id=(dst_id,), device_id_type=MESH
                )
                dma.start()
                dma.wait_send()

            recv_count += jnp.where(dst_id == me, 1, 0)

        @pl.when(recv_count > 0)
        def _() -> None:
            fake = pltpu.make_async_remote_copy(
                x_ref.at[pl.ds(0, 8 * recv_count)],
                o_ref.at[pl.ds(0, 8 * recv_count)],
                send_sem,
                recv_sem,
                device_id=(me,),
                device_id_type=MESH,
            )
            fake.wait_recv()

    def build() -> Fn:
        call = pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
            in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[DMA, DMA],
            compiler_params=pltpu.CompilerParams(collective_id=0),
        )
        f = jax.shard_map(
            call,
            mesh=mesh((n,), ("x",)),
            in_specs=(P(None), P("x", None)),
            out_specs=P("x", None),
            check_vma=False,
        )
        ids = np.array(table, np.int32)
        return lambda x: f(ids, x)

    return build


def _shipped_all_gather(
    shape: tuple[int, ...],
    names: tuple[str, ...] = ("x",),
    axis: str = "x",
    space: Any = pltpu.VMEM,
) -> Build:
    """Upstream's shipped all-gather along ``axis`` of a mesh (its ``memory_space``)."""

    def build() -> Fn:
        m = mesh(shape, names)
        return lambda x: shipped.all_gather(x, mesh=m, axis_name=axis, memory_space=space)

    return build


def _sum_of_shards_tiled(x: np.ndarray, n: int) -> np.ndarray:
    total = sum(blocks(x, n, axis=1))
    return np.tile(total, (1, n))


def _reduce_scatter_reference(x: np.ndarray, n: int) -> np.ndarray:
    parts = [b.reshape(n, 16, 128) for b in blocks(x, n, axis=1)]
    return np.concatenate([sum(p[d] for p in parts) for d in range(n)])


def cases() -> list[Case]:
    return [*_guide_examples(), *_race_detection_tables(), *_shipped_all_gathers()]


def _guide_examples() -> list[Case]:
    """The guide's examples, as its interpret-mode test runs them."""
    src = f"{GUIDE}; {INTERPRET_TEST}"
    return [
        Case(
            "guide_right_permute",
            f"{src}::test_right_permute_example",
            (4,),
            _right_permute(4),
            lambda: ints(11, (8, 4 * 128)),
            lambda x: np.roll(x, 128, axis=1),
        ),
        Case(
            "guide_right_permute_8",
            f"{src}::test_right_permute_example (8 devices)",
            (8,),
            _right_permute(8),
            lambda: ints(12, (8, 8 * 128)),
            lambda x: np.roll(x, 128, axis=1),
        ),
        Case(
            "guide_all_gather",
            f"{src}::test_all_gather_example",
            (4,),
            _all_gather(4),
            lambda: ints(13, (4 * 8, 128)),
            lambda x: np.tile(x.reshape(4, 8, 128), (4, 1, 1)),
        ),
        Case(
            "guide_all_reduce",
            f"{src}::test_all_reduce_sum_example",
            (4,),
            _all_reduce(4),
            lambda: ints(14, (8, 4 * 128)),
            lambda x: _sum_of_shards_tiled(x, 4),
        ),
        Case(
            "guide_reduce_scatter",
            f"{src}::test_reduce_scatter_sum_example (bidirectional)",
            (4,),
            _reduce_scatter(4),
            lambda: ints(15, (16 * 4, 128 * 4)),
            lambda x: _reduce_scatter_reference(x, 4),
        ),
    ]


def _race_detection_tables() -> list[Case]:
    ring = [[0, 1], [1, 2], [2, 3], [3, 0]]
    return [
        Case(
            "race_detection_ring",
            f"{INTERPRET_TEST}::test_race_detection (first table, ring closed)",
            (4,),
            _race_detection(4, ring),
            lambda: ints(16, (4 * 8, 128)),
            lambda x: np.roll(x, 8, axis=0),
            compilable=False,
        ),
        Case(
            "race_detection_racing_writes",
            f"{INTERPRET_TEST}::test_race_detection (racing writes to device 2)",
            (4,),
            _race_detection(4, [[0, 1], [1, 2], [3, 2], [3, 0]]),
            lambda: ints(17, (4 * 8, 128)),
            None,
            expect="race",
            compilable=False,
            upstream="race: found by detect_races",
        ),
    ]


def _shipped_all_gathers() -> list[Case]:
    """Upstream's shipped all-gather (``ops/tpu/all_gather.py``), on one and two mesh axes."""
    return [
        Case(
            "shipped_all_gather",
            SHIPPED,
            (4,),
            _shipped_all_gather((4,)),
            lambda: ints(18, (4 * 8, 128)),
            lambda x: x,
            expect="race",
            upstream="race|wrong|ok: it varies between runs (6 runs: 4 race reports, 1 result "
            "with NaNs, 1 right): two copies in flight on one receive semaphore, completed "
            "last-in-first-out by its interpreter",
        ),
        Case(
            "shipped_all_gather_8",
            f"{SHIPPED} (8 devices)",
            (8,),
            _shipped_all_gather((8,)),
            lambda: ints(19, (8 * 8, 128)),
            lambda x: x,
            expect="race",
            upstream="race|wrong|ok: its race detector's report in 7 runs of 7; may vary as on 4 "
            "devices",
        ),
        Case(
            "shipped_all_gather_2d_int32",
            "upstream tests/pallas/tpu_all_gather_test.py::test_all_gather_2d_mesh (axis y of a "
            "2x4 mesh, int32, ANY)",
            (2, 4),
            _shipped_all_gather((2, 4), ("x", "y"), "y", pl.ANY),
            lambda: tuple(a.astype(np.int32) for a in ints(20, (4 * 16, 128))),
            lambda x: x,
            expect="race",
            upstream="race|wrong|ok: its race detector's report in 7 runs of 7 (values wrong); "
            "may vary as on 4 devices of one axis",
        ),
    ]

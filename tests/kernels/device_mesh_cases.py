"""Kernels that span devices (issue 47), run by ``test_device_mesh.py`` in a process of its own
with 4 CPU devices (``run_cases`` in ``tests/device_cases.py``: jax sees them only when
``XLA_FLAGS`` says so before it starts). Each case prints one JSON line: its name, and ``ok`` or
the error's kind and text.
"""

import functools
import warnings

import device_cases
import device_core_cases  # a sibling: this folder is on the path
import jax
import jax.numpy as jnp
import numpy as np
from device_cases import mesh_of, on_mesh, permute_along_y, print_verdicts, whole_call
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P

import minipallas as mp

warnings.simplefilter("ignore", DeprecationWarning)
N = 4
MESH, LOGICAL = pl.DeviceIdType.MESH, pl.DeviceIdType.LOGICAL
DMA, REGULAR = pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.REGULAR
F32 = jnp.float32
SPLIT = P("x")
right_permute = device_cases.right_permute(N)
shift_two_logical = device_cases.shift_two_logical(N)


def _ring_all_gather(wait_recv: bool):
    """A ring all-gather; each step's copy lands on a receive semaphore of its own (one shared
    by every step would let a wait be satisfied by the next step's copy: a race)."""

    def kernel(x_ref, o_ref, send_sem, recv_sems):
        me = lax.axis_index("x")
        right = lax.rem(me + 1, N)
        o_ref[me] = x_ref[...]
        for step in range(N - 1):
            slot = lax.rem(me + N - step, N)
            copy = pltpu.make_async_remote_copy(o_ref.at[slot], o_ref.at[slot], send_sem,
                                                recv_sems.at[step], device_id=(right,),
                                                device_id_type=MESH)  # fmt: skip
            copy.start()
            copy.wait_send()
            if wait_recv:
                copy.wait_recv()

    return kernel


def token_ring(x_ref, o_ref, sem):
    """Every device waits for its left neighbour's token before passing its own: a deadlock."""
    right = lax.rem(lax.axis_index("x") + 1, N)
    pl.semaphore_wait(sem, 1)
    pl.semaphore_signal(sem, 1, device_id=(right,), device_id_type=MESH)
    o_ref[...] = x_ref[...]


def all_to_device_zero(x_ref, o_ref, send_sem, recv_sem):
    """Every device copies its shard into device 0's output: overlapping writes (a race)."""
    copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, device_id=(0,),
                                        device_id_type=MESH)  # fmt: skip
    copy.start()
    copy.wait_send()


_IMPORTED: dict = {}  # each case's function imported once, run under every schedule


def _run(fn, x, schedule="lockstep"):
    if id(fn) not in _IMPORTED:
        _IMPORTED[id(fn)] = (fn, mp.from_jaxpr(jax.make_jaxpr(jax.jit(fn))(x)))
    outs = mp.interpret(_IMPORTED[id(fn)][1], x, collectives="simulate", schedule=schedule)
    return outs[0] if len(outs) == 1 else outs


# --- bodies with ops around their kernels --------------------------------------------------


def _call(kernel, shape=(8, 128), collective_id=None, scratch=2, varying=False):
    # under check_vma=True upstream asks how the result varies: along "x"
    return whole_call(kernel, shape, [DMA] * scratch, collective_id=collective_id,
                      varying=("x",) if varying else ())  # fmt: skip


def _shard_map(body, out_specs=SPLIT, mesh=None, check_vma=False, in_specs=SPLIT):
    return jax.shard_map(body, mesh=mesh or mesh_of(), in_specs=in_specs, out_specs=out_specs,
                         check_vma=check_vma)  # fmt: skip


def ops_around(a):
    """Pure ops before, between and after two kernels, one of them in a nested jit."""
    b = a * 2.0 + 1.0
    c = _call(right_permute)(b)
    d = jax.jit(lambda v: _call(right_permute)(v - 3.0) * 0.5)(c)
    return d + lax.axis_index("x").astype(F32)


def _ops_around_reference(shards):
    b = shards * 2.0 + 1.0
    d = (np.roll(np.roll(b, 1, axis=0) - 3.0, 1, axis=0)) * 0.5
    return d + np.arange(N, dtype=np.float32)[:, None, None]


def collectives(a, check_vma=False):
    """lax collectives in the body, outside any kernel, around a kernel."""
    b = lax.psum(a, "x") + lax.axis_index("x").astype(F32)
    c = lax.ppermute(b, "x", perm=[(i, i + 1) for i in range(N - 1)])  # device 0 gets zeros
    d = lax.all_gather(_call(right_permute, varying=check_vma)(c), "x", axis=1, tiled=True)
    return d, lax.pmax(a, "x"), lax.pmin(a, "x")


def _collectives_reference(shards):
    b = shards.sum(0) + np.arange(N, dtype=np.float32)[:, None, None]
    c = np.concatenate([np.zeros_like(b[:1]), b[:-1]])
    c = np.roll(c, 1, axis=0)  # the kernel's right permute
    d = np.concatenate(list(c), axis=1)  # every device gathers the same rows, tiled on dim 1
    return np.tile(d, (N, 1)), shards.max(0), shards.min(0)


def scatter_and_all_to_all(a):
    """psum_scatter and all_to_all, tiled and not (upstream's jax.jit is the reference)."""
    four = a[:4]
    return (
        lax.psum_scatter(a, "x", scatter_dimension=1, tiled=True),
        lax.psum_scatter(four, "x", scatter_dimension=0),
        lax.all_to_all(a, "x", 1, 0, tiled=True),
        lax.all_to_all(four, "x", 0, 1),
    )


def bump(x_ref, o_ref):
    o_ref[...] = o_ref[...] + 1.0  # the output starts as its aliased input


def aliased(a):
    """input_output_aliases: on a value made in the body, and on the shard_map's operand."""
    inc = pl.pallas_call(bump, out_shape=jax.ShapeDtypeStruct((8, 128), F32),
                         input_output_aliases={0: 0})  # fmt: skip
    return inc(a * 3.0), inc(a)


def collectives_in_a_loop(a):
    ring = [(k, (k + 1) % N) for k in range(N)]
    step = lambda i, v: lax.psum(v, "x") * 0.25 + lax.ppermute(v, "x", ring)  # noqa: E731
    return lax.fori_loop(0, 3, step, a)


def two_handshakes(a):
    """Two kernels, each a shift by two behind a barrier handshake: ``collective_id`` 0 both."""
    return _call(shift_two_logical, collective_id=0)(_call(shift_two_logical, collective_id=0)(a))


def two_collective_ids(a):
    return _call(shift_two_logical, collective_id=1)(_call(shift_two_logical, collective_id=0)(a))


def signal_right(x_ref, o_ref, send_sem, recv_sem):
    """Leaves a signal on the right neighbour's barrier semaphore for a later kernel."""
    right = lax.rem(lax.axis_index("x") + 1, N)
    pl.semaphore_signal(pltpu.get_barrier_semaphore(), 1, device_id=(right,))
    copy = pltpu.make_async_copy(x_ref, o_ref, recv_sem)
    copy.start()
    copy.wait()


def wait_barrier(x_ref, o_ref, send_sem, recv_sem):
    pl.semaphore_wait(pltpu.get_barrier_semaphore(), 1)
    copy = pltpu.make_async_copy(x_ref, o_ref, recv_sem)
    copy.start()
    copy.wait()


def _signal_then_wait(first, second):
    def body(a):
        return _call(wait_barrier, collective_id=second)(
            _call(signal_right, collective_id=first)(a)
        )

    return body


# --- grids and blocks inside the shard_map --------------------------------------------------


def scaled_blocks(x_ref, o_ref):
    """A grid over blocks of the shard: each block times 2, plus its grid index."""
    o_ref[...] = x_ref[...] * 2.0 + pl.program_id(0).astype(F32)


def chunked_permute(x_ref, o_ref, send_sem, recv_sem):
    """The right permute in one chunk of rows per grid step (whole ANY refs, remote copies)."""
    i = pl.program_id(0)
    rows = pl.ds(i * 4, 4)
    right = lax.rem(lax.axis_index("x") + 1, N)
    copy = pltpu.make_async_remote_copy(x_ref.at[rows], o_ref.at[rows], send_sem, recv_sem,
                                        device_id=(right,), device_id_type=MESH)  # fmt: skip
    copy.start()
    copy.wait()


def gridded(a):
    """A blocked kernel over a grid, then a gridded kernel of remote copies."""
    spec = pl.BlockSpec((4, 128), lambda i: (i, 0))
    scaled = pl.pallas_call(scaled_blocks, grid=(2,), in_specs=[spec], out_specs=spec,
                            out_shape=jax.ShapeDtypeStruct((8, 128), F32))(a)  # fmt: skip
    whole = pl.BlockSpec(memory_space=pl.ANY)
    return pl.pallas_call(chunked_permute, grid=(2,), in_specs=[whole], out_specs=whole,
                          out_shape=jax.ShapeDtypeStruct((8, 128), F32),
                          scratch_shapes=[DMA, DMA])(scaled)  # fmt: skip


def _gridded_reference(shards):
    step = np.repeat(np.arange(2, dtype=np.float32), 4)[None, :, None]
    return np.roll(shards * 2.0 + step, 1, axis=0)


def gather_blocks(order_ref, x_ref, o_ref):
    o_ref[...] = x_ref[...] + order_ref[pl.program_id(0)].astype(F32)


def prefetched(a):
    """Scalar prefetch computed in the body: block ``order[i]`` of the shard at step ``i``."""
    order = (jnp.arange(2, dtype=jnp.int32)[::-1] + lax.axis_index("x")) % 2
    spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1,
        grid=(2,),
        in_specs=[pl.BlockSpec((4, 128), lambda i, order: (order[i], 0))],
        out_specs=pl.BlockSpec((4, 128), lambda i, order: (i, 0)),
    )
    return pl.pallas_call(gather_blocks, grid_spec=spec,
                          out_shape=jax.ShapeDtypeStruct((8, 128), F32))(order, a)  # fmt: skip


def _prefetched_reference(shards):
    out = np.empty_like(shards)
    for d in range(N):
        order = (np.array([1, 0]) + d) % 2
        for i in range(2):
            out[d, i * 4 : i * 4 + 4] = shards[d, order[i] * 4 : order[i] * 4 + 4] + order[i]
    return out


# --- upstream's distributed tests (tests/pallas/tpu_pallas_distributed_test.py), ported -----


def _ready_then_copy(target, id_type=MESH, barrier=False):
    """Upstream's pattern: signal the target's ready semaphore (a pl.run_scoped allocation),
    wait for one's own, then copy the shard to the target and wait both ends."""

    def kernel(x_ref, o_ref):
        def body(ready, send, recv):
            to = target()
            if barrier:  # first a barrier-semaphore handshake with the target
                pl.semaphore_signal(pltpu.get_barrier_semaphore(), 1, device_id=to)
                pl.semaphore_wait(pltpu.get_barrier_semaphore(), 1)
            pl.semaphore_signal(ready, 1, device_id=to, device_id_type=id_type)
            pl.semaphore_wait(ready, 1)
            copy = pltpu.async_remote_copy(x_ref, o_ref, send, recv, device_id=to,
                                           device_id_type=id_type)  # fmt: skip
            copy.wait_send()
            copy.wait_recv()

        pl.run_scoped(body, REGULAR, DMA, DMA)

    return kernel


def _vmem_call(kernel, collective_id=None):
    return whole_call(kernel, scratch=(), space=pltpu.VMEM, collective_id=collective_id)


def _neighbour(step):
    def target():
        me, n = lax.axis_index("x"), lax.axis_size("x")
        to = lax.rem(me + step, n)
        return jnp.where(to < 0, to + n, to)

    return target


def signal_every_device(x_ref, o_ref):
    """Every device signals every device's barrier semaphore (itself too), then copies."""
    barrier = pltpu.get_barrier_semaphore()
    for d in range(N):
        pl.semaphore_signal(barrier, 1, device_id=d)
    pl.semaphore_wait(barrier, N)
    pltpu.sync_copy(x_ref, o_ref)


def zero_then_receive(x_ref, o_ref, send_sem, recv_sem):
    """Upstream's interpret-mode ppermute test: each device zeroes its output while its left
    neighbour's copy may already be landing there (a race upstream's test does not see)."""
    o_ref[...] = jnp.zeros_like(o_ref)
    right = lax.rem(lax.axis_index("x") + 1, N)
    copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, device_id=right,
                                        device_id_type=LOGICAL)  # fmt: skip
    copy.start()
    copy.wait()


def joint_axes_copy(x_ref, o_ref):
    """A dict device_id whose key names both axes of a 2x2 mesh: the row-major next device."""

    def body(send, recv):
        nxt = lax.rem(lax.axis_index(("x", "y")) + 1, N)
        pltpu.async_remote_copy(x_ref, o_ref, send, recv, device_id={("x", "y"): nxt}).wait()

    pl.run_scoped(body, DMA, DMA)


def barrier_in_regions(x_ref, o_ref, send_sem, recv_sem):
    """The barrier semaphore asked for inside pl.when, a fori_loop and a while loop."""
    me = lax.axis_index("x")
    right, left = lax.rem(me + 1, N), lax.rem(me + N - 1, N)

    def handshake():
        barrier = pltpu.get_barrier_semaphore()
        pl.semaphore_signal(barrier, 1, device_id=(right,))
        pl.semaphore_signal(barrier, 1, device_id=(left,))
        pl.semaphore_wait(barrier, 2)

    pl.when(me >= 0)(handshake)
    lax.fori_loop(0, 2, lambda i, c: handshake() or c, 0)  # a for loop
    lax.fori_loop(0, me * 0 + 2, lambda i, c: handshake() or c, 0)  # a while: a traced bound
    right_permute(x_ref, o_ref, send_sem, recv_sem)


def _upstream_distributed_cases(x):
    """(name, function, input, numpy's result or None for a kernel with a bug)."""
    shards = x.reshape(N, 8, 128)
    two = mesh_of((2,))
    for space, name in ((pltpu.VMEM, "vmem"), (pl.ANY, "any")):
        kernel = _ready_then_copy(lambda: 1 - lax.axis_index("x"), LOGICAL)
        f = on_mesh(kernel, scratch=(), mesh=two, space=space, check_vma=True)
        half = x[:16]
        yield f"upstream_basic_remote_{name}", f, half, np.concatenate([half[8:], half[:8]])
    for step, name in ((1, "right"), (-1, "left")):
        f = _shard_map(_vmem_call(_ready_then_copy(_neighbour(step))))
        yield f"upstream_axis_index_{name}", f, x, np.roll(shards, step, axis=0).reshape(x.shape)
    yx = mesh_of((2, 2), ("y", "x"))
    f = _shard_map(_vmem_call(_ready_then_copy(lambda: (lax.axis_index("y"), _neighbour(1)()))),
                   mesh=yx, in_specs=P("x", None), out_specs=P("x", None))  # fmt: skip
    half = x[:16]
    yield "upstream_axis_index_2d", f, half, np.concatenate([half[8:], half[:8]])
    f = _shard_map(_vmem_call(_ready_then_copy(_neighbour(1), barrier=True), collective_id=0))
    yield "upstream_barrier_semaphore", f, x, np.roll(shards, 1, axis=0).reshape(x.shape)
    f = _shard_map(_vmem_call(signal_every_device, collective_id=0))
    yield "upstream_signal_every_device", f, x, x
    wide = x.reshape(8, N * 128)
    spec = pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=0, scratch_shapes=[DMA] * 2,
                                        in_specs=[pl.BlockSpec(memory_space=pl.ANY)])  # fmt: skip
    call = pl.pallas_call(zero_then_receive, grid_spec=spec,
                          out_shape=jax.ShapeDtypeStruct((8, 128), F32))  # fmt: skip
    f = _shard_map(call, in_specs=P(None, "x"), out_specs=P(None, "x"))
    yield "upstream_zero_then_receive", f, wide, None
    f = _shard_map(_vmem_call(joint_axes_copy), mesh=mesh_of((2, 2), ("x", "y")),
                   in_specs=P("x", "y"), out_specs=P("x", "y"))  # fmt: skip
    y = x.reshape(16, 256)
    blocks = y.reshape(2, 8, 2, 128).transpose(0, 2, 1, 3).reshape(N, 8, 128)  # row-major
    moved = np.roll(blocks, 1, axis=0).reshape(2, 2, 8, 128).transpose(0, 2, 1, 3)
    yield "upstream_joint_axes_dict", f, y, moved.reshape(16, 256)


def _upstream_all_gather():
    """Upstream's shipped all-gather, as its own test calls it: jit over a 4-device mesh."""
    from jax.experimental.pallas.ops.tpu import all_gather

    return functools.partial(all_gather.all_gather, mesh=mesh_of(), axis_name="x")


def cases():
    x = np.arange(N * 8 * 128, dtype=np.float32).reshape(N * 8, 128)
    shards = x.reshape(N, 8, 128)
    two = [DMA, DMA]
    permute = on_mesh(right_permute, (8, 128), two)
    yield "right_permute", lambda s: (_run(permute, x, s),
                                      np.roll(shards, 1, axis=0).reshape(x.shape))  # fmt: skip
    shift = on_mesh(shift_two_logical, (8, 128), two, collective_id=0)
    yield "shift_two_logical", lambda s: (_run(shift, x, s),
                                          np.roll(shards, 2, axis=0).reshape(x.shape))  # fmt: skip
    per_step = [DMA, DMA((N - 1,))]
    gather = on_mesh(_ring_all_gather(True), (N, 8, 128), per_step, space=None)
    yield "ring_all_gather", lambda s: (_run(gather, x, s), np.tile(shards, (N, 1, 1)))
    racy = on_mesh(_ring_all_gather(False), (N, 8, 128), per_step, space=None)
    yield "all_gather_without_wait_recv", lambda s: (_run(racy, x, s), None)
    checked = on_mesh(right_permute, (8, 128), two, check_vma=True)
    rolled = np.roll(shards, 1, axis=0).reshape(x.shape)
    yield "right_permute_check_vma", lambda s: (_run(checked, x, s), rolled)
    ring = on_mesh(token_ring, (8, 128), [REGULAR], space=None)
    yield "token_ring", lambda s: (_run(ring, x, s), None)
    zero = on_mesh(all_to_device_zero, (8, 128), two)
    yield "all_to_device_zero", lambda s: (_run(zero, x, s), None)
    y = np.arange(4 * 8 * 128, dtype=np.float32).reshape(2 * 8, 2 * 128)
    grid = mesh_of((2, 2), ("x", "y"))
    along_y = on_mesh(permute_along_y, (8, 128), two, spec=P("x", "y"), mesh=grid)
    blocks = y.reshape(2, 8, 2, 128)
    yield "permute_along_y", lambda s: (_run(along_y, y, s),
                                        blocks[:, :, ::-1, :].reshape(y.shape))  # fmt: skip
    x16 = np.arange(N * 16 * 128, dtype=np.float32).reshape(N * 16, 128)
    gather = _upstream_all_gather()
    yield "upstream_all_gather", lambda s: (_run(gather, x16, s), x16)
    around = _shard_map(ops_around)
    yield (
        "ops_around",
        lambda s: (_run(around, x, s), _ops_around_reference(shards).reshape(x.shape)),
    )
    for vma in (False, True):
        body = _shard_map(functools.partial(collectives, check_vma=vma),
                          out_specs=(P("x"), P(), P()), check_vma=vma)  # fmt: skip
        yield (
            f"collectives_check_vma_{vma}",
            lambda s, body=body: (_run(body, x, s), _collectives_reference(shards)),
        )
    scatter = _shard_map(scatter_and_all_to_all, out_specs=(SPLIT,) * 4)
    yield "psum_scatter_and_all_to_all", lambda s: (_run(scatter, x, s), tuple(jax.jit(scatter)(x)))
    looped = _shard_map(collectives_in_a_loop)
    yield "collectives_in_a_loop", lambda s: (_run(looped, x, s), np.asarray(jax.jit(looped)(x)))
    bumped = _shard_map(aliased, out_specs=(SPLIT, SPLIT))
    yield "aliased_outputs", lambda s: (_run(bumped, x, s), (x * 3.0 + 1.0, x + 1.0))
    replicated = _shard_map(_call(right_permute), out_specs=P())
    yield "replicated_result", lambda s: (_run(replicated, x, s), shards[N - 1])
    half = _shard_map(_call(permute_along_y), out_specs=P(None, "y"), mesh=grid,
                      in_specs=P("x", "y"))  # fmt: skip
    yield "replicated_along_x", lambda s: (_run(half, y, s),
                                           blocks[0, :, ::-1, :].reshape(8, 256))  # fmt: skip
    same = _shard_map(two_handshakes)
    yield "same_collective_id", lambda s: (_run(same, x, s), x)
    different = _shard_map(two_collective_ids)
    yield "different_collective_ids", lambda s: (_run(different, x, s), x)
    grids = _shard_map(gridded)
    yield (
        "grid_and_blocks",
        lambda s: (_run(grids, x, s), _gridded_reference(shards).reshape(x.shape)),
    )
    prefetch = _shard_map(prefetched)
    yield "scalar_prefetch", lambda s: (_run(prefetch, x, s),
                                        _prefetched_reference(shards).reshape(x.shape))  # fmt: skip
    for name, f, a, want in _upstream_distributed_cases(x):
        yield name, lambda s, f=f, a=a, want=want: (_run(f, a, s), want)
    regions = _shard_map(_call(barrier_in_regions, collective_id=0))
    yield (
        "barrier_in_regions",
        lambda s: (_run(regions, x, s), np.roll(shards, 1, axis=0).reshape(x.shape)),
    )
    carried = _shard_map(_signal_then_wait(0, 0))  # the second kernel takes the first's signal
    yield "barrier_signal_carried_by_collective_id", lambda s: (_run(carried, x, s), x)
    apart = _shard_map(_signal_then_wait(0, 1))  # another id: another semaphore, never signalled
    yield "barrier_of_another_collective_id", lambda s: (_run(apart, x, s), None)
    yield from device_core_cases.cases(_run, _call(right_permute))


def _judge(got, want) -> dict:
    gots, wants = (list(got), want) if isinstance(want, tuple) else ([got], [want])
    equal = [np.array_equal(g, w) for g, w in zip(gots, wants, strict=True)]
    return {"ok": want is not None and all(equal)}


def main() -> None:
    schedules = ["lockstep", 0, 1]
    print_verdicts(((name, schedules, case) for name, case in cases()), _judge)


if __name__ == "__main__":
    main()

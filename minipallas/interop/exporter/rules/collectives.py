"""``to_jax`` rules for the ops of programs that run on every device of a mesh together, under
``jax.shard_map`` (issue 47): ``axis_index`` is ``lax.axis_index``, and ``exchange``
(``ir/opset/exchange.py``), a remote copy, is one collective:

- a static target (``pairs``) is ``lax.ppermute`` of the payload and the window's indices;
  a device that no one sends to keeps its ``dst`` (ppermute gives it zeros, not kept: a
  select, left out where every device receives);
- a target computed at run time is ``lax.all_gather`` of payload, indices and target, then
  every device writes, sender by sender in device order, each window sent to it (in a
  race-free kernel at most one sender writes any element), selecting the old value elsewhere.

``gather_rows`` is ``lax.all_gather`` over the mesh's axes, its rows laid out as the mesh.

The window is written as ``dynamic_update_slice`` writes it (``indexing.write_window``), so
its indices are clamped as everywhere else in ``to_jax``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from minipallas.interop.exporter.engine import rule
from minipallas.interop.exporter.rules.indexing import write_window
from minipallas.ir.core import Op


@rule("axis_index")
def axis_index(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    return [lax.axis_index(op.attrs["name"])]


@rule("exchange")
def exchange(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    where = op.slices()
    dst, payload = args[where["dst"].start], jnp.asarray(args[where["payload"].start])
    indices = [jnp.asarray(i) for i in args[where["indices"]]]
    targets = [jnp.asarray(t, jnp.int32) for t in args[where["targets"]]]
    axes, sizes = tuple(op.attrs["axes"]), tuple(op.attrs["shape"])
    write = Op("dynamic_update_slice", op.operands[: where["payload"].stop], (),
               {"indexer": op.attrs["indexer"]})  # fmt: skip
    me = lax.axis_index(axes)  # row-major over the axes, as ppermute and all_gather number them

    def put(into: Any, window: Any, at: Sequence[Any]) -> Any:
        (out,) = write_window(write, [into, *at, window])
        return out

    if not targets:
        pairs = tuple(tuple(p) for p in op.attrs["pairs"])
        got, *at = lax.ppermute((payload, *indices), axes, perm=pairs)
        receives = np.zeros(int(np.prod(sizes)), bool)
        receives[[r for _, r in pairs]] = True
        if receives.all():  # a permutation of every device: no one keeps its dst
            return [put(dst, got, at)]
        return [jnp.where(jnp.asarray(receives)[me], put(dst, got, at), dst)]
    linear = targets[0]
    for t, n in zip(targets[1:], sizes[1:], strict=True):
        linear = linear * n + t
    sent, to, *at = lax.all_gather((payload, linear, *indices), axes)
    out = dst
    for j in range(int(np.prod(sizes))):
        out = jnp.where(to[j] == me, put(out, sent[j], [i[j] for i in at]), out)
    return [out]


@rule("gather_rows")
def gather_rows(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    rows = lax.all_gather(jnp.asarray(args[0]), tuple(op.attrs["axes"]))
    return [lax.reshape(rows, op.result.type.shape)]

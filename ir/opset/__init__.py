"""Declarations of every op, one file per family: each ``@declare`` gives the op's operands,
printed syntax, effect and purity beside its type rule. Importing this package registers them
all."""

from minipallas.ir.opset import arrays, control, indexed, kernel, scoped, state, views

__all__ = ["arrays", "control", "indexed", "kernel", "scoped", "state", "views"]

from minipallas.ir.opset import layout, scans, sorting  # noqa: E402  (jnp.flip, sort, cumsum...)

__all__ += ["layout", "scans", "sorting"]

from minipallas.ir.opset import debug  # noqa: E402  (jax.debug.print)

__all__ += ["debug"]

from minipallas.ir.opset import collective  # noqa: E402  (axis_index, barrier: issue 15)

__all__ += ["collective"]

from minipallas.ir.opset import semaphore  # noqa: E402  (semaphore_signal / wait / read)

__all__ += ["semaphore"]

from minipallas.ir.opset import atomic, dma, lanes, platform  # noqa: E402

__all__ += ["atomic", "dma", "lanes", "platform"]  # Triton atomics; async copies; roll...

from minipallas.ir.opset import mesh  # noqa: E402  (mesh_call: pl.kernel over a mesh, issue 38)

__all__ += ["mesh"]

from minipallas.ir.opset import exchange  # noqa: E402  (a remote copy as a collective, issue 47)

__all__ += ["exchange"]

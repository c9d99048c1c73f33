"""A ``pallas_call`` called on JAX arrays or tracers: the CPU program as JAX ops.

``PallasCall.__call__`` on numpy arrays compiles the discharged CPU program (``program``) on
its own and returns numpy arrays; that cannot run inside ``jax.jit``/``jax.vmap``/``jax.grad``,
whose arguments are tracers with no values. Given a JAX array or tracer, the call instead
evaluates the same program with ``jax.lax`` ops (``minipallas.interop.to_jax``), so it stages
out into the caller's trace: XLA fuses it with the ops around it, and ``grad``/``jvp``
differentiate it wherever every op's ``jax.lax`` rule is differentiable: the grid's loops have
constant bounds, so JAX runs them as a reversible ``scan``; a loop whose trip count is traced
(a ``fori_loop`` up to ``program_id``) is a ``while``, forward mode only.

``jax.vmap`` runs the kernel once per batch element (``lax.map``), as upstream's batching adds
a grid axis: each slice keeps the unbatched call's bits. Batching the ops instead would let XLA
sum a batched float reduction in another order; with ``match_upstream=False`` it does, for
speed. Derivatives batch the ops either way.

The program runs as one JAX primitive (``primitive.py``), lowered when the caller's ``jax.jit``
is, by the platform table (``PLATFORMS``): on the CPU to these ``jax.lax`` ops, on a CUDA or
ROCm GPU to the kernel's Triton module, as upstream Pallas's Triton lowering does.

The JAX function is jitted once per input types, so eager calls on JAX arrays compile once
too; under an outer ``jax.jit`` the inner one is inlined by XLA.

A dynamic grid (a grid size traced by the enclosing ``jax.jit``) is the program's first
operands, one ``i32[]`` per dynamic axis, as upstream's ``pallas_call`` takes them: its loops
run a traced trip count (a ``while``), so such a call has no reverse-mode derivative.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import jax

from minipallas.interop import to_jax
from minipallas.platforms.primitive import KernelCall

if TYPE_CHECKING:
    from minipallas.kernels.pallas_call import PallasCall

# call -> (input types -> jitted JAX function); weak, so a dropped call frees its programs
_FUNCTIONS: weakref.WeakKeyDictionary[PallasCall, dict[tuple, Callable[..., Any]]] = (
    weakref.WeakKeyDictionary()
)


def call_jax(call: PallasCall, args: Sequence[Any]) -> Any:
    """``call``'s outputs for ``args`` (JAX arrays, tracers or numpy arrays) as JAX values, in
    the structure of its ``out_shape``."""
    types = call.spec.input_types(args)
    functions = _FUNCTIONS.setdefault(call, {})
    fn = functions.get(types)
    if fn is None:
        program = to_jax(call.program(*types))
        kernel = KernelCall(
            spec=call.spec,
            types=types,
            kernel=call.trace(*types),
            program=program,
            compiler_params=call.compiler_params,
            debug=call.debug,
            per_slice=call.match_upstream,
            discharged=call.backend == "xla",
        )
        fn = functions[types] = jax.jit(kernel.function())
    sizes = [jax.lax.convert_element_type(n, "int32") for n in call.grid_bounds]
    outs = fn(*sizes, *args)
    return outs[0] if call.out_structure is None else call.out_structure(outs)

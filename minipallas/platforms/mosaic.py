"""The TPU row: the kernel's own Mosaic module as the ``tpu_custom_call`` upstream Pallas emits.

Upstream's TPU lowering (``pallas/mosaic/pallas_call_registration.py``) hands its module to
``jax.experimental.mosaic.lower_module_to_custom_call``; so does this row, with the ``tpu``
target's module, so libtpu compiles and runs minipallas's module as it would upstream's:

- operands: the dynamic grid sizes first, then the scalar-prefetch arrays, then the inputs (the
  primitive's order, the module's too); ``input_output_aliases`` counted in that order;
- bool operands go in as int32 and bool results come back from int32 (Mosaic's memrefs hold
  bools as 32-bit words, as upstream's ``BOOL_MEMREF_TYPE``);
- ``compiler_params`` (``minipallas.tpu.CompilerParams``, upstream's defaults when none are
  given: ``shape_invariant_numerics=True``, ``serialization_format=1``,
  ``needs_layout_passes=True``) reach the backend config field by field, as upstream's;
  ``dimension_semantics`` is in the module itself;
- the custom call is named after the kernel; the kernel's ``cost_estimate`` goes to the
  backend config and its ``metadata`` to the call's ``kernel_metadata`` (``{}`` when none is
  given), converted as upstream's ``_lower_to_custom_call`` converts them
  (``custom_call_extras``). Upstream adds a ``mesh_axes`` entry only for the device-mesh axes a
  kernel names (``lax.axis_index`` of a ``shard_map`` axis in its body); a minipallas kernel's
  named axes are its grid's, so it has none to add.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
from jax.experimental import mosaic

from minipallas.ir.errors import PassError, TraceError
from minipallas.ir.location import user_location
from minipallas.kernels.spec.params import TpuCompilerParams
from minipallas.lowering.compat.jax_private import mlir as jax_mlir
from minipallas.lowering.compat.jax_private import tpu_custom_call
from minipallas.lowering.compat.jaxlib_shim import ir
from minipallas.lowering.tpu import lower_to_mosaic
from minipallas.lowering.tpu.aot import custom_call_types

if TYPE_CHECKING:
    from minipallas.ir.kernel_spec import Kernel
    from minipallas.lowering.lowered import Lowered
    from minipallas.platforms import Platform
    from minipallas.platforms.primitive import KernelCall

# The compiler params that go to the custom call as they are (upstream passes the same).
PASSED_AS_IS = (
    "vmem_limit_bytes",
    "flags",
    "allow_input_fusion",
    "serialization_format",
    "internal_scratch_in_bytes",
    "collective_id",
    "disable_bounds_checks",
    "disable_semaphore_checks",
    "skip_device_barrier",
    "allow_collective_id_without_custom_barrier",
    "shape_invariant_numerics",
    "needs_layout_passes",
)
BOOL_WORD = jnp.int32  # how a bool crosses into a Mosaic kernel
# the custom-call fields jax's as_tpu_kernel takes (the rest keep their defaults there)
_AS_TPU_KERNEL = set(inspect.signature(tpu_custom_call.as_tpu_kernel).parameters) - {"tiling"}
# the fields of the custom call's config (``run_module``: every one upstream passes)
_CONFIG = set(inspect.signature(tpu_custom_call._lower_to_custom_call_config).parameters)


def launch(
    ctx: Any, operands: Sequence[Any], call: KernelCall, platform: Platform
) -> Sequence[Any]:
    """In the primitive's lowering rule (``ctx``): the ``tpu_custom_call`` running ``call``."""
    lowered = call.lowered(platform.target)
    kernel = call.kernel
    first_input = len(kernel.dynamic_axes) + len(kernel.scalar_prefetch)
    aliases = tuple((first_input + i, o) for i, o in kernel.input_output_aliases)
    in_avals = [_word_aval(a) for a in ctx.avals_in]
    out_avals = [_word_aval(a) for a in ctx.avals_out]
    words = jax_mlir.lower_fun(_to_words, multiple_results=True)
    operands = words(ctx.replace(avals_out=in_avals), *operands)
    with refusals_named(kernel):
        results = mosaic.lower_module_to_custom_call(
            ctx.replace(avals_in=in_avals, avals_out=out_avals),
            *operands,
            module=lowered.module,
            out_type=out_avals,
            kernel_name=jax_mlir.sanitize_name(kernel.name),
            input_output_aliases=aliases,
            output_memory_spaces=None,
            input_memory_spaces=None,
            **custom_call_extras(kernel),
            **custom_call_params(call.compiler_params, lowered.info.get("vmem_limit_bytes")),
        )
    bools = jax_mlir.lower_fun(
        lambda *xs: [x.astype(a.dtype) for x, a in zip(xs, ctx.avals_out, strict=True)],
        multiple_results=True,
    )
    return bools(ctx.replace(avals_in=out_avals), *results)


@contextlib.contextmanager
def refusals_named(kernel: Kernel) -> Iterator[None]:
    """jax's refusal of the module as it serializes it into the custom call (an ``MLIRError``:
    lowered with no TPU backend, jax writes Mosaic's version 11, which cannot hold a matmul's
    ``transpose_lhs_hint``, nor can upstream's) as a ``PassError`` naming the kernel."""
    try:
        yield
    except ir.MLIRError as e:
        found = [d.message for d in getattr(e, "error_diagnostics", ())] or [str(e)]
        raise PassError(
            f"jax refuses the Mosaic module of kernel '{kernel.name}' as it writes the custom "
            f"call: {found[0]}",
            op="pallas_call",
            loc=user_location(),
            fix="upstream's lowering of the same kernel is refused alike; drop the compiler "
            "parameter that asks for it",
        ) from None


def custom_call_extras(kernel: Kernel) -> dict[str, Any]:
    """The kernel's ``cost_estimate`` (a dict of its fields, None when not given) and
    ``metadata`` (a dict) as upstream passes them to the custom call."""
    cost = kernel.cost_estimate
    return {
        "cost_estimate": None if cost is None else dataclasses.asdict(cost),
        "metadata": dict(kernel.metadata),
    }


def custom_call_params(params: Any, vmem_limit: int | None = None) -> dict[str, Any]:
    """The ``lower_module_to_custom_call`` arguments ``params`` give (upstream's defaults for
    None); a field Mosaic cannot take for a TensorCore kernel is an error, as upstream's.
    ``vmem_limit``: the VMEM the emitted kernel asks for (``Kernel.vmem_limit_bytes`` after
    its passes: fusion's wider windows), taken when ``params`` set none."""
    params = TpuCompilerParams() if params is None else params
    if getattr(params, "use_tc_tiling_on_sc", None) is not None:
        raise TraceError(
            "use_tc_tiling_on_sc= is not supported for TC kernels",
            loc=user_location(),
            fix="leave use_tc_tiling_on_sc unset: it is for SparseCore kernels",
        )
    fields = {name: getattr(params, name) for name in PASSED_AS_IS}
    if fields["vmem_limit_bytes"] is None:
        fields["vmem_limit_bytes"] = vmem_limit
    fields["has_side_effects"] = _side_effects(params.has_side_effects)
    fields["tiling"] = None
    return fields


def as_tpu_kernel_fields(params: Any) -> dict[str, Any]:
    """``custom_call_params(params)`` as jax's ``as_tpu_kernel`` takes them (it has no field for
    some, and takes the side effect only as its enum): how minipallas's module is compiled ahead
    of time (``lowering.tpu.compile_check``) or run outside a lowering rule with a call's
    params."""
    fields = {k: v for k, v in custom_call_params(params).items() if k in _AS_TPU_KERNEL}
    fields["has_side_effects"] = _effect(fields["has_side_effects"])
    return fields


def _effect(value: Any) -> Any:
    """The side effect as Mosaic's enum (a bool: pure or side-effecting)."""
    if isinstance(value, bool):
        effect = tpu_custom_call.TpuSideEffectType
        return effect.SIDE_EFFECTING if value else effect.PURE
    return value


def _side_effects(value: Any) -> Any:
    """A bool as it is; upstream's ``pltpu.SideEffectType`` as Mosaic's enum of that name."""
    return value if isinstance(value, bool) else mosaic.TpuSideEffectType[value.name]


def _word_aval(aval: Any) -> Any:
    return aval.update(dtype=BOOL_WORD) if aval.dtype == jnp.bool_ else aval


def _to_words(*xs: Any) -> list[Any]:
    return [x.astype(BOOL_WORD) if x.dtype == jnp.bool_ else x for x in xs]


def run_module(
    kernel: Kernel,
    params: Any,
    ins: Sequence[Any],
    dtypes: Sequence[Any],
    lowered: Lowered | None = None,
    output_memory_spaces: tuple | None = None,
) -> list:
    """``kernel``'s Mosaic module (``lowered``, else ``lower_to_mosaic``'s) run outside a
    lowering rule, in the ``tpu_custom_call`` upstream's lowering emits for it (``params``: its
    compiler params; aliases counted after the dynamic grid sizes and scalar prefetch; bools as
    int32 words; the VMEM the module asks for, ``custom_call_params``), its outputs as
    ``dtypes`` (``output_memory_spaces``: upstream's, for a semaphore result, which stays an
    int32 word).
    The call's config is built by jax's own ``_lower_to_custom_call_config`` with every field
    upstream passes: ``as_tpu_kernel`` drops ``skip_device_barrier`` and
    ``allow_collective_id_without_custom_barrier`` on the way."""
    _, results = custom_call_types(kernel)
    first = len(kernel.dynamic_axes) + len(kernel.scalar_prefetch)
    lowered = lower_to_mosaic(kernel) if lowered is None else lowered
    limit = lowered.info.get("vmem_limit_bytes")
    fields = {**custom_call_params(params, limit), **custom_call_extras(kernel)}
    config = tpu_custom_call._lower_to_custom_call_config(
        lowered.module,
        **{k: v for k, v in fields.items() if k in _CONFIG},
        output_memory_spaces=output_memory_spaces,
    )
    call = tpu_custom_call._as_jax_callable(
        config,
        _effect(fields["has_side_effects"]),
        tuple(jax.ShapeDtypeStruct(s, d) for s, d in results),
        kernel_name=kernel.name,
        input_output_aliases=tuple((first + i, o) for i, o in kernel.input_output_aliases),
        metadata=tpu_custom_call.FrozenDict(fields["metadata"]),
    )
    outs = call(*_to_words(*ins))
    outs = list(outs) if isinstance(outs, list | tuple) else [outs]
    return [o.astype(d) for o, d in zip(outs, dtypes, strict=True)]

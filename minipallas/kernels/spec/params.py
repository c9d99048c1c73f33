"""``compiler_params=`` and ``debug=`` of ``pallas_call``, with upstream Pallas's names.

``minipallas.tpu.CompilerParams`` mirrors ``jax.experimental.pallas.tpu.CompilerParams`` and
``minipallas.gpu.CompilerParams`` mirrors ``jax.experimental.pallas.triton.CompilerParams``
(jax 0.10.2), field for field, so a kernel written for upstream ports by changing the import;
upstream's own objects are accepted too and read by field name. Where the fields go:

- Mosaic: ``dimension_semantics`` becomes the kernel's (the module's ``dimension_semantics``
  attribute, as upstream's). The others go, as upstream's, into the ``tpu_custom_call``
  backend config when the call runs on a TPU (``platforms/mosaic.py``), and are kept in
  ``Lowered.info["compiler_params"]``; ``fuse_transposed_lhs_in_matmul`` becomes the kernel's
  (``Kernel.fuse_transposed_lhs``: a transposed left side's ``tpu.matmul`` carries
  ``transpose_lhs_hint``, as upstream's).
- Triton: ``num_warps`` and ``num_stages`` go to the ``ptx`` target's Triton compilation
  (upstream passes them to ``triton.compile`` and the ``__gpu$xla.gpu.triton`` backend config,
  not the module), and are kept in ``Lowered.info["compiler_params"]`` for ``gpu``.
- The CPU ignores them, as upstream's ``interpret=True`` does.

The other kernel-level parameters with upstream's names are read here too, each by the function
of its name: a block spec's ``pipeline_mode`` (``minipallas.Buffered`` or upstream's
``pl.Buffered``; the TPU lowering emits or refuses it, the CPU ignores it), and the call's
``cost_estimate`` and ``metadata``, which go to the ``tpu_custom_call`` as upstream's
(``platforms/mosaic.py``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from minipallas.ir.errors import TraceError
from minipallas.ir.kernel_spec import Buffered, CostEstimate, Kernel, RevisitMode
from minipallas.ir.location import user_location


class _Params:
    """Upstream-named fields, given by keyword; an unknown one is a ``TraceError`` naming the
    known ones (a ``TypeError`` from a dataclass would name no fix)."""

    KIND = ""  # the backend these are for, in messages
    TARGETS: tuple[str, ...] = ()  # the lowering targets that read them

    def __init__(self, **fields: Any) -> None:
        known = {f.name: f.default for f in dataclasses.fields(self)}
        unknown = sorted(set(fields) - set(known))
        if unknown:
            raise TraceError(
                f"{self.KIND} CompilerParams has no field {', '.join(map(repr, unknown))}",
                loc=user_location(),
                fix=f"the {self.KIND} compiler params are: {', '.join(known)}",
            )
        for name, default in known.items():
            object.__setattr__(self, name, fields.get(name, default))

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


@dataclasses.dataclass(frozen=True, init=False)
class TpuCompilerParams(_Params):
    """Mosaic TPU compiler parameters (``jax.experimental.pallas.tpu.CompilerParams``)."""

    KIND = "Mosaic TPU"
    TARGETS = ("tpu",)

    dimension_semantics: tuple[str, ...] | None = None
    allow_input_fusion: tuple[bool, ...] | None = None
    vmem_limit_bytes: int | None = None
    collective_id: int | None = None
    has_side_effects: Any = False
    flags: dict[str, Any] | None = None
    internal_scratch_in_bytes: int | None = None
    serialization_format: int = 1
    disable_bounds_checks: bool = False
    disable_semaphore_checks: bool = False
    skip_device_barrier: bool = False
    allow_collective_id_without_custom_barrier: bool = False
    shape_invariant_numerics: bool = True
    use_tc_tiling_on_sc: bool | None = None
    needs_layout_passes: bool = True
    fuse_transposed_lhs_in_matmul: bool = False


@dataclasses.dataclass(frozen=True, init=False)
class GpuCompilerParams(_Params):
    """Triton compiler parameters (``jax.experimental.pallas.triton.CompilerParams``); None
    means upstream's default (4 warps, 3 stages on CUDA)."""

    KIND = "Triton"
    TARGETS = ("gpu", "ptx")

    num_warps: int | None = None
    num_stages: int | None = None


def compiler_params(value: Any) -> _Params | None:
    """``value`` as minipallas's params: ours as they are, upstream's ``pltpu``/``plgpu``
    objects read by field name (their module says which backend)."""
    if value is None or isinstance(value, _Params):
        return value
    module = type(value).__module__
    cls = (
        TpuCompilerParams
        if "pallas.mosaic" in module and "gpu" not in module
        else GpuCompilerParams
        if "pallas.triton" in module
        else None
    )
    if cls is None or not dataclasses.is_dataclass(value):
        raise TraceError(
            f"compiler_params must be Mosaic TPU or Triton compiler params, got {value!r}",
            loc=user_location(),
            fix="use minipallas.tpu.CompilerParams(...) or minipallas.gpu.CompilerParams(...)",
        )
    fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    return cls(**fields)


def semantics_from(params: _Params | None, semantics: Any) -> Any:
    """The kernel's dimension semantics: ``dimension_semantics=`` or the TPU params' (both
    given is an error, since one would silently win)."""
    from_params = getattr(params, "dimension_semantics", None)
    if from_params is None:
        return semantics
    if semantics is not None:
        raise TraceError(
            "dimension_semantics is given twice, as an argument and in compiler_params",
            loc=user_location(),
            fix="give it once: minipallas.tpu.CompilerParams(dimension_semantics=...)",
        )
    return from_params


def emitter_options(params: _Params | None, target: str) -> dict[str, Any]:
    """The options ``target``'s emitter takes from ``params``; params for another backend than
    ``target`` are an error (upstream's lowering asserts their type)."""
    if params is None or target == "stablehlo":
        return {}
    if target not in params.TARGETS:
        raise TraceError(
            f"the kernel call's compiler_params are {params.KIND}'s, but it is lowered to "
            f"'{target}'",
            loc=user_location(),
            fix=f"lower it to {' or '.join(map(repr, params.TARGETS))}, or give that "
            "target's CompilerParams",
        )
    if target == "ptx":
        return {k: v for k, v in params.as_dict().items() if v is not None}
    return {}


def pipeline_mode(value: Any) -> Any:
    """A block spec's pipeline mode: ``minipallas.Buffered`` as it is, upstream's
    ``pl.Buffered`` read by field name; anything else as given, for the TPU lowering to refuse
    with upstream's message ("Unsupported pipeline mode") where upstream's refuses it."""
    if value is None or isinstance(value, Buffered):
        return value
    if type(value).__name__ != "Buffered" or "pallas" not in type(value).__module__:
        return value
    revisit = value.revisit
    return Buffered(
        value.buffer_count,
        value.use_lookahead,
        None if revisit is None else RevisitMode(getattr(revisit, "value", revisit)),
    )


def cost_estimate(value: Any) -> CostEstimate | None:
    """``cost_estimate=``: ``minipallas.CostEstimate`` as it is, upstream's
    ``pl.CostEstimate`` (or anything with its fields) read by field name."""
    if value is None or isinstance(value, CostEstimate):
        return value
    names = [f.name for f in dataclasses.fields(CostEstimate)]
    if not all(hasattr(value, n) for n in names[:3]):
        raise TraceError(
            f"cost_estimate must be a CostEstimate, got {value!r}",
            loc=user_location(),
            fix="use minipallas.CostEstimate(flops=..., transcendentals=..., bytes_accessed=...)",
        )
    return CostEstimate(**{n: getattr(value, n) for n in names if hasattr(value, n)})


def metadata(value: Any) -> tuple[tuple[str, str], ...]:
    """``metadata=``: a mapping of str to str (upstream's ``dict[str, str]``), as its items in
    the order given; upstream serializes it as JSON into the custom call's
    ``mhlo.frontend_attributes``."""
    if value is None:
        return ()
    items = tuple(value.items()) if hasattr(value, "items") else None
    if items is None or not all(isinstance(k, str) and isinstance(v, str) for k, v in items):
        raise TraceError(
            f"metadata must be a mapping of str to str, got {value!r}",
            loc=user_location(),
            fix='give strings: metadata={"name": "value"} (json.dumps other values first)',
        )
    return items


def debug_kernel(kernel: Kernel) -> None:
    """``debug=True``'s print of a traced kernel, as upstream prints the kernel's jaxpr."""
    print(f"\nThe kernel for pallas_call {kernel.name} (grid={kernel.grid}):")
    print(kernel.body)


def debug_module(name: str, target: str, text: str) -> None:
    """``debug=True``'s print of a lowered module, as upstream prints the Mosaic/Triton one."""
    print(f"\nThe {target} module for pallas_call {name}:")
    print(text)

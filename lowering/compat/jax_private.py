"""Every private jax module minipallas reads, named in one table.

The interop, the difftest, the kernel platforms and the tests need JAX internals: jaxpr
equations and their primitives, upstream's state discharge as an oracle, Pallas's own lowering
hooks. These live under ``jax._src``, which moves between releases. Every other file imports
them from here (``from minipallas.lowering.compat.jax_private import core as jax_core``), so a jax
upgrade that moves a module edits one row of ``MODULES``. Written for jax 0.10.2
(``JAX_VERSION``).

A module is imported on first use, not when this file is, so importing minipallas loads only
the JAX internals the code it runs needs. A module that is gone is a ``MiniPallasError`` naming
it, not an ``ImportError`` deep in some interop file.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import sys
from types import ModuleType

from minipallas.ir.errors import MiniPallasError

JAX_VERSION = "0.10.2"  # the jax these paths were read from (setup.cfg pins it)

MODULES = {
    # jaxprs: equations, avals, effects, pytrees, source locations
    "core": "jax._src.core",
    "tree_util": "jax._src.tree_util",
    "source_info_util": "jax._src.source_info_util",
    "api_util": "jax._src.api_util",  # with linear_util: a jaxpr traced by hand (the tests)
    "linear_util": "jax._src.linear_util",
    # state: refs, their indexers and primitives, and upstream's discharge (the oracle)
    "state_types": "jax._src.state.types",
    "state_indexing": "jax._src.state.indexing",
    "state_primitives": "jax._src.state.primitives",
    "state_discharge": "jax._src.state.discharge",
    # Pallas: block specs and grid mappings, its primitives, the TPU memory spaces
    "pallas_core": "jax._src.pallas.core",
    "pallas_primitives": "jax._src.pallas.primitives",
    "pallas_tpu_core": "jax._src.pallas.mosaic.core",
    # where the other Pallas primitives a jaxpr may hold are defined (``primitive_names``)
    "pallas_call": "jax._src.pallas.pallas_call",
    "pallas_mpmd": "jax._src.pallas.mpmd",
    "pallas_tpu_primitives": "jax._src.pallas.mosaic.primitives",
    "pallas_tpu_pipeline": "jax._src.pallas.mosaic.pipeline",
    "pallas_triton_primitives": "jax._src.pallas.triton.primitives",
    # Pallas backends: the lowerings the difftest compares against, and how a kernel is launched
    "mosaic_lowering": "jax._src.pallas.mosaic.lowering",
    "tpu_info": "jax._src.pallas.mosaic.tpu_info",
    "tpu_custom_call": "jax._src.tpu_custom_call",
    "triton_lowering": "jax._src.pallas.triton.lowering",
    # interpreters: lowering rules to MLIR, batching rules (vmap)
    "mlir": "jax._src.interpreters.mlir",
    "compiler": "jax._src.compiler",  # compile options: jax_dispatch adds XLA backend options
    "batching": "jax._src.interpreters.batching",
    # lax internals with no public name
    "lax_control_flow": "jax._src.lax.control_flow",
    "lax_slicing": "jax._src.lax.slicing",
    "random_prng": "jax._src.random.prng",  # the PRNG key primitives' definitions on key data
    # the machine: TPU chips and NVIDIA GPUs seen without opening a runtime
    "hardware_utils": "jax._src.hardware_utils",
    # what upstream's own mesh-kernel tests use (tests/interop/mesh_corpus_upstream/)
    "config": "jax._src.config",
    "hijax": "jax._src.hijax",
    # upstream's TPU interpret mode's state: the races it found (bench/chip/bug_interpret.py)
    "pallas_tpu_interpret": "jax._src.pallas.mosaic.interpret.interpret_pallas_call",
    "state": "jax._src.state",
    "state_utils": "jax._src.state.utils",
    "fusible_dtype": "jax._src.pallas.fuser.fusible_dtype",
}

# The rows whose modules define primitives that jax itself does not load (``primitive_names``).
PRIMITIVE_MODULES = (
    "pallas_primitives",
    "pallas_call",
    "pallas_mpmd",
    "pallas_tpu_primitives",
    "pallas_tpu_pipeline",
    "pallas_triton_primitives",
    "random_prng",
    "lax_control_flow",
    "state_primitives",
)

__all__ = ["JAX_VERSION", "MODULES", "PRIMITIVE_MODULES", "primitive_names", *MODULES]


@functools.cache
def primitive_names() -> frozenset[str]:
    """The name of every jax primitive: each ``Primitive`` a loaded ``jax`` module holds, once
    ``PRIMITIVE_MODULES`` are loaded (``jax.lax``'s come with jax). The jaxpr importer's rule
    table refuses a rule for any other name (``ir.rules.RuleTable``)."""
    for name in PRIMITIVE_MODULES:
        __getattr__(name)
    primitive = __getattr__("core").Primitive
    return frozenset(
        value.name
        for module in list(sys.modules.values())
        if module is not None and module.__name__.split(".")[0] == "jax"
        for value in list(vars(module).values())
        if isinstance(value, primitive)
    )


def __getattr__(name: str) -> ModuleType:
    """``MODULES[name]``, imported on first access and kept as this module's attribute."""
    if name not in MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    path = MODULES[name]
    try:
        module = importlib.import_module(path)
    except ModuleNotFoundError as e:
        if e.name is None or not (path == e.name or path.startswith(e.name + ".")):
            raise  # the module is there; something it imports is not
        raise MiniPallasError(
            f"jax {_installed_jax()} has no module {path} (jax_private.{name}); minipallas "
            f"was written for jax {JAX_VERSION}",
            fix=f"install jax=={JAX_VERSION} and jaxlib=={JAX_VERSION}, or, upgrading jax, "
            f"point MODULES[{name!r}] in lowering/compat/jax_private.py at the module's new path",
        ) from e
    globals()[name] = module
    return module


def __dir__() -> list[str]:
    return sorted({*globals(), *MODULES})


def _installed_jax() -> str:
    try:
        return importlib.metadata.version("jax")
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"

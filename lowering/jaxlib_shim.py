"""Every jaxlib entry point minipallas's lowering uses, in one small file.

The MLIR Python bindings, the dialect registration and the CPU client are not a stable public
API of jaxlib: names move between releases. Everything else in ``minipallas.lowering`` imports
them from here, so a jaxlib upgrade touches this file only. Known to work with jaxlib 0.10.2.
The private jax modules these helpers call (``jax._src...``) come from ``jax_private``, like
everyone else's.

- ``ir``, ``func``, ``stablehlo``: the bindings' modules, re-exported.
- ``make_context()``: an MLIR context with the dialects JAX registers (func, arith, scf, ...)
  plus stablehlo and chlo, as ``jax._src.interpreters.mlir.make_ir_context`` builds it.
- ``cpu_compile(text)`` / ``cpu_execute(executable, arrays)``: XLA's CPU client, compiling a
  module's text whose entry is a public ``@main`` and running it on numpy arrays;
  ``writable(result)``: a result as a writable numpy array, copied or not.
"""

from __future__ import annotations

import functools
import os

# XLA's C++ logging reads its level once, when jaxlib is first imported: without this a program
# that runs on the CPU prints pjrt_client's INFO lines to stderr. setdefault: a user's own level,
# or a jaxlib already imported, wins.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir._mlir_libs import _jax_mlir_ext
from jaxlib.mlir.dialects import chlo, func, stablehlo

from minipallas.lowering import jax_private

__all__ = [
    "cpu_compile",
    "cpu_device",
    "cpu_execute",
    "func",
    "ir",
    "make_context",
    "stablehlo",
    "writable",
]


@functools.cache
def _registry() -> ir.DialectRegistry:
    registry = ir.DialectRegistry()
    _jax_mlir_ext.register_dialects(registry)
    return registry


def make_context() -> ir.Context:
    """A fresh MLIR context with func, arith, ..., stablehlo and chlo loaded."""
    context = ir.Context()
    context.append_dialect_registry(_registry())
    context.load_all_available_dialects()
    stablehlo.register_dialect(context)
    chlo.register_dialect(context)
    return context


@functools.cache
def _cpu() -> tuple[Any, Any]:
    """The XLA CPU client and its first device (made once per process)."""
    from jax.extend.backend import get_backend

    quiet_libtpu()  # jax's first backend query loads libtpu when installed: no chip, no noise
    backend = get_backend("cpu")
    return backend, backend.devices()[0]


def cpu_device() -> Any:
    """XLA's CPU device, found without waking a TPU runtime (``_cpu``)."""
    return _cpu()[1]


# Every executable minipallas compiles for the CPU takes these (here and behind jax.jit's
# dispatch, ``jax_dispatch``): round every bf16/f16 op to its dtype, as the reference
# interpreter (and the IR) define it; by default XLA may keep a chain of them in f32.
CPU_COMPILE_OPTIONS = (("xla_allow_excess_precision", False),)

# And these backend options. XLA:CPU compiles a while loop whose body and condition access
# under 1 KiB (``SmallWhileLoopHoistingPass``) as one LLVM function of its legacy emitter, where
# f32->bf16->f32 converts are ``fptrunc``/``fpext``: LLVM narrows them to bfloat ops and
# contracts ``v * 3 - v`` into one FMA, so the bf16 rounding of ``v * 3`` is lost (fuzz-kernels
# 978 and 2307: only minipallas's leaner loop was under 1 KiB). With the threshold at 0 every
# loop runs as per-op kernels, which round as the interpreter does. They live in
# ``DebugOptions.xla_backend_extra_options``, a map that ``env_option_overrides`` (and so
# ``jax.jit``'s ``compiler_options``) refuses; ``with_backend_options`` merges them into the
# serialized ``CompileOptionsProto`` instead (``XLA_FLAGS`` would set them process-wide).
CPU_BACKEND_OPTIONS = (("xla_cpu_small_while_loop_byte_threshold", "0"),)


def _proto_field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2)."""
    out, n = bytearray(), number << 3 | 2
    for value in (n, len(payload)):
        while value > 0x7F:
            out.append(value & 0x7F | 0x80)
            value >>= 7
        out.append(value)
    return bytes(out) + payload


def with_backend_options(options: Any) -> Any:  # noqa: ANN401 - xla_client.CompileOptions
    """``options`` with ``CPU_BACKEND_OPTIONS`` added to its debug options' backend map:
    CompileOptionsProto.executable_build_options (3) .debug_options (3)
    .xla_backend_extra_options (500), merged as protobuf merges concatenated messages."""
    entries = b"".join(
        _proto_field(500, _proto_field(1, k.encode()) + _proto_field(2, v.encode()))
        for k, v in CPU_BACKEND_OPTIONS
    )
    extra = _proto_field(3, _proto_field(3, entries))
    return type(options).ParseFromString(options.SerializeAsString() + extra)


def cpu_compile(text: str, host_callbacks: Sequence[Callable[..., Any]] = ()) -> Any:
    """Compiles a StableHLO module (text, entry ``@main``) for the CPU; returns the executable.

    ``host_callbacks[k]`` is the Python function the module's ``xla_ffi_python_cpu_callback``
    custom call with ``index = k`` runs (on numpy arrays), as ``jax.jit``'s callbacks do."""
    from jaxlib import xla_client

    backend, device = _cpu()
    options = xla_client.CompileOptions()
    options.env_option_overrides = list(CPU_COMPILE_OPTIONS)
    options = with_backend_options(options)
    devices = xla_client.DeviceList((device,))
    if host_callbacks:  # only a parsed module takes callbacks
        module = ir.Module.parse(text, context=make_context())
        return backend.compile_and_load(module, devices, options, list(host_callbacks))
    return backend.compile_and_load(text, devices, options)


def cpu_execute(executable: Any, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Runs a compiled module on numpy arrays; returns its results as fresh, writable arrays."""
    buffers = [_to_device(a) for a in arrays]
    return [writable(r) for r in executable.execute(buffers)]  # one device: one array each


def _to_device(array: np.ndarray) -> Any:
    """A numpy array as a CPU buffer, by the call ``jax.jit`` makes for its numpy arguments
    (not through ``jax.device_put``, whose Python layers cost more than a small kernel's run).

    Zero-copy, as jax's: the buffer shares the array's memory when it is aligned as XLA wants
    (else PJRT copies it). That is safe here because the buffer holds a reference to the array,
    ``cpu_execute`` waits for the results before it returns, and XLA never makes a result alias
    an argument it was not donated (it copies a returned parameter). The copy that
    ``IMMUTABLE_ONLY_DURING_CALL`` makes instead costs about 0.1 ms per MiB, per call."""
    from jaxlib import xla_client

    aval, sharding, devices = _placement(array.shape, array.dtype)
    semantics = xla_client.HostBufferSemantics.ZERO_COPY
    return xla_client.batched_device_put(aval, sharding, [array], devices, True, False, semantics)


@functools.lru_cache(maxsize=1024)
def _placement(shape: tuple[int, ...], dtype: np.dtype) -> tuple[Any, Any, list[Any]]:
    """The abstract value, sharding and device list that place one array on the CPU device."""
    from jax.sharding import SingleDeviceSharding

    _, device = _cpu()
    return jax_private.core.ShapedArray(shape, dtype), SingleDeviceSharding(device), [device]


# Below this many bytes copying a result (~1 µs) costs less than building the writable view
# over its buffer (~3 µs, ctypes); measured on an Intel Xeon, equal at 64 KiB.
_COPY_BELOW = 32 << 10


def writable(result: Any) -> np.ndarray:
    """A result buffer as a writable numpy array: a copy when small, else a view.

    numpy's view of a CPU buffer (``np.asarray``) is read-only because jax arrays are
    immutable. A result of ``execute`` is referenced by nobody but us (no input is
    donated, so it aliases no argument), so handing its memory to the caller is safe: the view
    is built over the same address, and keeps the buffer alive through its ``base``. Copying
    a large result instead would cost as much as a small kernel's whole run.
    """
    import ctypes

    readonly = np.asarray(result)  # zero-copy; its strides are the buffer's own layout
    if not readonly.flags.c_contiguous or readonly.nbytes < _COPY_BELOW:
        return np.array(readonly)
    memory = (ctypes.c_char * readonly.nbytes).from_address(readonly.ctypes.data)
    memory.owner = readonly  # the buffer lives as long as the returned array
    return np.frombuffer(memory, dtype=readonly.dtype).reshape(readonly.shape)


# --- Triton (the GPU path) -------------------------------------------------------------------


def triton_bindings() -> tuple[Any, Any, Any, Any]:
    """jaxlib's Triton dialect bindings (``tt``) and the ``arith``, ``scf``, ``math`` dialects."""
    from jaxlib.mlir.dialects import arith, math, scf
    from jaxlib.triton import dialect as tt

    return tt, arith, scf, math


def make_triton_context() -> ir.Context:
    """An MLIR context with ``make_context``'s dialects plus Triton's ``tt``, registered the way
    upstream Pallas's Triton lowering registers it."""
    tt, *_ = triton_bindings()
    context = make_context()
    tt.register_dialect(context)
    context.load_all_available_dialects()
    return context


def gpu_available() -> bool:
    """Whether jax sees a CUDA GPU in this process."""
    import jax

    try:
        return bool(jax.devices("cuda"))
    except RuntimeError:
        return False


def triton_custom_call(
    ctx: Any,
    operands: Sequence[Any],
    module: ir.Module,
    name: str,
    grid: Sequence[int],
    *,
    num_warps: int = 4,
    num_stages: int = 3,
    aliases: Sequence[tuple[int, int]] = (),
    debug: bool = False,
) -> Sequence[Any]:
    """In a jax lowering rule (``ctx``): the custom call launching ``module``'s function ``name``
    over ``grid`` (up to 3 axes), ``operands`` then the results as its pointers, in the form
    upstream Pallas's Triton lowering emits with jaxlib 0.10.2: ``__gpu$xla.gpu.triton``, the
    module as bytecode in the backend config, row-major layouts, and ``aliases`` (input,
    output) as ``output_operand_aliases``, so XLA gives each such pair one buffer."""
    import io

    jax_mlir = jax_private.mlir
    buf = io.BytesIO()
    module.operation.write_bytecode(buf)
    x, y, z = (*grid, 1, 1, 1)[:3]
    config = dict(
        name=ir.StringAttr.get(name),
        ir=ir.StringAttr.get(buf.getvalue()),
        num_stages=jax_mlir.i32_attr(num_stages),
        num_warps=jax_mlir.i32_attr(num_warps),
        grid_x=jax_mlir.i32_attr(x),
        grid_y=jax_mlir.i32_attr(y),
        grid_z=jax_mlir.i32_attr(z),
        debug=ir.BoolAttr.get(debug),
    )
    return jax_mlir.custom_call(
        call_target_name="__gpu$xla.gpu.triton",
        result_types=[jax_mlir.aval_to_ir_type(ctx.module_context, a) for a in ctx.avals_out],
        operands=list(operands),
        backend_config=config,
        api_version=4,
        operand_layouts=[list(reversed(range(a.ndim))) for a in ctx.avals_in],
        result_layouts=[list(reversed(range(a.ndim))) for a in ctx.avals_out],
        operand_output_aliases=dict(aliases),
    ).results


def gpu_triton_function(
    module: ir.Module,
    name: str,
    grid: Sequence[int],
    out_types: Sequence[tuple[tuple[int, ...], np.dtype]],
    *,
    num_warps: int = 4,
    num_stages: int = 3,
) -> Any:
    """A jitted jax function launching a Triton module once over ``grid`` through
    ``triton_custom_call``, its arguments then its outputs as the kernel's pointers. Lowers for
    ``"cuda"`` on any machine; runs only where jax sees a CUDA GPU."""
    import jax

    jax_core, jax_mlir = jax_private.core, jax_private.mlir

    avals = [jax_core.ShapedArray(shape, dtype) for shape, dtype in out_types]
    call = jax_core.Primitive(f"minipallas_triton_{name}")
    call.multiple_results = True
    call.def_abstract_eval(lambda *_: avals)

    def lowering(ctx: Any, *operands: Any) -> Any:
        return triton_custom_call(
            ctx, operands, module, name, grid, num_warps=num_warps, num_stages=num_stages
        )

    jax_mlir.register_lowering(call, lowering, platform="cuda")
    return jax.jit(lambda *a: call.bind(*a))


def gpu_triton_call(
    module: ir.Module,
    name: str,
    grid: Sequence[int],
    arrays: Sequence[np.ndarray],
    out_types: Sequence[tuple[tuple[int, ...], np.dtype]],
    *,
    num_warps: int = 4,
    num_stages: int = 3,
) -> list[np.ndarray]:
    """Runs ``gpu_triton_function`` on the first CUDA device; returns numpy arrays."""
    import jax

    fn = gpu_triton_function(
        module, name, grid, out_types, num_warps=num_warps, num_stages=num_stages
    )
    device = jax.devices("cuda")[0]
    outs = fn(*(jax.device_put(a, device) for a in arrays))
    return [np.asarray(o) for o in outs]


# --- Mosaic TPU (``minipallas.lowering.tpu``) ---------------------------------------------------
# The dialects a Mosaic kernel is written in: arith, math, memref, scf, vector and jaxlib's own
# ``tpu`` dialect (``jaxlib.mosaic.python.tpu``), whose bindings are registered per context.

from jaxlib.mlir import passmanager  # noqa: E402
from jaxlib.mlir.dialects import arith, math, memref, scf, vector  # noqa: E402
from jaxlib.mosaic.python import tpu  # noqa: E402

__all__ += ["arith", "canonicalize", "make_tpu_context", "math", "memref", "scf", "tpu", "vector"]


def make_tpu_context() -> ir.Context:
    """``make_context()`` with Mosaic's ``tpu`` dialect registered, as Pallas TPU lowering does."""
    context = make_context()
    tpu.register_dialect(context)
    return context


def canonicalize(module: ir.Module) -> None:
    """Runs MLIR's ``canonicalize`` pass on ``module`` in place: folds constants, removes dead
    ops and applies each loaded dialect's patterns (``tpu``'s included). Upstream Pallas runs the
    same pipeline before printing a Mosaic module (``pallas_call(..., debug=True)``)."""
    with module.context:
        passmanager.PassManager.parse("builtin.module(canonicalize)").run(module.operation)


# --- libtpu's Mosaic compiler, ahead of time (``minipallas.lowering.tpu.aot``) ------------------
# libtpu compiles for a TPU *topology* without opening a chip: jax builds compile-only devices
# for it, and ``jax.jit(...).lower(...).compile()`` on arrays placed there runs XLA's TPU
# compiler, Mosaic's included, on this machine.

# On a machine with no chip: the one-chip host libtpu asks for (else it logs errors as it
# loads), and no lock on the chip that is not there (else a second process that loads libtpu,
# an xdist worker, fails: "Internal error when accessing libtpu multi-process lockfile").
LIBTPU_NO_CHIP = {
    "TPU_ACCELERATOR_TYPE": "v5litepod-1",
    "TPU_WORKER_HOSTNAMES": "localhost",
    "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",
}
__all__ += [
    "MosaicRefusal",
    "has_visible_nvidia_gpu",
    "libtpu_available",
    "mosaic_compile",
    "quiet_libtpu",
    "tpu_chips",
    "tpu_device",
    "tpu_sharding",
]


class MosaicRefusal(Exception):  # noqa: N818  (not an error of ours: Mosaic's verdict)
    """libtpu's compiler refused a module; the message is its own."""


def libtpu_available() -> bool:
    """Whether the ``libtpu`` package (the TPU runtime and its compiler) is installed."""
    import importlib.util

    return importlib.util.find_spec("libtpu") is not None


def tpu_chips() -> int:
    """TPU chips attached to this machine (jax reads the PCI devices; no runtime is opened)."""
    return jax_private.hardware_utils.num_available_tpu_chips_and_device_id()[0]


def has_visible_nvidia_gpu() -> bool:
    """Whether this machine shows an NVIDIA GPU device (no runtime is opened)."""
    return jax_private.hardware_utils.has_visible_nvidia_gpu()


def quiet_libtpu() -> None:
    """On a machine with no TPU chip, sets ``LIBTPU_NO_CHIP`` so that loading libtpu (jax tries
    at its first device query when libtpu is installed) logs no errors and takes no lock, in
    any number of processes. Leaves a TPU machine's own settings, and any already set, alone."""
    import os

    if tpu_chips() == 0:
        for name, value in LIBTPU_NO_CHIP.items():
            os.environ.setdefault(name, value)


@functools.cache
def tpu_sharding() -> Any:
    """A sharding on the one compile-only device of a ``v5e:1x1`` topology (made once)."""
    from jax.experimental import topologies
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    quiet_libtpu()
    topology = topologies.get_topology_desc("v5e:1x1", "tpu", chips_per_host_bounds=(1, 1, 1))
    return NamedSharding(Mesh(np.array(topology.devices), ("chip",)), PartitionSpec())


def tpu_device() -> Any:
    """The compile-only TPU device (``jax.default_device(tpu_device())`` lets upstream's own
    lowering, which asks the default device's kind, compile ahead of time too)."""
    return tpu_sharding().mesh.devices.flat[0]


def mosaic_compile(
    module: ir.Module,
    in_types: Sequence[tuple[tuple[int, ...], np.dtype]],
    out_types: Sequence[tuple[tuple[int, ...], np.dtype]],
    *,
    name: str,
    aliases: Sequence[tuple[int, int]] = (),
    params: dict[str, Any] | None = None,
) -> Any:
    """Compiles ``module`` as upstream's ``tpu_custom_call`` would run it (operands ``in_types``,
    results ``out_types``, ``aliases`` as (operand, result) pairs) for a v5e chip; returns jax's
    ``Compiled``. The compiler parameters are upstream ``pallas_call``'s defaults, updated by
    ``params`` (``as_tpu_kernel``'s keyword arguments: a call's ``compiler_params``). A refusal
    (jax's ``JaxRuntimeError``, or an ``ir.MLIRError`` from the serialization passes) is a
    ``MosaicRefusal`` carrying its message."""
    import jax

    sharding = tpu_sharding()
    outs = tuple(jax.ShapeDtypeStruct(s, d) for s, d in out_types)
    fields = {"shape_invariant_numerics": True, "needs_layout_passes": True, **(params or {})}
    kernel = jax_private.tpu_custom_call.as_tpu_kernel(
        module, outs, kernel_name=name, input_output_aliases=tuple(aliases), **fields
    )
    args = [jax.ShapeDtypeStruct(s, d, sharding=sharding) for s, d in in_types]
    try:
        return jax.jit(kernel, out_shardings=sharding).lower(*args).compile()
    except Exception as e:
        # Once upstream's Mosaic lowering is imported, jax re-raises the runtime error as its
        # MosaicError, the location cut out: the original is its cause.
        original = e.__cause__ if isinstance(e.__cause__, jax.errors.JaxRuntimeError) else e
        if not isinstance(original, jax.errors.JaxRuntimeError | ir.MLIRError):
            raise
        raise MosaicRefusal(str(original)) from None

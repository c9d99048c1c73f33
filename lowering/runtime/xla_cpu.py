"""XLA's CPU client: a StableHLO module compiled for the CPU and run on numpy arrays.

- ``cpu_compile(text)`` / ``cpu_execute(executable, arrays)``: compiling a module's text whose
  entry is a public ``@main``, with ``CPU_COMPILE_OPTIONS`` and ``CPU_BACKEND_OPTIONS``, and
  running it on numpy arrays; ``writable(result)``: a result as a writable numpy array, copied
  or not; ``cpu_device()``: the client's device (``jax_dispatch`` compiles for it too).

jaxlib is reached through ``jaxlib_shim``, the private jax modules through ``jax_private``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from minipallas.lowering.compat import jax_private
from minipallas.lowering.compat.jaxlib_shim import ir, make_context, xla_client
from minipallas.lowering.runtime.libtpu import quiet_libtpu

__all__ = [
    "CPU_BACKEND_OPTIONS",
    "CPU_COMPILE_OPTIONS",
    "cpu_compile",
    "cpu_device",
    "cpu_execute",
    "with_backend_options",
    "writable",
]


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
    client = xla_client()
    backend, device = _cpu()
    options = client.CompileOptions()
    options.env_option_overrides = list(CPU_COMPILE_OPTIONS)
    options = with_backend_options(options)
    devices = client.DeviceList((device,))
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
    client = xla_client()
    aval, sharding, devices = _placement(array.shape, array.dtype)
    semantics = client.HostBufferSemantics.ZERO_COPY
    return client.batched_device_put(aval, sharding, [array], devices, True, False, semantics)


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

"""The rooms that meet JAX (issue 50 point 2), kept apart by their imports.

- ``lowering/compat``: the only modules that touch jax's and jaxlib's private APIs (the scans
  of ``tests/lowering/compat`` hold every other file to them); it sits at the bottom and
  imports nothing of minipallas but the error type.
- ``lowering/runtime``: compiling and running a module. Its backends (the CPU client,
  ``jax.jit``'s dispatch, libtpu, Triton launches) reach down to ``compat`` and ``ir`` only, so
  an emitter may call them (the TPU's ahead-of-time check does); ``compiled``, which lowers a
  function and then runs it, is the one module of the room that reaches up to ``lower``.
- ``minipallas/platforms``: the JAX-facing side (a kernel as a JAX primitive per platform,
  upstream's jaxprs run with minipallas's kernels, ``on_devices``), above ``kernels`` and
  ``interop``. ``interop`` may import ``kernels``; ``kernels`` imports neither ``interop`` nor
  ``platforms`` (save ``pallas_call``'s one lazy import, listed in ``test_layering``), so the
  loop between them is gone. Every import counts, as in ``test_layering``.
"""

from pathlib import Path

import pytest
from test_layering import LAZY_IMPORTS, ROOT, imported_modules

# folder: the minipallas modules (by prefix) its files may import, or may not
ALLOWED = {
    "lowering/compat": ("minipallas.ir.errors.", "minipallas.lowering.compat."),
    "lowering/runtime": (
        "minipallas.ir.",
        "minipallas.lowering.compat.",
        "minipallas.lowering.runtime.",
    ),
}
RUNTIME_TOP = "lowering/runtime/compiled.py"  # lowers, then runs: the room's one way up
FORBIDDEN = {
    "minipallas/kernels": ("minipallas.interop.", "minipallas.platforms."),
    "minipallas/interop": ("minipallas.platforms.",),
}


def stray_imports(path: Path, text: str, allowed=(), forbidden=()) -> list[str]:
    """``file:line: module`` for each minipallas import in ``text`` (the source of ``path``)
    outside ``allowed`` (when given) or inside ``forbidden``, less the listed lazy imports."""
    where = str(path.relative_to(ROOT))
    return [
        f"{where}:{line}: {module}"
        for line, module in sorted(imported_modules(path, text))
        if module.startswith("minipallas.")
        and (where, module) not in LAZY_IMPORTS
        and (
            (allowed and not module.startswith(allowed))
            or any(module.startswith(f) for f in forbidden)
        )
    ]


def files_of(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


@pytest.mark.parametrize("folder", sorted(ALLOWED))
def test_compat_and_the_runtime_backends_import_only_what_lies_below_them(folder: str) -> None:
    found = [
        stray
        for path in files_of(folder)
        if str(path.relative_to(ROOT)) != RUNTIME_TOP
        for stray in stray_imports(path, path.read_text(), allowed=ALLOWED[folder])
    ]
    assert not found, f"{folder} imports above its room (tests/test_jax_rooms.py):\n" + "\n".join(
        found
    )


@pytest.mark.parametrize("folder", sorted(FORBIDDEN))
def test_kernels_and_interop_stay_below_the_platforms(folder: str) -> None:
    found = [
        stray
        for path in files_of(folder)
        for stray in stray_imports(path, path.read_text(), forbidden=FORBIDDEN[folder])
    ]
    assert not found, (
        f"{folder} imports a room above it: JAX-facing code goes in minipallas/platforms/, "
        "what both sides need in kernels/ or below:\n" + "\n".join(found)
    )


def test_the_room_walk_sees_a_stray_import_at_any_depth() -> None:
    path = ROOT / "minipallas" / "kernels" / "fake.py"
    text = (
        "from minipallas.ir.core import Function\n"
        "def f():\n"
        "    from minipallas.interop import to_jax\n"
        "from minipallas.lowering.runtime import xla_cpu\n"
    )
    forbidden = FORBIDDEN["minipallas/kernels"]
    assert stray_imports(path, text, forbidden=forbidden) == [
        "minipallas/kernels/fake.py:3: minipallas.interop.to_jax"
    ]
    assert stray_imports(path, text, allowed=ALLOWED["lowering/compat"]) == [
        "minipallas/kernels/fake.py:1: minipallas.ir.core.Function",
        "minipallas/kernels/fake.py:3: minipallas.interop.to_jax",
        "minipallas/kernels/fake.py:4: minipallas.lowering.runtime.xla_cpu",
    ]


def test_the_listed_lazy_import_is_the_kernels_one_way_up() -> None:
    """``pallas_call`` on JAX values hands the call up to ``platforms.jax_values``, lazily: the
    walk would flag it but for ``LAZY_IMPORTS``, and nothing else in kernels goes up."""
    path = ROOT / "minipallas" / "kernels" / "pallas_call.py"
    up = [m for _, m in imported_modules(path, path.read_text()) if "platforms" in m]
    assert up == ["minipallas.platforms.jax_values.call_jax"]
    assert (str(path.relative_to(ROOT)), up[0]) in LAZY_IMPORTS

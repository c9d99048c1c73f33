"""Every Mosaic module a test emits is compiled by libtpu after the test, on any machine.

The MLIR verifier accepts modules a TPU cannot run; Mosaic's own compiler (libtpu, pinned in
requirements.lock) tells. While a test runs, the ``tpu`` row of ``lowering.TARGETS`` (the one
way every path emits a Mosaic module) notes each kernel it is asked to emit; once the test's
own checks pass, each is emitted again and each distinct module compiled for a v5e chip
(``lowering.tpu.compile_check``), and a refusal fails the test with Mosaic's message. A test
whose module Mosaic refuses on purpose says so:
``@pytest.mark.xfail(raises=MosaicCompileError, strict=True, reason=...)``.

Without libtpu the compiles are skipped and the summary says so; with ``CI`` set, a test that
emitted a module fails instead. The summary gives the modules compiled and the seconds spent
(``user_properties`` carry them from xdist's workers).
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

import pytest

from minipallas.ir.errors import MiniPallasError
from minipallas.lowering import TARGETS, Target
from minipallas.lowering.tpu.aot import compile_check, libtpu_available

PROPERTY = "mosaic_compiled"
NO_LIBTPU = "libtpu is not installed: make test installs it from requirements.lock"


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(MosaicCompile(), "mosaic_compile_plugin")


@dataclasses.dataclass(frozen=True)
class Recording(Target):
    """The ``tpu`` row, noting each kernel it is asked to emit and the options. It notes them in
    the checks ``Target.lower`` makes first, so no frame of this file is on the stack while the
    rules run (``user_location`` would take it for the user's line)."""

    emitted: list = dataclasses.field(default_factory=list)

    def _check_subject(self, subject: Any) -> None:
        super()._check_subject(subject)
        self.emitted.append([subject, {}])

    def _check_options(self, emit: Any, options: dict[str, Any]) -> None:
        super()._check_options(emit, options)
        self.emitted[-1][1] = dict(options)


class MosaicCompile:
    """The plugin: ``verdicts`` holds each distinct module's verdict in this process (text
    without locations, the arrays, the aliases: many tests emit the same suite kernels);
    ``modules`` and ``seconds`` the totals the summary prints (from every xdist worker)."""

    def __init__(self) -> None:
        self.verdicts: dict[tuple, Exception | None] = {}
        self.modules = 0
        self.seconds = 0.0

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Any:
        original = TARGETS["tpu"]
        row = Recording(**{f.name: getattr(original, f.name) for f in dataclasses.fields(Target)})
        TARGETS["tpu"] = row
        try:
            result = yield
        finally:
            TARGETS["tpu"] = original
        if row.emitted:
            self.compile_all(item, original, row.emitted)
        return result

    def compile_all(self, item: pytest.Item, row: Target, emitted: list) -> None:
        """Emits each kernel of ``emitted`` again and compiles each distinct module; raises the
        first refusal. A kernel the test saw refused by minipallas is left out."""
        if not libtpu_available():
            if os.environ.get("CI"):
                pytest.fail(f"{len(emitted)} Mosaic module(s) not compiled: {NO_LIBTPU}")
            return
        start, compiled, refusal = time.perf_counter(), 0, None
        for kernel, options in emitted:
            try:
                lowered = row.lower(kernel, **options)
            except MiniPallasError:
                continue
            limit = lowered.info.get("vmem_limit_bytes")  # the custom call's, beside the module
            key = (lowered.as_text(debug_info=False), _signature(kernel), limit)
            if key not in self.verdicts:
                compiled += 1
                try:
                    compile_check(kernel, lowered)
                    self.verdicts[key] = None
                except Exception as e:  # the verdict, kept for the next test with this module
                    self.verdicts[key] = e
            refusal = refusal or self.verdicts[key]
        item.user_properties.append((PROPERTY, (compiled, time.perf_counter() - start)))
        if refusal is not None:
            raise refusal

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for name, value in report.user_properties:
            if name == PROPERTY and report.when == "call":
                self.modules += value[0]
                self.seconds += value[1]

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not libtpu_available():
            terminalreporter.write_line(f"Mosaic modules not compiled: {NO_LIBTPU}")
            return
        terminalreporter.write_line(
            f"libtpu compiled {self.modules} distinct Mosaic modules in {self.seconds:.1f} s "
            "(tests/mosaic_compile.py)"
        )


def _signature(kernel: Any) -> tuple:
    arrays = [s.array for s in (*kernel.in_specs, *kernel.out_specs)]
    return (kernel.grid, tuple(arrays), kernel.scalar_prefetch, kernel.input_output_aliases)

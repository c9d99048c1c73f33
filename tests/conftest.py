"""FileCheck text tests, run the way LLVM's lit runs them: the one FileCheck runner.

Every ``.mir``, ``.mpir`` or kernel ``.py`` file in a folder named ``filecheck`` is collected,
and each of its RUN lines is one test item (``RUN1``, ``RUN2``...)::

    // RUN: minipallas-opt %s --pass-pipeline=discharge | filecheck %s
    // RUN: not minipallas-opt %s --emit=tpu 2>&1 | filecheck %s --check-prefix=ERR
    # RUN: minipallas-opt %s --emit=gpu \\
    # RUN:   | filecheck %s                       (a kernel .py file: ``#`` comments)

- a RUN line is a bash pipeline, run in the file's folder; ``%s`` stands for the file's path;
- it passes when it exits with status 0, and a pipeline fails when any command in it fails
  (``set -o pipefail``);
- ``not CMD`` succeeds when CMD fails (exits non-zero), for checking error output;
- a RUN line ending in ``\\`` continues on the next RUN line;
- ``minipallas-opt`` and ``filecheck`` (the ``filecheck`` pip package, LLVM FileCheck's
  patterns) are found next to the running Python, the project's virtualenv;
- a file in such a folder without a RUN line is an error, so a test cannot be dropped by
  accident.

``.mir`` and ``.mpir`` files hold minipallas text IR (``minipallas-opt`` reads either); a kernel
``.py`` file defines a ``pallas_call`` (see ``minipallas-opt --help``). Text built in Python is
checked with the same tool by ``filecheck_util.filecheck``.
"""

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from filecheck_util import TOOLS
from hypothesis import settings
from hypothesis.internal.detection import is_hypothesis_test

# jaxlib reads its log level when first imported: libtpu's loading logs INFO lines otherwise.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
from minipallas.lowering.runtime.libtpu import has_visible_nvidia_gpu, quiet_libtpu, tpu_chips

# Every Mosaic module a test emits is compiled by libtpu after the test (mosaic_compile.py).
pytest_plugins = ["mosaic_compile"]
# With libtpu installed and no chip, jax's first device query loads libtpu (0.1 s, and it logs):
# give it the one-chip host it asks for, in this process and the minipallas-opt runs, and on a
# machine with no accelerator at all, let jax open the CPU only, which is all it would find.
quiet_libtpu()
if not (tpu_chips() or has_visible_nvidia_gpu()):
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Every pipeline verifies the IR before and after each pass in the tests (passes.pipeline), in
# this process and in the minipallas-opt runs the RUN lines start.
os.environ.setdefault("MINIPALLAS_VERIFY", "1")

# Property tests: ``make test`` draws the same examples on every machine and every run
# (``derandomize``: each test's seed comes from its own name), so one commit gives one result.
# ``make test-explore`` (MINIPALLAS_EXPLORE=N) draws fresh ones from the seed it prints, N times
# as many, and runs only the property tests; a failure replays with that seed.
EXPLORE = int(os.environ.get("MINIPALLAS_EXPLORE", "0"))
settings.register_profile("deterministic", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, database=None, print_blob=True)
settings.load_profile("explore" if EXPLORE else "deterministic")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not EXPLORE:
        return
    properties = [item for item in items if is_hypothesis_test(getattr(item, "obj", None))]
    config.hook.pytest_deselected(items=[i for i in items if i not in properties])
    items[:] = properties
    for item in properties:  # N times each test's own max_examples
        own = item.obj._hypothesis_internal_use_settings
        item.obj._hypothesis_internal_use_settings = settings(
            own, max_examples=own.max_examples * EXPLORE
        )


RUN = re.compile(r"^\s*(?://|#)\s*RUN:(.*)$")
PRELUDE = 'set -o pipefail\nnot() { ! "$@"; }\n'
SUFFIXES = (".mir", ".mpir", ".py")


def run_lines(path: Path) -> list[str]:
    """The file's RUN commands, continuation lines joined."""
    lines, current = [], ""
    for line in path.read_text().splitlines():
        match = RUN.match(line)
        if not match:
            continue
        current += match.group(1).strip()
        if current.endswith("\\"):
            current = current[:-1] + " "
        else:
            lines.append(current)
            current = ""
    return lines


def run_command(command: str, path: Path) -> subprocess.CompletedProcess:
    """Runs one RUN ``command`` of ``path`` as lit would (see the module docstring)."""
    env = dict(os.environ)
    env["PATH"] = str(TOOLS) + os.pathsep + env.get("PATH", "")
    script = PRELUDE + command.replace("%s", shlex.quote(str(path)))
    return subprocess.run(
        ["bash", "-c", script],
        cwd=path.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def pytest_collect_file(parent: pytest.Collector, file_path: Path) -> pytest.File | None:
    if file_path.parent.name == "filecheck" and file_path.suffix in SUFFIXES:
        return LitFile.from_parent(parent, path=file_path)
    return None


class LitFile(pytest.File):
    def collect(self):  # noqa: ANN201
        lines = run_lines(self.path) or [None]
        for k, command in enumerate(lines, 1):
            yield LitItem.from_parent(self, name=f"RUN{k}", command=command)


class LitItem(pytest.Item):
    def __init__(self, *, command: str | None, **kwargs) -> None:  # noqa: ANN003
        super().__init__(**kwargs)
        self.command = command

    def runtest(self) -> None:
        assert self.command is not None, f"{self.path.name} has no RUN line"
        done = run_command(self.command, self.path)
        assert done.returncode == 0, f"RUN: {self.command}\n{done.stdout}{done.stderr}"

    def reportinfo(self) -> tuple:
        return self.path, None, f"{self.path.name}: RUN: {self.command}"

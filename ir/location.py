"""Source locations: where in the user's Python code, or in a text IR file, an op came from."""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Location:
    """``file:line`` for traced code, ``line:col`` (with ``file`` empty) for parsed text IR."""

    file: str = ""
    line: int = 0
    col: int = 0

    def __str__(self) -> str:
        if self.file:
            return f"{self.file}:{self.line}"
        if self.line:
            return f"{self.line}:{self.col}"
        return "<unknown>"

    def __bool__(self) -> bool:
        return bool(self.file or self.line)


UNKNOWN = Location()


@functools.cache
def _package_roots() -> tuple[str, ...]:
    """Folders of minipallas's own packages; frames inside them are not the user's code."""
    roots = []
    for name in ("minipallas", "minipallas.ir", "minipallas.passes", "minipallas.lowering"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            roots.extend(os.path.abspath(p) + os.sep for p in spec.submodule_search_locations)
    return tuple(roots)


_USER_FOLDERS: list[str] = []


def count_as_user_code(folder: str) -> None:
    """Frames in ``folder``, inside minipallas's packages, are the user's code all the same:
    the tools' corpora, kernels written as a user writes them, whose errors name their lines."""
    _USER_FOLDERS.append(os.path.abspath(folder) + os.sep)
    is_internal.cache_clear()


@functools.lru_cache(maxsize=4096)
def is_internal(filename: str) -> bool:
    """Whether ``filename`` is minipallas's own code, not the user's: its packages (but the
    folders ``count_as_user_code`` names), the launchers pip writes for its commands
    (``minipallas-opt``, ``minipallas-difftest``), and the frozen modules (``runpy``) and
    importlib that run files and modules."""
    path = os.path.abspath(filename)
    launcher = os.path.basename(path).startswith("minipallas-")
    frozen = filename.startswith("<frozen ")
    own = path.startswith(_package_roots()) and not path.startswith(tuple(_USER_FOLDERS))
    return own or launcher or frozen or "importlib" in path


def user_location() -> Location:
    """The innermost stack frame outside minipallas itself: the user's line that made an op."""
    frame = sys._getframe(1)
    while frame is not None:
        if not is_internal(frame.f_code.co_filename):
            return Location(frame.f_code.co_filename, frame.f_lineno)
        frame = frame.f_back
    return UNKNOWN

"""The pipeline's passes and their options, each declared next to its pass.

A pass module registers its pass with ``@register(name, *options, doc=...)``: each ``Option``
names a keyword-only parameter of the pass, its type (``BOOL``, ``INT``, ``INTS`` such as
``4x2``, or a ``choice`` of words) and a short doc; its default is the parameter's default (none:
the option is required). The pipeline parses option text with these types, so a misspelled
option or a bad value is an error naming the pass, the option and the values it accepts, raised
before any pass runs; ``minipallas-opt --help`` prints ``describe()``.

``PASSES`` holds the registered passes by name. It is filled by the declarations themselves:
``minipallas.passes`` imports every pass module (the kernel passes from ``passes.kernel``), and
each registers its pass as it is defined; a user's passes come in by ``load``.
"""

from __future__ import annotations

import inspect
import re
import runpy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from minipallas.ir.errors import PassError

PassFn = Callable[..., Any]  # pass(fn, **options) -> Function; a kernel pass: Kernel -> Kernel
SUBJECTS = ("function", "kernel")  # what a pass transforms: a Function, or a traced Kernel
REQUIRED = inspect.Parameter.empty


@dataclass(frozen=True)
class OptionType:
    """How an option's text becomes its value: ``parse`` raises ValueError on bad text;
    ``accepts`` says in words what it takes and ``example`` is one such text, for errors and
    --help."""

    accepts: str
    example: str
    parse: Callable[[str], Any]


def _bool(text: str) -> bool:
    if text not in ("true", "false"):
        raise ValueError(text)
    return text == "true"


def _int(text: str) -> int:
    if not re.fullmatch(r"-?[0-9]+", text):
        raise ValueError(text)
    return int(text)


def _ints(text: str) -> tuple[int, ...]:
    if not re.fullmatch(r"[0-9]+(x[0-9]+)*", text):
        raise ValueError(text)
    return tuple(int(n) for n in text.split("x"))


BOOL = OptionType("true or false", "false", _bool)
INT = OptionType("an integer", "1", _int)
INTS = OptionType("non-negative integers joined by 'x'", "4x2", _ints)


def choice(*words: str) -> OptionType:
    """An option that is one of ``words``, kept as the word."""

    def parse(text: str) -> str:
        if text not in words:
            raise ValueError(text)
        return text

    return OptionType(f"one of {', '.join(words)}", words[0], parse)


@dataclass(frozen=True)
class Option:
    """One option of a pass: ``name{option=value}`` in a pipeline."""

    name: str
    type: OptionType
    doc: str


@dataclass(frozen=True)
class PassInfo:
    """A registered pass: its function, a one-line doc, its options with their defaults."""

    name: str
    run: PassFn
    doc: str
    options: tuple[Option, ...]
    defaults: Mapping[str, Any]  # option name -> default (REQUIRED when it has none)
    # "function": takes a Function (on a kernel, its body); "kernel": takes the whole Kernel
    # (grid, block specs and body), so it may change how the grid is cut
    subject: str = "function"

    def parse_options(self, given: Mapping[str, str], item: str) -> dict[str, Any]:
        """The values of the options written in ``item`` (``given``: name -> text), checked."""
        by_name = {o.name: o for o in self.options}
        unknown = sorted(set(given) - set(by_name))
        if unknown:
            raise PassError(
                f"pass '{self.name}' has no option {', '.join(map(repr, unknown))}",
                fix=f"its options: {self._listing() or 'none'}",
            )
        values = {}
        for name, text in given.items():
            option = by_name[name]
            try:
                values[name] = option.type.parse(text)
            except ValueError:
                raise PassError(
                    f"pass '{self.name}': option '{name}' takes {option.type.accepts}, "
                    f"got '{text}' in '{item}'",
                    fix=self._example(option),
                ) from None
        missing = [o for o in self.options if o.name not in given and self.required(o)]
        if missing:
            option = missing[0]
            raise PassError(
                f"pass '{self.name}' needs option '{option.name}' ({option.type.accepts})",
                fix=self._example(option),
            )
        return values

    def required(self, option: Option) -> bool:
        return self.defaults[option.name] is REQUIRED

    def _example(self, option: Option) -> str:
        return f"e.g. {self.name}{{{option.name}={option.type.example}}} ({option.doc})"

    def _listing(self) -> str:
        return ", ".join(f"{o.name} ({o.type.accepts})" for o in self.options)


PASSES: dict[str, PassInfo] = {}


def register(
    name: str, *options: Option, doc: str = "", subject: str = "function"
) -> Callable[[PassFn], PassFn]:
    """Adds the decorated function to ``PASSES`` as pass ``name`` taking ``options`` (each a
    keyword-only parameter of it); a name is registered once. The function is returned as is.
    ``subject="kernel"``: the pass takes and returns a traced ``Kernel`` (``ir.kernel_spec``)
    and runs only in a kernel's pipeline."""

    def add(fn: PassFn) -> PassFn:
        if name in PASSES:
            raise PassError(f"a pass named '{name}' is already registered")
        if subject not in SUBJECTS:
            raise PassError(f"pass '{name}': subject must be one of {SUBJECTS}, got {subject!r}")
        parameters = inspect.signature(fn).parameters
        for option in options:
            parameter = parameters.get(option.name)
            if parameter is None or parameter.kind is not inspect.Parameter.KEYWORD_ONLY:
                raise PassError(
                    f"pass '{name}' declares option '{option.name}', which is not a "
                    "keyword-only parameter of its function"
                )
        defaults = {o.name: parameters[o.name].default for o in options}
        summary = doc or (inspect.getdoc(fn) or "").partition("\n")[0]
        PASSES[name] = PassInfo(name, fn, summary, tuple(options), defaults, subject)
        return fn

    return add


def load(path: str) -> list[str]:
    """Runs a file of passes (``minipallas-opt --load``'s, run as ``__minipallas_load__`` so
    its demo under ``if __name__ == "__main__"`` stays quiet) and returns the names of the
    passes it registered. A file that cannot be read is a ``PassError``."""
    before = set(PASSES)
    try:
        runpy.run_path(path, run_name="__minipallas_load__")
    except OSError as e:
        raise PassError(f"cannot load passes from {path}: {e.strerror}") from None
    return sorted(set(PASSES) - before)


def describe() -> str:
    """The passes and their options, as ``minipallas-opt --help`` lists them: each option with
    what it takes and its default (an example only for a required one, so none reads as a
    default); a kernel pass is marked ``[kernel pass]``."""
    lines = ["passes (--pass-pipeline=NAME or NAME{option=value,...}, comma-separated):"]
    for info in sorted(PASSES.values(), key=lambda i: i.name):
        kind = " [kernel pass]" if info.subject == "kernel" else ""
        lines.append(f"  {info.name}{kind}: {info.doc}")
        for o in info.options:
            default = info.defaults[o.name]
            shown = (
                f"required, e.g. {o.name}={o.type.example}"
                if default is REQUIRED
                else f"default {_text(default)}"
            )
            lines.append(f"      {o.name}  ({o.type.accepts}; {shown})")
            lines.append(f"          {o.doc}")
    return "\n".join(lines)


def _text(value: Any) -> str:
    """A default as it is written in a pipeline."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return "x".join(map(str, value))
    return str(value)

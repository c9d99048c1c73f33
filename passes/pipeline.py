"""The pass manager: named passes, composed from a string such as
``"collectives,discharge,cleanup"``.

A pass takes a ``Function`` and returns a ``Function`` (a new one, or the same one when it only
checks). Each pass is registered next to its definition with its typed options (``registry``);
they live in ``PASSES`` by name. A pipeline names passes separated by commas; a pass may take
options in braces, parsed with their declared types and given to it as keyword arguments:
``discharge{discharge_scoped=false}``, ``batch{sizes=4x2,exact=false}``.

Algorithm of ``run``:
1. Parse the pipeline into (name, options) pairs; an unknown name, option or option value is a
   ``PassError`` naming the pass and what it accepts, raised before any pass runs.
2. With ``verify``, verify the input, so a bad input is not blamed on the first pass.
   ``verify`` left as None means on when the environment has ``MINIPALLAS_VERIFY=1`` (the
   tests set it, so every path's passes are verified there; off by default, for speed).
3. Run each pass on the previous one's result; with ``verify``, verify what it returned (a
   failure gets a note naming the pass); then call ``after_each(name, fn)``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from minipallas.ir import verifier
from minipallas.ir.core import Function
from minipallas.ir.errors import MiniPallasError, PassError
from minipallas.passes.registry import PASSES, register

__all__ = ["PASSES", "VERIFY_ENV", "parse_pipeline", "pass_names", "register", "run"]

VERIFY_ENV = "MINIPALLAS_VERIFY"  # =1: verify before and after every pass of every pipeline


def run(
    fn: Function,
    pipeline: str,
    *,
    verify: bool | None = None,
    after_each: Callable[[str, Function], None] | None = None,
) -> Function:
    """Runs the passes named in ``pipeline`` on ``fn`` in order and returns the last result."""
    steps = parse_pipeline(pipeline)
    if verify is None:
        verify = os.environ.get(VERIFY_ENV) == "1"
    if verify:
        _verify(fn, "before the first pass", pipeline)
    for name, options in steps:
        fn = PASSES[name].run(fn, **options)
        if verify:
            _verify(fn, f"after pass '{name}'", pipeline)
        if after_each is not None:
            after_each(name, fn)
    return fn


def parse_pipeline(pipeline: str) -> list[tuple[str, dict[str, Any]]]:
    """``"a,b{k=v,k2=v2}"`` -> ``[("a", {}), ("b", {"k": v, "k2": v2})]``, each value parsed
    with its option's type (``discharge{discharge_scoped=false}`` gives ``False``)."""
    steps = []
    for item in _split_top_level(pipeline):
        name, _, rest = item.partition("{")
        name = name.strip()
        if name not in PASSES:
            known = ", ".join(sorted(PASSES))
            raise PassError(
                f"unknown pass '{name}' in pipeline '{pipeline}'", fix=f"known passes: {known}"
            )
        options = _parse_options(rest, item, pipeline) if rest else {}
        steps.append((name, PASSES[name].parse_options(options, item)))
    return steps


def pass_names(pipeline: str) -> list[str]:
    """The names of ``pipeline``'s passes in order, as written (``run`` checks them): what a
    hook that shows each pass needs to know ahead."""
    return [item.partition("{")[0].strip() for item in _split_top_level(pipeline)]


def _split_top_level(pipeline: str) -> list[str]:
    """Split at commas outside braces; an empty pipeline is no passes at all."""
    items, depth, current = [], 0, ""
    for char in pipeline:
        depth += {"{": 1, "}": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    items.append(current)
    if len(items) == 1 and not items[0].strip():
        return []
    return [item.strip() for item in items]


def _parse_options(rest: str, item: str, pipeline: str) -> dict[str, str]:
    body = rest.strip()
    if not body.endswith("}"):
        raise PassError(
            f"'{item}' in pipeline '{pipeline}' has no closing '}}'",
            fix="write options as name{key=value,key2=value2}",
        )
    options = {}
    for pair in filter(None, (p.strip() for p in body[:-1].split(","))):
        key, eq, value = pair.partition("=")
        if not eq or not key.strip():
            raise PassError(f"option '{pair}' of '{item}' is not key=value")
        if key.strip() in options:
            raise PassError(f"option '{key.strip()}' is given twice in '{item}'")
        options[key.strip()] = value.strip()
    return options


def _verify(fn: Function, when: str, pipeline: str) -> None:
    try:
        verifier.verify(fn)
    except MiniPallasError as e:
        e.add_note(f"the IR failed to verify {when} of pipeline '{pipeline}'")
        raise

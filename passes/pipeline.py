"""The pass manager: named passes, composed from a string such as
``"collectives,discharge,cleanup"``.

A pass takes a ``Function`` and returns a ``Function`` (a new one, or the same one when it only
checks). A pipeline may also run on a traced ``Kernel`` (a ``pallas_call``'s grid, block specs
and body): a function pass then transforms the kernel's body, and a *kernel pass* (registered
with ``subject="kernel"``, such as ``fuse-grid-steps``) the whole kernel; a kernel pass named in
a function's pipeline is an error.

Each pass is registered next to its definition with its typed options (``registry``); they live
in ``PASSES`` by name. A pipeline names passes separated by commas; a pass may take options in
braces, parsed with their declared types and given to it as keyword arguments:
``discharge{discharge_scoped=false}``, ``batch{sizes=4x2,exact=false}``.

Algorithm of ``run``:
1. Parse the pipeline into (name, options) pairs; an unknown name, option or option value is a
   ``PassError`` naming the pass and what it accepts, raised before any pass runs.
2. With ``verify``, verify the input, so a bad input is not blamed on the first pass.
   ``verify`` left as None means on when the environment has ``MINIPALLAS_VERIFY=1`` (the
   tests set it, so every path's passes are verified there; off by default, for speed).
3. Run each pass on the previous one's result; with ``verify``, verify what it returned (a
   failure gets a note naming the pass); then call ``after_each(name, fn)`` (for a kernel,
   ``fn`` is its body).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any, TypeVar

from minipallas.ir import verifier
from minipallas.ir.core import Function
from minipallas.ir.errors import MiniPallasError, PassError
from minipallas.ir.kernel_spec import Kernel
from minipallas.passes.registry import PASSES, register

__all__ = [
    "PASSES",
    "VERIFY_ENV",
    "parse_pipeline",
    "pass_names",
    "register",
    "run",
    "split_pipeline",
]

VERIFY_ENV = "MINIPALLAS_VERIFY"  # =1: verify before and after every pass of every pipeline
Subject = TypeVar("Subject", Function, Kernel)


def run(
    subject: Subject,
    pipeline: str,
    *,
    verify: bool | None = None,
    after_each: Callable[[str, Function], None] | None = None,
) -> Subject:
    """Runs the passes named in ``pipeline`` on ``subject`` (a ``Function``, or a ``Kernel``)
    in order and returns the last result."""
    steps = parse_pipeline(pipeline)
    is_kernel = isinstance(subject, Kernel)
    if not is_kernel:
        _no_kernel_passes(steps, pipeline)
    if verify is None:
        verify = os.environ.get(VERIFY_ENV) == "1"
    if verify:
        _verify(subject, "before the first pass", pipeline)
    for name, options in steps:
        info = PASSES[name]
        if is_kernel and info.subject == "function":
            subject = dataclasses.replace(subject, body=info.run(subject.body, **options))
        else:
            subject = info.run(subject, **options)
        if verify:
            _verify(subject, f"after pass '{name}'", pipeline)
        if after_each is not None:
            after_each(name, subject.body if is_kernel else subject)
    return subject


def _no_kernel_passes(steps: list[tuple[str, dict[str, Any]]], pipeline: str) -> None:
    for name, _ in steps:
        if PASSES[name].subject == "kernel":
            raise PassError(
                f"pass '{name}' transforms a kernel (its grid and block specs), but pipeline "
                f"'{pipeline}' runs on a function",
                fix="run it in a kernel's pipeline: pallas_call(..., passes='"
                f"{name}'), or minipallas-opt --pass-pipeline on a kernel file",
            )


def parse_pipeline(pipeline: str) -> list[tuple[str, dict[str, Any]]]:
    """``"a,b{k=v,k2=v2}"`` -> ``[("a", {}), ("b", {"k": v, "k2": v2})]``, each value parsed
    with its option's type (``discharge{discharge_scoped=false}`` gives ``False``)."""
    steps = []
    for item in split_pipeline(pipeline):
        name, _, rest = item.partition("{")
        name = name.strip()
        if name not in PASSES:
            known = ", ".join(sorted(PASSES))
            raise PassError(
                f"unknown pass '{name}' in pipeline '{pipeline}'",
                fix=f"known passes: {known}; a pass of your own is registered by loading its "
                "file first (minipallas-opt --load FILE.py, the same flag on the difftest and "
                "the fuzzers; minipallas.passes.registry.load in Python)",
            )
        options = _parse_options(rest, item, pipeline) if rest else {}
        steps.append((name, PASSES[name].parse_options(options, item)))
    return steps


def pass_names(pipeline: str) -> list[str]:
    """The names of ``pipeline``'s passes in order, as written (``run`` checks them): what a
    hook that shows each pass needs to know ahead."""
    return [item.partition("{")[0].strip() for item in split_pipeline(pipeline)]


def split_pipeline(pipeline: str) -> list[str]:
    """Each pass of ``pipeline`` as written, its options with it: ``"a,b{k=1,j=2}"`` ->
    ``["a", "b{k=1,j=2}"]`` (split at commas outside braces; an empty pipeline is no passes
    at all)."""
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


def _verify(subject: Function | Kernel, when: str, pipeline: str) -> None:
    functions = (
        [subject.body, *(s.index_map for s in (*subject.in_specs, *subject.out_specs))]
        if isinstance(subject, Kernel)
        else [subject]
    )
    try:
        for fn in functions:
            verifier.verify(fn)
    except MiniPallasError as e:
        e.add_note(f"the IR failed to verify {when} of pipeline '{pipeline}'")
        raise

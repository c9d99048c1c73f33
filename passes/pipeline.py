"""The pass manager: named passes, composed from a string such as
``"collectives,discharge,cleanup"``.

A pass takes a ``Function`` and returns a ``Function`` (a new one, or the same one when it only
checks). Passes live in ``PASSES`` by name; ``@register(name)`` adds one. A pipeline names passes
separated by commas; a pass may take options in braces, given to it as keyword arguments of
type ``str``: ``collectives{context=mosaic}``.

Algorithm of ``run``:
1. Parse the pipeline into (name, options) pairs; an unknown name or option is a ``PassError``
   that lists the known ones, raised before any pass runs.
2. With ``verify``, verify the input, so a bad input is not blamed on the first pass.
3. Run each pass on the previous one's result; with ``verify``, verify what it returned (a
   failure gets a note naming the pass); then call ``after_each(name, fn)``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from minipallas.errors import MiniPallasError, PassError
from minipallas.ir.core import Function
from minipallas.passes.batching import batch_pass
from minipallas.passes.cleanup import cleanup
from minipallas.passes.collectives import collectives
from minipallas.passes.discharge import discharge

PassFn = Callable[..., Function]  # pass(fn, **options) -> Function
PASSES: dict[str, PassFn] = {}


def register(name: str) -> Callable[[PassFn], PassFn]:
    """Adds a pass to ``PASSES`` under ``name``; a name is registered once."""

    def add(fn: PassFn) -> PassFn:
        if name in PASSES:
            raise PassError(f"a pass named '{name}' is already registered")
        PASSES[name] = fn
        return fn

    return add


def run(
    fn: Function,
    pipeline: str,
    *,
    verify: bool = False,
    after_each: Callable[[str, Function], None] | None = None,
) -> Function:
    """Runs the passes named in ``pipeline`` on ``fn`` in order and returns the last result."""
    steps = parse_pipeline(pipeline)
    if verify:
        _verify(fn, "before the first pass", pipeline)
    for name, options in steps:
        fn = PASSES[name](fn, **options)
        if verify:
            _verify(fn, f"after pass '{name}'", pipeline)
        if after_each is not None:
            after_each(name, fn)
    return fn


def parse_pipeline(pipeline: str) -> list[tuple[str, dict[str, str]]]:
    """``"a,b{k=v,k2=v2}"`` -> ``[("a", {}), ("b", {"k": "v", "k2": "v2"})]``, checked."""
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
        _check_options(name, options)
        steps.append((name, options))
    return steps


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
        options[key.strip()] = value.strip()
    return options


def _check_options(name: str, options: dict[str, str]) -> None:
    accepted = [
        p.name
        for p in inspect.signature(PASSES[name]).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    ]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise PassError(
            f"pass '{name}' has no option {', '.join(map(repr, unknown))}",
            fix=f"its options: {', '.join(accepted) or 'none'}",
        )


def _verify(fn: Function, when: str, pipeline: str) -> None:
    from minipallas.ir.verifier import verify

    try:
        verify(fn)
    except MiniPallasError as e:
        e.add_note(f"the IR failed to verify {when} of pipeline '{pipeline}'")
        raise


register("collectives")(collectives)
register("discharge")(discharge)
register("cleanup")(cleanup)
register("batch")(batch_pass)

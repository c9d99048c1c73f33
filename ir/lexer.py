"""Tokens of the text IR, each able to say at which ``line:col`` it starts.

One compiled regular expression scans the whole text in a single pass, so lexing is linear.
Blanks, newlines and ``//`` comments (FileCheck's ``RUN``/``CHECK`` lines included) are
skipped as part of the following match. A token keeps only its offset; ``Source.loc`` turns
that into ``line:col`` (by bisection over the line starts) when an error or an op needs it.
"""

from __future__ import annotations

import bisect
import re
from operator import itemgetter
from typing import NamedTuple

from minipallas.ir.errors import ParseError
from minipallas.ir.location import Location

VALUE = "value"  # %0, %acc
SYMBOL = "symbol"  # @kernel, @"<lambda>"
STRING = "string"  # "x"
NUMBER = "number"  # 3, -1, 0x7fc00001, 1.5e-3, inf, -inf, nan
IDENT = "ident"  # op names, keywords, dtypes, memory spaces
EOF = "end"
# and "punct": ( ) [ ] { } , : = ^ -> ...  (the parser matches these by their text)

_TOKEN = re.compile(
    r"""
    (?:\s|//[^\n]*)*
    (?:
      (?P<value>%[A-Za-z0-9_.$]+)
    | (?P<symbol>@(?:[A-Za-z_][A-Za-z0-9_.$]*|"(?:[^"\\\n]|\\.)*"))
    | (?P<string>"(?:[^"\\\n]|\\.)*")
    | (?P<punct>->|\.\.\.|[()\[\]{},:=^])
    | (?P<number>-?(?:0x[0-9A-Fa-f]+|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|inf\b)|nan\b)
    | (?P<ident>[A-Za-z_][A-Za-z0-9_.]*)
    | (?P<end>\Z)
    | (?P<error>.)
    )
    """,
    re.VERBOSE,
)


class Source:
    """The text's line starts, to turn an offset into ``line:col`` (both counted from 1)."""

    def __init__(self, text: str) -> None:
        self.line_starts = [0, *(m.end() for m in re.finditer("\n", text))]

    def loc(self, offset: int) -> Location:
        line = bisect.bisect_right(self.line_starts, offset)
        return Location("", line, offset - self.line_starts[line - 1] + 1)


class Token(NamedTuple):
    """One token: its kind (a group name of ``_TOKEN``), its text, and its offset in the text."""

    kind: str
    text: str
    offset: int

    def describe(self) -> str:
        """How an error message names this token."""
        return "end of input" if self.kind == EOF else repr(self.text)


def tokenize(text: str) -> list[Token]:
    """All tokens of ``text``, ending with an ``EOF`` token; a bad character is a ParseError."""
    make = tuple.__new__  # NamedTuple's own __new__ is Python code: too slow for the hot loop
    tokens = [
        make(Token, (m.lastgroup, m.group(m.lastindex), m.start(m.lastindex)))
        for m in _TOKEN.finditer(text)
    ]
    if "error" in map(itemgetter(0), tokens):
        bad = next(tok for tok in tokens if tok.kind == "error")
        raise ParseError(f"unexpected character {bad.text!r}", loc=Source(text).loc(bad.offset))
    return tokens

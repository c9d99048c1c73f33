"""Which parameter values a kernel campaign drew, and the verdict each kernel got (issue 46).

``make fuzz-kernels`` and ``make fuzz-tpu`` draw the parameters of
``minipallas.tools.generate.kernel_params`` (a dot's precision, an approximate reciprocal, an
accuracy, a buffer count, alignment promises, output dtypes). A campaign that never drew
``HIGHEST`` says nothing about it, so each campaign counts, per parameter value, the kernels
that drew it and their verdicts::

    dot precision=HIGHEST: 6 kernels (agree 5, both-refuse 1)
    pipeline_mode=Buffered(3): 3 kernels (both-refuse 3)

A kernel that draws several parameters counts under each.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TextIO


@dataclass
class Coverage:
    """Per ``(parameter, value)``: the verdicts of the kernels that drew it."""

    verdicts: dict[tuple[str, str], Counter] = field(default_factory=dict)

    def add(self, params: Mapping[str, str], verdict: str) -> None:
        for name, value in params.items():
            self.verdicts.setdefault((name, value), Counter())[verdict] += 1

    def merge(self, other: Coverage) -> None:
        for key, counts in other.verdicts.items():
            self.verdicts.setdefault(key, Counter()).update(counts)

    def lines(self) -> list[str]:
        """One line per value drawn, parameters in name order (module doc)."""
        out = []
        for (name, value), counts in sorted(self.verdicts.items()):
            verdicts = ", ".join(f"{v} {n}" for v, n in sorted(counts.items()))
            out.append(f"{name}={value}: {sum(counts.values())} kernels ({verdicts})")
        return out

    def rows(self) -> dict[str, int]:
        """Kernels per value, for a campaign's summary table."""
        return {
            f"drew {name}={value}": sum(counts.values())
            for (name, value), counts in sorted(self.verdicts.items())
        }

    def report(self, out: TextIO | None = None) -> None:
        """The lines, under a heading (nothing when no parameter was drawn)."""
        if self.verdicts:
            print("parameters drawn (kernels, by verdict):", file=out)
            for line in self.lines():
                print(f"  {line}", file=out)

"""The error for an op upstream Pallas's Triton lowering has no rule for (it raises
"Unimplemented primitive in Pallas Triton lowering"), which minipallas rejects as well."""

from __future__ import annotations

from minipallas.ir.core import Op
from minipallas.ir.errors import PassError


def no_triton_rule(op: Op, fix: str, what: str | None = None) -> PassError:
    """``what`` (default: the op) has no Triton lowering, as upstream has none."""
    what = what or op.name
    return PassError(
        f"{what} has no Triton lowering (upstream Pallas's Triton backend has no rule for it)",
        op=op.name,
        loc=op.loc,
        fix=fix,
    )

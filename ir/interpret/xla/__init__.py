"""How XLA:CPU computes numbers, emulated with numpy: the interpreter's arithmetic follows it, so
its results agree with the compiled program's bit for bit (values read off XLA on CPU, jaxlib
0.10.2).

- ``numerics``: integer division, conversions, low-precision floats, subnormal flushing;
- ``transcendental``, ``special``: XLA:CPU's own ``exp``, ``log``, ``tanh``, ``erf``... step by
  step in float32; ``decompositions``: the ops upstream writes as formulas of other ops;
- ``dot_order``: the order YNNPACK sums a bfloat16 dot in; ``sum_order``: the order XLA adds a
  short float sum in; ``extremes``: where NaNs and signed zeros go in the max and min
  reductions YNNPACK runs.

The rules (``ir/interpret/rules/arrays.py`` and its siblings) call these; nothing here registers a
rule. What *another* correct compiler may compute instead (the difftest's numerics envelope) is
not here but in ``minipallas/tools/difftest/``.
"""

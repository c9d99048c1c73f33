"""The numerics envelope: how far a float output may move under a correct compiler.

- ``measure``: the envelope of a program's outputs (the interpreter re-run under the freedoms
  XLA has) and whether a value lies within it (``envelope``, ``Distance``, ``ulp_distance``);
- ``perturb``: those freedoms as interpreter rules (``Perturbation``);
- ``reorder``: how far any order may move a float sum or dot (``OrderBound``);
- ``chips``: what a TPU computes differently from the interpreter, measured on the chip;
- ``machine``: which CPU ran XLA's side of a verdict, and what the envelope assumed of it.
"""

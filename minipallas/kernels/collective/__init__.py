"""Kernels whose programs run together (``collectives="simulate"``): the multi-program
simulator and the one pure program a race-free collective kernel becomes."""

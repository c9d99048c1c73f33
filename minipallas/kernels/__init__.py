"""Pallas kernels: a body over refs, a grid, and block specs that cut arrays into blocks."""

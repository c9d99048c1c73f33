"""What the tests of programs that run together share: the group size, a run of every program
of a 1-D grid under ``collectives="simulate"``, and an input of one row per program."""

import numpy as np

import minipallas as mp

N = 4


def simulate(fn, *args, schedule="lockstep", grid=(N,), names=("x",)):
    return mp.interpret(
        fn, *args, grid=grid, grid_names=names, collectives="simulate", schedule=schedule
    )


def rows():
    return np.arange(N * 8, dtype=np.float32).reshape(N, 8)

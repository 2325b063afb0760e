"""counter.py - a small program on the Python binding, for
tests/bindings/test_python.py; the twin of counter.f90.

    counter.py {mpi|serial} ITERATIONS EVERY LEVEL KILL_RANK KILL_ITERATION OUTPUT

An iteration counter and arrays of several dtypes and shapes, updated each
step (under MPI from an allreduce, so the ranks depend on each other) and
checkpointed every EVERY steps at LEVEL (a stasis.LEVEL_* number). A fresh
run with KILL_RANK >= 0 has that rank SIGKILL itself after step
KILL_ITERATION; a restarted run never kills, so the same command line
finishes the job. Each rank writes its final state, raw, to OUTPUT.<rank>."""
import os
import signal
import sys

import numpy as np

import stasis


def main(argv):
    mode, iterations, every, level, kill_rank, kill_iteration, output = argv
    iterations, every, level = int(iterations), int(every), int(level)
    kill_rank, kill_iteration = int(kill_rank), int(kill_iteration)
    if mode == "mpi":
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        rank = comm.Get_rank()
        stasis.init(comm)

        def allsum(x):
            return comm.allreduce(x, op=MPI.SUM)
    else:
        comm, rank = None, 0
        stasis.init()

        def allsum(x):
            return x

    step = np.zeros(1, dtype=np.int64)
    grid = np.add.outer(np.arange(16.0) + rank, np.zeros(8)) / 7.0          # float64, 2-D
    field = np.full(32, rank + 1, dtype=np.float32)
    counts = np.zeros((2, 2), dtype=np.int32, order="F")
    pairs = np.zeros(3, dtype=np.complex128)                                 # a 16-byte type
    for i, a in enumerate((step, grid, field, counts, pairs)):
        stasis.protect(i, a)

    fresh = stasis.status() == stasis.FRESH
    if not fresh:
        stasis.recover()
        if rank == 0:
            print(f"counter: restarted at step {step[0]}", flush=True)

    while step[0] < iterations:
        step[0] += 1
        s = int(step[0])
        total = allsum(float(grid.sum()) + float(field.sum(dtype=np.float64)))
        grid *= 0.5
        grid += 1e-3 * total + s * 1e-2
        row = s % grid.shape[0]
        grid[row, :] = np.sqrt(grid[row, :] + rank)
        field *= np.float32(0.75)
        field += np.float32((s * (rank + 3)) % 11)
        counts.flat[s % 4] += s * (rank + 1)
        pairs[s % 3] += complex(s, -rank)
        if s % every == 0:
            stasis.checkpoint(level)
        if fresh and rank == kill_rank and s == kill_iteration:
            stasis.checkpoint_wait()    # its copies are made: the kill strikes after
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)

    with open(f"{output}.{rank}", "wb") as f:
        for a in (step, grid, field, counts, pairs):
            f.write(a.tobytes(order="A"))
    stasis.finalize()
    if rank == 0:
        print(f"counter: done step={step[0]} sum={grid.sum()!r}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 8:
        sys.exit(__doc__)
    main(sys.argv[1:])

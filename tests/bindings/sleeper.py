"""A rank that checkpoints once and then makes no Stasis call at all.

usage: sleeper.py LEVEL DIR
Protects 4 MiB of numbers, takes one checkpoint at LEVEL, writes
DIR/ready.<rank> (with its pid), then sleeps until DIR/go exists, calling
nothing of Stasis; then finalizes and prints "sleeper: done" (rank 0).
tests/bindings/test_async.py watches what happens in the store meanwhile."""
import os
import sys
import time

import numpy as np
from mpi4py import MPI

import stasis


def main(level, where):
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    stasis.init(comm)
    data = np.arange(1 << 19, dtype=np.float64) * (rank + 1)
    stasis.protect(0, data)
    stasis.checkpoint(level)
    ready = os.path.join(where, f"ready.{rank}")
    with open(ready + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(ready + ".tmp", ready)     # whole, or not there
    deadline = time.monotonic() + 50
    while not os.path.exists(os.path.join(where, "go")) and time.monotonic() < deadline:
        time.sleep(0.02)
    stasis.finalize()
    if rank == 0:
        print("sleeper: done", flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(int(sys.argv[1]), sys.argv[2])

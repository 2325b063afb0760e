"""The Python binding's distributed arrays and routed files.

usage: distributed.py mpi|serial write|read|files
  write (mpi): each rank protects its part of a 1001-element float64 array
        (element i = 0.5 * i + 3) and a step counter (7), checkpoints them at
        the GLOBAL level, then writes an output set "set1" with one routed
        file per rank, part-<rank>.txt;
  read: whatever the number of ranks (serial: one), each rank protects its
        part, recovers, checks every element and the counter;
  files (mpi): start_restart finds "set1" and each rank reads its file.
Prints "distributed: OK <what>" on rank 0, or raises."""
import sys

import numpy as np

import stasis

COUNT = 1001


def main(mode, what):
    if mode == "mpi":
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        rank, size = comm.Get_rank(), comm.Get_size()
        stasis.init(comm)
    else:
        rank, size = 0, 1
        stasis.init()
    off = COUNT * rank // size
    n = COUNT * (rank + 1) // size - off
    part = np.zeros(n, dtype=np.float64)
    step = np.zeros(1, dtype=np.int32)
    stasis.protect(0, step)
    stasis.protect_distributed(1, part, COUNT, off)
    if what == "write":
        part[:] = 0.5 * np.arange(off, off + n) + 3
        step[0] = 7
        stasis.checkpoint(stasis.LEVEL_GLOBAL)
        stasis.start_output("set1")
        with open(stasis.route_file(f"part-{rank}.txt"), "w") as f:
            f.write(f"rank {rank} of {size}\n")
        stasis.complete_output()
    elif what == "read":
        assert stasis.status() == stasis.RESTARTED
        stasis.recover()
        assert step[0] == 7, step
        assert np.array_equal(part, 0.5 * np.arange(off, off + n) + 3), part
    else:
        assert stasis.start_restart() == "set1"
        with open(stasis.route_file(f"part-{rank}.txt")) as f:
            assert f.read() == f"rank {rank} of {size}\n"
        stasis.complete_restart()
    stasis.finalize()
    if rank == 0:
        print(f"distributed: OK {what} ({size} rank{'s' if size > 1 else ''})", flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])

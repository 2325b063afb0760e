"""An mpi4py + numpy rank for tests/split/test_mpi4py.py: an array that
evolves by an Allreduce every iteration.

    python3 evolve.py ITERATIONS SLEEP_MS [DIR]

Every rank holds the same x (2**16 doubles). Iteration i: each rank adds
sin((rank + 1) * x + i) into y by MPI_Allreduce, then x = x/2 + y/4. Each
rank checks y against the sum it computes itself for every rank (bit for
bit on 2 ranks: one addition, in either order), that x is the same on every
rank and a counter's Allreduce, and prints

    rank R iteration I checksum HEX

(x.sum() as float.hex: a restarted run must print the same numbers as an
uninterrupted one), then PASS or FAIL at the end. With DIR, each rank
reads the previous iteration's number from DIR/w-R.txt, rewrites it with
this one's and appends "iteration I" to DIR/a-R.txt, closing both: files
whose state after a restart is the checkpoint's only if Stasis saved them
(docs/split.md, "Files written after the checkpoint")."""
import sys
import time

import numpy as np
from mpi4py import MPI

N = 1 << 16


def files(d, rank, i, bad):
    w = f"{d}/w-{rank}.txt"
    if i > 0:
        with open(w) as f:
            got = f.read()
        if got != f"{i - 1}\n":
            bad.append(f"iteration {i}: w-{rank}.txt holds {got!r}")
    with open(w, "w") as f:
        f.write(f"{i}\n")
    with open(f"{d}/a-{rank}.txt", "a") as f:
        f.write(f"iteration {i}\n")


def main():
    iters, sleep_ms = int(sys.argv[1]), int(sys.argv[2])
    d = sys.argv[3] if len(sys.argv) > 3 else None
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    x = np.linspace(0.0, 1.0, N)
    y = np.empty_like(x)
    history = []           # Python objects on the heap, checked at the end
    bad = []
    for i in range(iters):
        local = np.sin((rank + 1) * x + i)
        comm.Allreduce(local, y, op=MPI.SUM)
        want = sum(np.sin((r + 1) * x + i) for r in range(size))
        if not (np.array_equal(y, want) if size == 2 else np.allclose(y, want, rtol=1e-12)):
            bad.append(f"iteration {i}: Allreduce differs from the sum")
        x = 0.5 * x + 0.25 * y
        total = float(x.sum())
        if comm.allreduce(total, op=MPI.MAX) != comm.allreduce(total, op=MPI.MIN):
            bad.append(f"iteration {i}: ranks disagree on x")
        if comm.allreduce(i * (rank + 1)) != i * size * (size + 1) // 2:
            bad.append(f"iteration {i}: counter")
        history.append((i, total.hex()))
        print(f"rank {rank} iteration {i} checksum {total.hex()}", flush=True)
        if d:
            files(d, rank, i, bad)
        time.sleep(sleep_ms / 1000.0)
    if [h[0] for h in history] != list(range(iters)):
        bad.append("history lost")
    comm.Barrier()
    if bad:
        print(f"FAIL rank {rank}: {'; '.join(bad[:5])}", flush=True)
        sys.exit(1)
    print(f"PASS rank {rank} ranks={size} iterations={iters} checksum={history[-1][1]}",
          flush=True)


main()

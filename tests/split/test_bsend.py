"""Buffered sends across restarts (docs/split.md, "Messages in flight"):
bsend.c attaches a buffer and makes a persistent buffered send before its
loop; every iteration sends its right neighbour 8 ints and 40000 ints with
MPI_Bsend, 5 with MPI_Ibsend and 3 with the persistent one, overwrites the
send buffers at once, and sleeps with all of them in flight; the neighbour
receives and checks them in the next iteration. The lower half sends a
copy of each as a counted standard send, which the drain completes, so a
checkpoint in the sleep loses none of them, above either MPI.

Environment: STASIS_BIN, STASIS_BUILD."""

from program_tests import program_tests

# bsend.c's checks per rank (n) and iterations (i)
prog, test_runs, test_three_cycles = program_tests(
    "bsend", lambda n, i: n * (i * 5 + 1))

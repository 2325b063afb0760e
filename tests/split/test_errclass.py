"""Error classes, codes and strings the program adds, across restarts
(docs/split.md, "Errors"): errclass.c adds a class, two codes and two
strings before its loop and checks MPI_Error_class, MPI_Error_string,
MPI_LASTUSEDCODE and MPI_Comm_call_errhandler with them every iteration.
They live in the upper half, so a restart keeps them, above either MPI.

Environment: STASIS_BIN, STASIS_BUILD."""

from program_tests import program_tests

# errclass.c's checks per rank (n) and iterations (i)
prog, test_runs, test_three_cycles = program_tests(
    "errclass", lambda n, i: n * i * 8)

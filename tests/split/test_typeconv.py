"""Datatypes of the array constructors and Fortran integers of handles
across restarts (docs/split.md, "Objects across a restart", "The function
list"): typeconv.c makes subarrays (C and Fortran order), distributed arrays
(block, cyclic, none; the default distribution argument), the predefined
types of MPI_Type_create_f90_* and a vector of one, and takes the Fortran
integers (MPI_X_c2f) of a communicator, a datatype, a group, an operation,
an info, an error handler, persistent requests and predefined handles before
its loop; every iteration sends with each datatype and checks every element
received, holes included, and checks that each integer still gives its
handle back (MPI_X_f2c). The values of the array constructors that differ
between the ABIs (MPI_ORDER_C is 0 in Open MPI's and 56 in MPICH's, ...) are
translated going down and recorded in neutral terms, so a restart above the
other MPI builds the same datatypes.

Environment: STASIS_BIN, STASIS_BUILD."""
from program_tests import program_tests

ITERS = 24


def checks(n, iters):
    """What typeconv.c counts: per rank and iteration 2 on conversions, 2 per
    datatype (received, size and extent), 6 on the rest."""
    return n * iters * (2 + 2 * 8 + 6)


prog, test_runs, test_three_cycles = program_tests("typeconv", checks, iters=ITERS)

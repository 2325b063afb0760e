"""Intercommunicators and the communicator and group calls across restarts
(docs/split.md, "Objects across a restart"): comms.c makes an
intercommunicator between the even and the odd ranks, its remote group, the
even and odd groups by MPI_Group_range_incl/excl, a communicator of the
even ranks by MPI_Comm_create_group, one by MPI_Comm_dup_with_info (its
info set and read back) and one by MPI_Comm_idup before its loop; every
iteration sends across the intercommunicator, reduces and broadcasts on it,
merges it (MPI_Intercomm_merge: after each restart too) and checks the
merged ranks, and reduces on the others. A restart builds the
intercommunicator again from both groups' members (MPI_Intercomm_create
between their first members), and the drain counts its messages by the
remote group's world ranks.

Environment: STASIS_BIN, STASIS_BUILD."""

from program_tests import program_tests

# comms.c's checks per rank (n) and iterations (i)
prog, test_runs, test_three_cycles = program_tests(
    "comms", lambda n, i: n * i * 22 + n // 2 * i, ranks=4)

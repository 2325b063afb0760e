"""The datatype and status queries across restarts (docs/split.md, "The
function list"): types.c makes a vector, a Fortran-order subarray, a struct
holding the vector, a cyclic darray, a resized and an hindexed type before
its loop; every iteration checks each one's MPI_Type_get_envelope and
MPI_Type_get_contents (the subarray's and darray's order and distribution
in the program's ABI, whatever MPI is below; the vector inside the others
a derived type, freed after), MPI_Get_elements(_x) of a partial receive,
MPI_Status_set_elements(_x), MPI_Status_set_cancelled/MPI_Test_cancelled,
MPI_Type_match_size (the same handle each time) and MPI_Pack_external /
MPI_Unpack_external ("external32": big-endian on either MPI).

Environment: STASIS_BIN, STASIS_BUILD."""

from program_tests import program_tests

# types.c's checks per rank (n) and iterations (i)
prog, test_runs, test_three_cycles = program_tests(
    "types", lambda n, i: n * i * 73)

"""MPI-IO's shared file pointers, split collectives and non-blocking calls
across restarts (docs/split.md, "Files"): fileio.c opens a file before its
loop; every iteration writes through the shared file pointer
(MPI_File_write_shared, _iwrite_shared, _write_ordered_begin/_end), checks
its position, seeks it back (MPI_File_seek_shared) and reads with
MPI_File_read_ordered and _read_shared, then writes and reads its left
neighbour's data with MPI_File_iwrite_at(_all), _iread_at(_all),
_write_at_all_begin/_end, _read_all_begin/_end and _iread, and checks
MPI_File_get_view. A checkpoint may fall between a split collective's
begin and end. The shared file pointer is recorded at the checkpoint and
sought again at the restart; a split collective is done whole by its
begin, its status kept for the end.

Environment: STASIS_BIN, STASIS_BUILD."""

from program_tests import program_tests
from split_common import data_file

# fileio.c's checks per rank (n) and iterations (i)
prog, test_runs, test_three_cycles = program_tests(
    "fileio", lambda n, i: n * i * 13, args=lambda tmp_path: [data_file(tmp_path)], sleep_ms=60)

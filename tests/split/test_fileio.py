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
begin, its status kept for the end. An MPI_File_iwrite_at_all,
MPI_File_iwrite_at, MPI_File_iwrite, _iwrite_shared and MPI_File_iread_at
are in flight where the checkpoint comes on even iterations (the drain
completes them; on odd ones it comes between a split collective's begin
and end). After every passing run, with or without restarts, the file's
bytes are compared with what an uninterrupted run writes (expected_ints
below, which the native run is held to as well).

Environment: STASIS_BIN, STASIS_BUILD."""

import array

from program_tests import program_tests
from split_common import data_file


def expected_ints(n, iters):
    """The file fileio.c leaves, as ints, by its header's offsets; None for
    the pairs of MPI_File_write_shared and _iwrite_shared, whose order
    between ranks is the MPI's (check_file sees them)."""
    f = [0] * (200000 + 6 * n * iters)
    for i in range(iters):
        P, R, F = 6 * n * i, 100000 + 8 * n * i, 200000 + 6 * n * i
        for r in range(n):
            v = 1000 * r + i
            f[P + 2 * r:P + 2 * r + 2] = [None, None]
            f[P + 4 * n + 2 * r:P + 4 * n + 2 * r + 2] = [None, None]
            f[P + 2 * n + 2 * r:P + 2 * n + 2 * r + 2] = [v + 1, i + 1000]
            for k in range(1, 5):
                f[R + 2 * (k - 1) * n + 2 * r:R + 2 * (k - 1) * n + 2 * r + 2] = [v, k]
            for k in range(3):
                f[F + 2 * k * n + 2 * r:F + 2 * k * n + 2 * r + 2] = [v, 6 + k]
    return f


def check_file(tmp_path, n, iters):
    """The data file's bytes are what an uninterrupted run writes; the
    shared pointer's pairs of each iteration, (v, I) from P and (v, 9) from
    P + 4 n, are every rank's, once each."""
    (path,) = tmp_path.glob("f-*.dat")
    got = array.array("i", path.read_bytes())
    want = expected_ints(n, iters)
    assert len(got) == len(want), f"{path}: {len(got)} ints, expected {len(want)}"
    for i in range(iters):
        for at, second in ((6 * n * i, i), (6 * n * i + 4 * n, 9)):
            pairs = sorted(tuple(got[at + 2 * r:at + 2 * r + 2]) for r in range(n))
            assert pairs == [(1000 * r + i, second) for r in range(n)], \
                f"iteration {i}: shared pairs at {at}: {pairs}"
    wrong = [k for k, w in enumerate(want) if w is not None and got[k] != w]
    assert not wrong, f"{path}: {len(wrong)} ints differ, first at int {wrong[0]}: " \
        f"{got[wrong[0]]}, expected {want[wrong[0]]}"


# fileio.c's checks per rank (n) and iterations (i)
prog, test_runs, test_three_cycles = program_tests(
    "fileio", lambda n, i: n * i * 20, args=lambda tmp_path: [data_file(tmp_path)], sleep_ms=60,
    after=check_file)

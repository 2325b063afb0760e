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
import pytest

from split_common import data_file, program_fixture, run_on
from test_ckpt import cycled

ITERS = 20
SLEEP_MS = 60
CHECKS = 11   # fileio.c's per rank and iteration

fileio = program_fixture("fileio")


@pytest.mark.parametrize("abi", ["openmpi", "mpich"])
@pytest.mark.parametrize("lower", [None, "openmpi", "mpich"])
def test_runs(fileio, abi, lower, tmp_path):
    """Natively (lower None), and above either lower half without a
    checkpoint (a program of one ABI above the other MPI included)."""
    r = run_on(fileio[abi], lower, 2, ["3", "10", data_file(tmp_path)], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"PASS ranks=2 iterations=3 checks={2 * 3 * CHECKS}\n" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("lower,other", [("openmpi", None), ("mpich", None),
                                         ("openmpi", "mpich"), ("mpich", "openmpi")])
def test_three_cycles(fileio, lower, other, tmp_path):
    """Three checkpoint, SIGKILL and restart cycles on lower, or one whose
    restart is above the other MPI."""
    rc, out, err = cycled(tmp_path, lower, 2, fileio[lower], ITERS, SLEEP_MS, data_file(tmp_path),
                          other=other)
    assert rc == 0, out + err
    assert f"PASS ranks=2 iterations={ITERS} checks={2 * ITERS * CHECKS}\n" in out, out + err
    assert "FAIL" not in out
    assert "not supported" not in err, err

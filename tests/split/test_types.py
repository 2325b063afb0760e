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
import pytest

from split_common import program_fixture, run_on
from test_ckpt import cycled

ITERS = 20
SLEEP_MS = 100
CHECKS = 73   # types.c's per rank and iteration

types = program_fixture("types")


@pytest.mark.parametrize("abi", ["openmpi", "mpich"])
@pytest.mark.parametrize("lower", [None, "openmpi", "mpich"])
def test_runs(types, abi, lower, tmp_path):
    """Natively (lower None), and above either lower half without a
    checkpoint (a program of one ABI above the other MPI included)."""
    r = run_on(types[abi], lower, 2, ["3", "10"], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"PASS ranks=2 iterations=3 checks={2 * 3 * CHECKS}\n" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("lower,other", [("openmpi", None), ("mpich", None),
                                         ("openmpi", "mpich"), ("mpich", "openmpi")])
def test_three_cycles(types, lower, other, tmp_path):
    """Three checkpoint, SIGKILL and restart cycles on lower, or one whose
    restart is above the other MPI."""
    rc, out, err = cycled(tmp_path, lower, 2, types[lower], ITERS, SLEEP_MS, other=other)
    assert rc == 0, out + err
    assert f"PASS ranks=2 iterations={ITERS} checks={2 * ITERS * CHECKS}\n" in out, out + err
    assert "FAIL" not in out
    assert "not supported" not in err, err

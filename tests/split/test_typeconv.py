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
import pytest

from split_common import launcher, program_fixture, run_on
from test_ckpt import cycled

ITERS = 24
SLEEP_MS = 100

typeconv = program_fixture("typeconv")


def checks(n, iters):
    """What typeconv.c counts: per rank and iteration 2 on conversions, 2 per
    datatype (received, size and extent), 6 on the rest."""
    return n * iters * (2 + 2 * 8 + 6)


@pytest.mark.parametrize("abi", ["openmpi", "mpich"])
@pytest.mark.parametrize("lower", [None, "openmpi", "mpich"])
def test_runs(typeconv, abi, lower, tmp_path):
    """Natively (lower None), and above either lower half without a
    checkpoint (a program of one ABI above the other MPI included)."""
    r = run_on(typeconv[abi], lower, 2, ["3", "10"], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"PASS ranks=2 iterations=3 checks={checks(2, 3)}\n" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("lower,other", [("openmpi", None), ("mpich", None),
                                         ("openmpi", "mpich"), ("mpich", "openmpi")])
def test_three_cycles(typeconv, lower, other, tmp_path):
    """Three checkpoint, SIGKILL and restart cycles on lower, or one whose
    restart is above the other MPI."""
    rc, out, err = cycled(tmp_path, lower, 2, typeconv[lower], ITERS, SLEEP_MS, other=other)
    assert rc == 0, out + err
    assert f"PASS ranks=2 iterations={ITERS} checks={checks(2, ITERS)}\n" in out, out + err
    assert "FAIL" not in out
    assert "not supported" not in err, err

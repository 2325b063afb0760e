"""Error classes, codes and strings the program adds, across restarts
(docs/split.md, "Errors"): errclass.c adds a class, two codes and two
strings before its loop and checks MPI_Error_class, MPI_Error_string,
MPI_LASTUSEDCODE and MPI_Comm_call_errhandler with them every iteration.
They live in the upper half, so a restart keeps them, above either MPI.

Environment: STASIS_BIN, STASIS_BUILD."""
import pytest

from split_common import program_fixture, run_on
from test_ckpt import cycled

ITERS = 20
SLEEP_MS = 100
CHECKS = 8   # errclass.c's per rank and iteration

errclass = program_fixture("errclass")


@pytest.mark.parametrize("abi", ["openmpi", "mpich"])
@pytest.mark.parametrize("lower", [None, "openmpi", "mpich"])
def test_runs(errclass, abi, lower, tmp_path):
    """Natively (lower None), and above either lower half without a
    checkpoint (a program of one ABI above the other MPI included)."""
    r = run_on(errclass[abi], lower, 2, ["3", "10"], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"PASS ranks=2 iterations=3 checks={2 * 3 * CHECKS}\n" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("lower,other", [("openmpi", None), ("mpich", None),
                                         ("openmpi", "mpich"), ("mpich", "openmpi")])
def test_three_cycles(errclass, lower, other, tmp_path):
    """Three checkpoint, SIGKILL and restart cycles on lower, or one whose
    restart is above the other MPI."""
    rc, out, err = cycled(tmp_path, lower, 2, errclass[lower], ITERS, SLEEP_MS, other=other)
    assert rc == 0, out + err
    assert f"PASS ranks=2 iterations={ITERS} checks={2 * ITERS * CHECKS}\n" in out, out + err
    assert "FAIL" not in out

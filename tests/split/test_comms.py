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
import pytest

from split_common import program_fixture, run_on
from test_ckpt import cycled

ITERS = 20
SLEEP_MS = 100

comms = program_fixture("comms")


def checks(n, iters):
    """What comms.c counts: 15 per rank and iteration, one more on each
    even rank."""
    return n * iters * 15 + n // 2 * iters


@pytest.mark.parametrize("abi", ["openmpi", "mpich"])
@pytest.mark.parametrize("lower", [None, "openmpi", "mpich"])
def test_runs(comms, abi, lower, tmp_path):
    """Natively (lower None), and above either lower half without a
    checkpoint (a program of one ABI above the other MPI included)."""
    r = run_on(comms[abi], lower, 4, ["2", "10"], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"PASS ranks=4 iterations=2 checks={checks(4, 2)}\n" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("lower,other", [("openmpi", None), ("mpich", None),
                                         ("openmpi", "mpich"), ("mpich", "openmpi")])
def test_three_cycles(comms, lower, other, tmp_path):
    """Three checkpoint, SIGKILL and restart cycles on lower, or one whose
    restart is above the other MPI."""
    rc, out, err = cycled(tmp_path, lower, 2, comms[lower], ITERS, SLEEP_MS, other=other)
    assert rc == 0, out + err
    assert f"PASS ranks=2 iterations={ITERS} checks={checks(2, ITERS)}\n" in out, out + err
    assert "FAIL" not in out
    assert "not supported" not in err, err

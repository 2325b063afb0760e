"""Persistent requests (docs/split.md, "Messages in flight"): persist.c
starts MPI_Send_init, MPI_Ssend_init, MPI_Rsend_init and MPI_Recv_init
requests around a ring every iteration, with sleeps while they are active
(a receive active before its message is even sent among them, and one
started after an MPI_Irecv of the same envelope, which must match first
after a restart too), and checks every message, that the requests outlive
their completion, and that inactive ones act as null ones, natively, above
either lower half, through three checkpoint, SIGKILL and restart cycles,
and restarted under the other MPI.

Environment: STASIS_BIN, STASIS_BUILD."""
import pytest

from split_common import program_fixture, run_on
from test_ckpt import cycled
from test_local import ABOVE, ITERS, MATRIX, SLEEP_MS


persist = program_fixture("persist")


def passed(n, iters):
    return f"PASS ranks={n} iterations={iters} checks={8 * n * iters}\n"


@pytest.mark.parametrize("abi,lower", ABOVE)
def test_persistent_requests(persist, abi, lower, tmp_path):
    """Natively (lower None) and above a lower half, without a checkpoint."""
    r = run_on(persist[abi], lower, 3, ["3", "10"], tmp_path)
    assert r.returncode == 0 and passed(3, 3) in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("lower,n", MATRIX)
def test_persistent_requests_three_cycles(persist, lower, n, tmp_path):
    rc, out, err = cycled(tmp_path, lower, n, persist[lower], ITERS, SLEEP_MS)
    assert rc == 0 and passed(n, ITERS) in out and "FAIL" not in out, out + err


def test_persistent_requests_restart_under_the_other_mpi(persist, tmp_path):
    rc, out, err = cycled(tmp_path, "mpich", 2, persist["mpich"], ITERS, SLEEP_MS, other="openmpi")
    assert rc == 0 and passed(2, ITERS) in out, out + err

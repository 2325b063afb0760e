"""Buffered sends across restarts (docs/split.md, "Messages in flight"):
bsend.c attaches a buffer and makes a persistent buffered send before its
loop; every iteration sends its right neighbour 8 ints and 40000 ints with
MPI_Bsend, 5 with MPI_Ibsend and 3 with the persistent one, overwrites the
send buffers at once, and sleeps with all of them in flight; the neighbour
receives and checks them in the next iteration. The lower half sends a
copy of each as a counted standard send, which the drain completes, so a
checkpoint in the sleep loses none of them, above either MPI.

Environment: STASIS_BIN, STASIS_BUILD."""
import pytest

from split_common import program_fixture, run_on
from test_ckpt import cycled

ITERS = 20
SLEEP_MS = 100

bsend = program_fixture("bsend")


def checks(n, iters):
    """bsend.c's: 5 per rank and iteration received, 1 per rank at the end."""
    return n * (iters * 5 + 1)


@pytest.mark.parametrize("abi", ["openmpi", "mpich"])
@pytest.mark.parametrize("lower", [None, "openmpi", "mpich"])
def test_runs(bsend, abi, lower, tmp_path):
    """Natively (lower None), and above either lower half without a
    checkpoint (a program of one ABI above the other MPI included)."""
    r = run_on(bsend[abi], lower, 2, ["3", "10"], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"PASS ranks=2 iterations=3 checks={checks(2, 3)}\n" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("lower,other", [("openmpi", None), ("mpich", None),
                                         ("openmpi", "mpich"), ("mpich", "openmpi")])
def test_three_cycles(bsend, lower, other, tmp_path):
    """Three checkpoint, SIGKILL and restart cycles on lower, or one whose
    restart is above the other MPI."""
    rc, out, err = cycled(tmp_path, lower, 2, bsend[lower], ITERS, SLEEP_MS, other=other)
    assert rc == 0, out + err
    assert f"PASS ranks=2 iterations={ITERS} checks={checks(2, ITERS)}\n" in out, out + err
    assert "FAIL" not in out
    assert "not supported" not in err, err

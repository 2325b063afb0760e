"""The calls that need no other rank (docs/split.md, "The function list"):
local.c makes indexed-block and hindexed-block types (the latter from
MPI_Get_address), packs and unpacks, makes and compares groups, translates
ranks, asks MPI_Op_commutative and runs MPI_Reduce_local with its own
operation, reads, sets, dups and deletes info pairs (an MPI_Info made before
the loop keeps them across restarts), every iteration, natively, above
either lower half and through three checkpoint, SIGKILL and restart cycles,
and restarted under the other MPI. The program checks every result.

Environment: STASIS_BIN, STASIS_BUILD."""
import pytest

from split_common import program_fixture, run_on
from test_ckpt import cycled

ITERS = 20         # test_ckpt.ITERS
SLEEP_MS = 100
# three cycles on 2 ranks of either MPI and on 4 of Open MPI: what these
# calls do does not depend on the ranks, and MPICH's 4 busy-polling ranks
# on 2 cores are the slowest case (test_ckpt.py and test_restart_p2p.py
# take 4 of each)
MATRIX = [("openmpi", 2), ("openmpi", 4), ("mpich", 2)]
# natively and above the other ABI's lower half: above its own, each
# program runs in its three-cycle test
ABOVE = [("openmpi", None), ("mpich", None), ("openmpi", "mpich"), ("mpich", "openmpi")]


local = program_fixture("local")


def passed(n, iters):
    return f"PASS ranks={n} iterations={iters} checks={10 * n * iters}\n"


@pytest.mark.parametrize("abi,lower", ABOVE)
def test_local_calls(local, abi, lower, tmp_path):
    """Natively (lower None) and above a lower half, without a checkpoint."""
    r = run_on(local[abi], lower, 3, ["3", "5"], tmp_path)
    assert r.returncode == 0 and passed(3, 3) in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("lower,n", MATRIX)
def test_local_three_cycles(local, lower, n, tmp_path):
    rc, out, err = cycled(tmp_path, lower, n, local[lower], ITERS, SLEEP_MS)
    assert rc == 0 and passed(n, ITERS) in out and "FAIL" not in out, out + err


def test_local_restart_under_the_other_mpi(local, tmp_path):
    rc, out, err = cycled(tmp_path, "openmpi", 2, local["openmpi"], ITERS, SLEEP_MS, other="mpich")
    assert rc == 0 and passed(2, ITERS) in out, out + err

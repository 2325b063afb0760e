"""Graph and distributed graph topologies, the neighbourhood collectives and
MPI_Alltoallw across restarts (docs/split.md, "Objects across a restart"):
topo.c makes a weighted MPI_Dist_graph_create_adjacent communicator, an
MPI_Dist_graph_create one (reorder allowed), an MPI_Graph_create ring, a
Cartesian line and a vector type before its loop; every iteration checks
each topology's queries and runs every neighbourhood collective, blocking
and not, v and w, and MPI_Alltoallw/MPI_Ialltoallw, checking every element.
A restart builds each topology again from what was recorded (the members as
world ranks; the graph's index and edges; this rank's neighbours and
weights in MPI_Dist_graph_neighbors' order), so the collectives after it
find the same neighbours in the same order, above either MPI.

Environment: STASIS_BIN, STASIS_BUILD."""
import pytest

from split_common import program_fixture, run_on
from test_ckpt import cycled

ITERS = 20
SLEEP_MS = 100
CHECKS = 16   # topo.c's per rank and iteration

topo = program_fixture("topo")


@pytest.mark.parametrize("abi", ["openmpi", "mpich"])
@pytest.mark.parametrize("lower", [None, "openmpi", "mpich"])
def test_runs(topo, abi, lower, tmp_path):
    """Natively (lower None), and above either lower half without a
    checkpoint (a program of one ABI above the other MPI included)."""
    r = run_on(topo[abi], lower, 3, ["2", "10"], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"PASS ranks=3 iterations=2 checks={3 * 2 * CHECKS}\n" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("lower,other", [("openmpi", None), ("mpich", None),
                                         ("openmpi", "mpich"), ("mpich", "openmpi")])
def test_three_cycles(topo, lower, other, tmp_path):
    """Three checkpoint, SIGKILL and restart cycles on lower, or one whose
    restart is above the other MPI."""
    rc, out, err = cycled(tmp_path, lower, 2, topo[lower], ITERS, SLEEP_MS, other=other)
    assert rc == 0, out + err
    assert f"PASS ranks=2 iterations={ITERS} checks={2 * ITERS * CHECKS}\n" in out, out + err
    assert "FAIL" not in out
    assert "not supported" not in err, err

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

from program_tests import program_tests
from split_common import run_on

# bsend.c's checks per rank (n) and iterations (i)
prog, test_runs, test_three_cycles = program_tests(
    "bsend", lambda n, i: n * (i * 5 + 1))


@pytest.mark.parametrize("lower", ["openmpi", "mpich"])
def test_finalize_delivers_buffered_sends(prog, lower, tmp_path):
    """bsend.c ends with a buffered send of 40000 ints still attached when
    it calls MPI_Finalize, as MPI allows: the lower half completes and
    frees its copy's request first (MPICH's UCX warned of a request not
    returned when it was left to the real MPI_Finalize)."""
    r = run_on(prog[lower], lower, 2, ["1", "300"], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PASS ranks=2 iterations=1" in r.stdout, r.stdout + r.stderr
    out = r.stdout + r.stderr   # UCX writes its warnings on stdout
    assert "not returned" not in out and "WARN" not in out, out

"""Ranks stopped inside blocking MPI_Recv and MPI_Sendrecv (docs/split.md,
"Waiting never blocks a checkpoint"): those calls keep their real requests
to themselves until a checkpoint catches them, then enter them in the
ledger; after a kill and a restart on a fresh MPI the calls complete with
the right data and statuses (tests/split/blocking.c).

Environment: STASIS_BIN, STASIS_BUILD."""
import pytest

from split_common import launcher, program_fixture
from test_ckpt import MpiJob, cycles

ITERS = 12
SLEEP_MS = 400


blocking = program_fixture("blocking")


@pytest.mark.parametrize("lower,n", [("openmpi", 3), ("mpich", 3)])
def test_checkpoint_inside_blocking_calls(blocking, lower, n, tmp_path):
    job = MpiJob(tmp_path)
    job.start(*launcher(lower, n), blocking[lower], ITERS, SLEEP_MS)
    cycles(job)
    rc, out, err = job.finish_job()
    assert rc == 0, out + err
    assert f"PASS ranks={n} iterations={ITERS}" in out, out + err
    assert "FAIL" not in out

"""A checkpoint requested while the ranks are still starting (their ld.so,
their constructors, main before MPI_Init) waits until each rank's MPI_Init:
startup.c holds a descriptor across a 2 s sleep in a constructor, and a
restart from a checkpoint taken there would find it gone (seen as EBADF
reading /proc/self/maps in Stasis's own constructor, and a crash at exit,
in about one run in four of test_local). The restarted job must pass.

Environment: STASIS_BIN, STASIS_BUILD."""
import pytest

from split_common import launcher, program_fixture
from test_ckpt import MpiJob

ITERS = 20


startup = program_fixture("startup")


@pytest.mark.parametrize("lower", ["openmpi", "mpich"])
def test_checkpoint_during_startup_waits_for_mpi_init(startup, lower, tmp_path):
    job = MpiJob(tmp_path)
    job.start(*launcher(lower, 2), startup[lower], ITERS, 100)
    job.lines_until(r"starting")
    job.checkpoint_kill_restart()
    rc, out, err = job.finish_job()
    assert rc == 0 and f"PASS ranks=2 iterations={ITERS}" in out and "FAIL" not in out, out + err

"""The release rule (docs/protocol.md, "Release rule"): a checkpoint that
holds a rank at a collective's entry while a rank behind its targets waits
for a message that the held rank sends only after that collective. Without
a release nothing moves and the checkpoint fails after 30 s; with it every
checkpoint completes, and after a kill and a restart on a fresh MPI the
program goes on with the right values (tests/split/release.c).

Environment: STASIS_BIN, STASIS_BUILD."""
import pytest

from split_common import build_program, launcher
from test_ckpt import MpiJob, cycles

ITERS = 10
SLEEP_MS = 500


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    return build_program(tmp_path_factory, "release")


@pytest.mark.parametrize("lower", ["openmpi", "mpich"])
def test_release_unblocks_the_checkpoint(release, lower, tmp_path):
    job = MpiJob(tmp_path)
    job.start(*launcher(lower, 3), release[lower], ITERS, SLEEP_MS)
    cycles(job)
    rc, out, err = job.finish_job()
    assert rc == 0, out + err
    assert f"PASS ranks=3 iterations={ITERS}" in out, out + err
    assert "FAIL" not in out

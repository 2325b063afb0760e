"""The release rule (docs/protocol.md, "Release rule"): a checkpoint that
holds a rank at a collective's entry while a rank behind its targets waits
for a message that the held rank sends only after that collective. Without
a release nothing moves and the checkpoint fails after 30 s; with it every
checkpoint completes, and after a kill and a restart on a fresh MPI the
program goes on with the right values (tests/split/release.c).

Environment: STASIS_BIN, STASIS_BUILD."""
import pytest

from split_common import data_file, launcher, program_fixture
from test_ckpt import MpiJob, cycles

ITERS = 10
SLEEP_MS = 500


release = program_fixture("release")


@pytest.mark.parametrize("lower", ["openmpi", "mpich"])
def test_release_unblocks_the_checkpoint(release, lower, tmp_path):
    job = MpiJob(tmp_path)
    job.start(*launcher(lower, 3), release[lower], ITERS, SLEEP_MS)
    cycles(job)
    rc, out, err = job.finish_job()
    assert rc == 0, out + err
    assert f"PASS ranks=3 iterations={ITERS}" in out, out + err
    assert "FAIL" not in out


release_fin = program_fixture("release_fin")


@pytest.mark.parametrize("lower", ["openmpi", "mpich"])
def test_released_rank_stops_at_finalize(release_fin, lower, tmp_path):
    """A rank that a release lets run reaches MPI_Finalize while the others
    are stopped: it stops at its entry, the checkpoint completes, and the
    restarted job finalizes with the value rank 1 received."""
    job = MpiJob(tmp_path)
    job.start(*launcher(lower, 3), release_fin[lower], 3000)
    job.lines_until(r"rank 0 ready")
    job.checkpoint_kill_restart()
    rc, out, err = job.finish_job()
    assert rc == 0, out + err
    for r, v in ((0, 4242), (1, 4242), (2, 0)):
        assert f"rank {r} done {v}" in out, out + err


blocking_coll = program_fixture("blocking_coll")
# blocking_coll.c's ranks after rank 0 all do the same: 3 ranks above Open
# MPI hold 2 of them where 2 ranks hold one, the same path; MPICH's lower
# half with 2
BLOCKING = [("mpich", 2), ("openmpi", 3)]


@pytest.mark.parametrize("lower,n", BLOCKING)
def test_blocking_collective_goes_together(blocking_coll, lower, n, tmp_path):
    """Ranks behind rank 0 on a communicator must first pass an
    MPI_Comm_dup of WORLD, which has no non-blocking form: they are held at
    its entry until rank 0 comes to it too, then all start it together;
    every checkpoint completes and the restarted job goes on right."""
    job = MpiJob(tmp_path)
    job.start(*launcher(lower, n), blocking_coll[lower], 12, 300)
    cycles(job)
    rc, out, err = job.finish_job()
    assert rc == 0, out + err
    assert f"PASS ranks={n} iterations=12" in out, out + err
    assert "FAIL" not in out


@pytest.mark.parametrize("lower,n", BLOCKING)
def test_checkpoint_while_ranks_wait_in_a_blocking_collective(blocking_coll, lower, n, tmp_path):
    """The other ranks wait in MPI_Comm_dup for rank 0, which sleeps before
    it, when the checkpoint comes: they wait in its entry barrier, which
    parks, never inside the real call (there the checkpoint failed after
    10 s: 'thread(s) of the program did not stop'); every checkpoint
    completes and the restarted job goes on right."""
    job = MpiJob(tmp_path)
    job.start(*launcher(lower, n), blocking_coll[lower], 12, 300, "inside")
    cycles(job)
    rc, out, err = job.finish_job()
    assert rc == 0, out + err
    assert f"PASS ranks={n} iterations=12" in out, out + err
    assert "FAIL" not in out


@pytest.mark.parametrize("mode", ["behind", "inside"])
@pytest.mark.parametrize("lower,n", BLOCKING)
def test_blocking_collective_on_a_file(blocking_coll, lower, n, mode, tmp_path):
    """The same with MPI_File_write_at_all: the file's own communicator
    (docs/split.md, "Files") carries its entry barrier. behind: ranks behind
    rank 0 on a communicator must pass the collective write first (before,
    the checkpoint failed after 30 s); inside: they wait in it when the
    checkpoint comes (before, it failed after 10 s). Every value written
    before and after the restarts is in the file."""
    job = MpiJob(tmp_path)
    job.start(*launcher(lower, n), blocking_coll[lower], 12, 300, mode, data_file(tmp_path))
    cycles(job)
    rc, out, err = job.finish_job()
    assert rc == 0, out + err
    assert f"PASS ranks={n} iterations=12" in out, out + err
    assert "FAIL" not in out

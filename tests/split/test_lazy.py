"""Lazy restore (docs/split.md, "Lazy restore"): a restarted rank runs
before its large runs of pages are in, and the pages it touches are read
first. lazy.c changes its mappings at once after each restart, while most
of its image is still to come -- madvise(MADV_DONTNEED) and munmap of holes
(zeros, never the image's words), mremap of a region (its words at the new
address), a fork (the child's copy served too) -- and checks every word,
through three checkpoint, SIGKILL and restart cycles on both MPIs; a
checkpoint taken by MPIX_Checkpoint during the lazy restore holds every
page; STASIS_RESTORE_LAZY=0 reads the whole image before the rank runs.

Environment: STASIS_BIN, STASIS_BUILD."""
import re

import pytest

from split_common import launcher, program_fixture
from test_ckpt import MpiJob, iteration

# An iteration is 20 sleeps of SLEEP_MS (lazy.c): 0.1 s. The cycles take
# the first few (test_ckpt.ITERS); each restart's lazy fill ends within
# the restart's first iteration (the rank checks every word at once); the
# rest is margin.
ITERS = 50
SLEEP_MS = 5
DONE = r"rank \d: lazy restore done, (\d+) MiB in \S+ s, (\d+) touched pages served first"


lazy = program_fixture("lazy")


def restarted(job, k):
    """Wait for both ranks' "restarted K": until then a rank may still be
    in lazy.c's restarted(), with its forked child alive or its restart
    count not yet raised, which a checkpoint there would not keep (a child
    is not checkpointed: waitpid found none after the restart)."""
    seen = set()
    while len(seen) < 2:
        seen.add(job.lines_until(rf"rank [01] restarted {k}").split()[1])


def cycles(job, n=3):
    """test_ckpt.cycles, each checkpoint taken only once both ranks are
    out of restarted()."""
    for k in range(1, n + 1):
        before = iteration(job.lines_until(r"rank 0 iteration \d+"))
        name = job.checkpoint_kill_restart()
        restarted(job, k)
        after = iteration(job.lines_until(r"rank 0 iteration \d+"))
        assert after >= before, (name, before, after)


def job_of(tmp_path, lower, prog, *args, **env):
    job = MpiJob(tmp_path)
    job.env.update(STASIS_LOG="info", **env)
    job.start(*launcher(lower, 2), prog, ITERS, SLEEP_MS, *args)
    return job


@pytest.mark.parametrize("lower", ["openmpi", "mpich"])
def test_lazy_restore_while_the_program_changes_its_mappings(lazy, lower, tmp_path):
    job = job_of(tmp_path, lower, lazy[lower])
    cycles(job)
    rc, out, err = job.finish_job()
    assert rc == 0 and f"PASS ranks=2 iterations={ITERS} restarts=3" in out, out + err
    assert "FAIL" not in out
    assert out.count("restarted 3") == 2, out   # the output since the last restart
    # the last restart's two ranks read their 120 MiB lazily
    done = re.findall(DONE, err)
    assert len(done) == 2 and all(int(mib) >= 120 for mib, _ in done), err


@pytest.mark.parametrize("lower", ["openmpi", "mpich"])
def test_mpix_checkpoint_during_the_lazy_restore(lazy, lower, tmp_path):
    """A checkpoint the program takes right after a restart waits for the
    pages still to come: a restart from it has every word."""
    job = job_of(tmp_path, lower, lazy[lower], "mpix")
    job.lines_until(r"rank 0 iteration 2")
    job.checkpoint_kill_restart()
    job.lines_until(r"rank 0 restarted 1")
    job.lines_until(r"rank 0 iteration \d+")   # MPIX_Checkpoint returned on every rank
    job.kill()
    job.restart()
    rc, out, err = job.finish_job()
    assert rc == 0 and "PASS ranks=2" in out and "FAIL" not in out, out + err
    assert "rank 0 mpix restart ok" in out and "rank 1 mpix restart ok" in out, out


def test_lazy_restore_off(lazy, tmp_path):
    job = job_of(tmp_path, "openmpi", lazy["openmpi"], STASIS_RESTORE_LAZY="0")
    cycles(job, n=1)
    rc, out, err = job.finish_job()
    assert rc == 0 and f"PASS ranks=2 iterations={ITERS} restarts=1" in out, out + err
    assert "lazy restore done" not in err, err

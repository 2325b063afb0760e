"""A rank whose program has a child process: the split process does not
checkpoint process trees, so a checkpoint is refused in one line naming
the rank and the child, and the job runs on to its native end (before, the
checkpoint was taken without the child and a restarted rank waited for a
process that was gone). About 3 s.

Environment: STASIS_BIN, STASIS_BUILD."""
import re

from split_common import launcher, program_fixture, run_on
from test_ckpt import MpiJob

child = program_fixture("child")


def test_a_rank_with_a_child_refuses_the_checkpoint(child, tmp_path):
    prog = child["openmpi"]
    native = run_on(prog, None, 2, ["30", "0"], tmp_path)
    assert native.returncode == 0 and "rank 1 child status 7\n" in native.stdout, \
        native.stdout + native.stderr
    job = MpiJob(tmp_path)
    job.start(*launcher("openmpi", 2), prog, "30", "100")
    pid = job.lines_until(r"rank 1 child pid \d+").split()[-1]
    if not any(re.match(r"rank 0 iteration [2-9]", line) for line in job.seen):
        job.lines_until(r"rank 0 iteration 2")
    r = job.stasis("checkpoint", "--dir", job.ck, check=False)
    assert r.returncode != 0, r.stdout
    assert r.stderr == (f"stasis: checkpoint: checkpoint failed: rank 1: the program has a child "
                        f"process (pid {pid}): the split process does not checkpoint process "
                        f"trees\n"), r.stderr
    rc, out, err = job.finish_job()
    assert rc == 0 and "rank 1 child status 7\n" in out, out + err
    assert "rank 0 iteration 29\n" in out, out

"""An MPI job whose ranks are started through a shell wrapper (issue 24):
`mpirun -np 2 ./wrapper.sh ./app`, the way site wrappers, version-manager
shims and module scripts start programs. The wrapper runs helpers, sets
the environment and `exec`s the program; the rank goes above its lower
half after the exec (docs/split.md, "Launch"). The job is checkpointed,
killed with SIGKILL and restarted through the same wrapper, and its output
must be that of an uninterrupted run.

Environment: STASIS_BIN, STASIS_BUILD. About 4 s per MPI."""
import re
import subprocess

import pytest

from split_common import ENV, TIMEOUT, launcher, program_fixture
from test_ckpt import MpiJob, iteration

hello = program_fixture("hello")
ITERS = 16
SLEEP_MS = 100

WRAPPER = """#!/bin/sh
# a site's wrapper: helpers forked, the environment set, then the program
APP_DIR=$(dirname "$1")
NCPU=$(nproc)
export APP_DIR NCPU
exec "$@"
"""


def lines(out):
    """The program's lines, without their order between ranks (each rank's
    lines stay distinct: "rank R iteration I")."""
    return sorted(set(ln for ln in out.splitlines() if re.match(r"(rank \d+ iteration|PASS|FAIL)", ln)))


@pytest.mark.parametrize("lower", ["openmpi", "mpich"])
def test_ranks_started_through_a_shell_wrapper(hello, lower, tmp_path):
    wrapper = tmp_path / "wrapper.sh"
    wrapper.write_text(WRAPPER)
    wrapper.chmod(0o755)
    # the uninterrupted run: natively, through the same wrapper, without the
    # sleeps (the output does not depend on them)
    native = subprocess.run(launcher(lower, 2) + [str(wrapper), hello[lower], str(ITERS), "0"],
                            cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=TIMEOUT)
    assert native.returncode == 0 and f"PASS ranks=2 iterations={ITERS}" in native.stdout, \
        native.stdout + native.stderr
    job = MpiJob(tmp_path)
    job.start(*launcher(lower, 2), str(wrapper), hello[lower], ITERS, SLEEP_MS)
    before = iteration(job.lines_until(r"rank 0 iteration [2-9]"))
    job.checkpoint()
    seen = list(job.seen)
    out, _ = job.kill()
    job.restart()
    after = iteration(job.lines_until(r"rank 0 iteration \d+"))
    assert after >= before, (before, after)   # from the checkpoint, not from scratch
    rc, rest, err = job.finish_job()
    assert rc == 0, rest + err
    assert lines("".join(seen) + out + rest) == lines(native.stdout)

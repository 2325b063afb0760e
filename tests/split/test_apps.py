"""Real MPI applications from Debian's packages under the split process
(issue 20): each is checkpointed twice mid-run, killed and restarted (the
second time under the other MPI where it says so), and must end with the
output of an uninterrupted run, numbers compared where the application
prints timings.

Environment: STASIS_BIN, STASIS_BUILD."""
import re
import shutil
import subprocess
import time

import pytest

from split_common import ENV, TIMEOUT, launcher
from test_ckpt import MpiJob

HPCC = shutil.which("hpcc")
# what depends on the clock: every time, rate, bandwidth and latency, and
# the updates MPIRandomAccess executes (it stops at a time bound, so a
# checkpoint inside it leaves fewer: 4510550 of 8388608 in one CI run)
TIMED = re.compile(r"(time|Time|flops|GBs|GUPs|Gflops|STREAM_(Copy|Scale|Add|Triad)|usec|GBytes|"
                   r"Wtick|ExeUpdates)")


def hpcc_input(d):
    """HPCC's example input with a 1 x 2 grid and N = 2000: about 3 s on 2
    ranks here, every section of the benchmark run."""
    text = open("/usr/share/doc/hpcc/examples/_hpccinf.txt").read()
    text = re.sub(r"(?m)^1000 +Ns", "2000         Ns", text)
    text = re.sub(r"(?m)^2 +Ps", "1            Ps", text)
    (d / "hpccinf.txt").write_text(text)


def summary(d):
    """The summary section of hpccoutf.txt, without what the clock decides,
    and the names of the sections in order."""
    out = (d / "hpccoutf.txt").read_text()
    body = out.split("Begin of Summary section.")[1].split("End of Summary section.")[0]
    keys = [ln for ln in body.strip().splitlines() if not TIMED.search(ln.split("=")[0])]
    return keys, re.findall(r"Begin of (\S+) section", out)


def sections(d):
    p = d / "hpccoutf.txt"
    return p.read_text().count("Begin of") if p.exists() else 0


def wait_sections(job, d, more_than, timeout=120):
    end = time.time() + timeout
    while time.time() < end and sections(d) <= more_than:
        if job.proc.poll() is not None:
            raise AssertionError("hpcc ended before its checkpoint: %s %s" % job.communicate(10))
        time.sleep(0.05)
    return sections(d)


@pytest.mark.skipif(not HPCC, reason="Debian's hpcc is not installed (scripts/deps.sh installs it)")
def test_hpcc_checkpointed_twice_restarted_under_mpich(tmp_path):
    native = tmp_path / "native"
    native.mkdir()
    hpcc_input(native)
    r = subprocess.run(launcher("openmpi", 2) + [HPCC], cwd=native, env=ENV, capture_output=True,
                       text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stdout + r.stderr
    want = summary(native)
    assert "Success=1" in want[0] and len(want[1]) > 10, want

    job = MpiJob(tmp_path)
    hpcc_input(job.work)
    job.start(*launcher("openmpi", 2), HPCC)
    seen = wait_sections(job, job.work, 0)
    job.checkpoint_kill_restart()
    seen = wait_sections(job, job.work, seen)   # it went on after the restart
    job.checkpoint_kill_restart("--launcher", " ".join(launcher("mpich", 2)))
    rc, out, err = job.finish_job()
    assert rc == 0, out + err
    assert summary(job.work) == want

"""Automatic recovery on one host (docs/coordinator.md, "Events and recovery
policies"): `stasis run --recover auto` of an MPI job whose rank 1 is
SIGKILLed after a checkpoint stops the job, relaunches it from that
checkpoint (with staging, each rank from its node-local copy) and ends
with the program's status and its own output; `--max-restarts 0` gives up
in one line with the failure status; `--recover none` ends as before.
The cluster's cases (a node lost, spares) are tests/cluster/test_recover.py.
About 35 s.

Environment: STASIS_BIN, STASIS_BUILD."""
import os
import re
import signal
import time

import pytest

from split_common import launcher, program_fixture
from test_ckpt import MpiJob

ITERS = 30
SLEEP_MS = 100

p2p = program_fixture("p2p")


@pytest.fixture
def job(tmp_path):
    j = MpiJob(tmp_path)
    yield j
    j.kill()


def rank_pid(job, rank):
    """rank's pid from STATUS (ranks=<rank>:<pid>@<host>,...), once every rank
    registered"""
    end = time.time() + 30
    while time.time() < end:
        st = job.stasis("status", "--dir", job.ck).stdout
        found = re.findall(rf"(?:=|,){rank}:(\d+)@", st)
        if found:
            return int(found[-1])
        time.sleep(0.2)
    raise AssertionError(f"rank {rank} never registered: {st}")


def checkpoint_then_kill_rank_1(job):
    job.lines_until(r"rank 0 iteration 3")
    name = job.checkpoint()
    job.lines_until(r"rank 0 iteration 5")
    victim = rank_pid(job, 1)
    os.kill(victim, signal.SIGKILL)
    return name, victim


@pytest.mark.parametrize("lower", ["openmpi", "mpich"])
def test_a_killed_rank_recovers_from_the_local_copies(p2p, job, lower, tmp_path):
    job.env.update(STASIS_LOG="info", STASIS_STAGING="on", STASIS_LOCAL_DIR=str(tmp_path / "local"))
    job.start(*launcher(lower, 2), p2p[lower], ITERS, SLEEP_MS, extra=["--recover", "auto"])
    name, victim = checkpoint_then_kill_rank_1(job)
    rc, out, err = job.finish_job()
    assert rc == 0 and f"PASS ranks=2 iterations={ITERS} messages=" in out, out + err
    lines = [ln for ln in err.splitlines() if ln.startswith("stasis: recovery")]
    assert len(lines) == 1 and re.fullmatch(
        rf"stasis: recovery 1 of 3: rank 1 \(pid {victim} on \S+\) died: its connection to the "
        rf"node agent on \S+ closed without a goodbye \(killed, or crashed\); from {name}; "
        rf"\d+\.\d s", lines[0]), err
    # the relaunched ranks read their node's copies of the checkpoint
    assert len(re.findall(r"reads its node-local copy", err)) == 2, err


def test_max_restarts_reached_gives_up_in_one_line(p2p, job):
    job.start(*launcher("openmpi", 2), p2p["openmpi"], ITERS, SLEEP_MS,
              extra=["--recover", "auto", "--max-restarts", "0"])
    _, victim = checkpoint_then_kill_rank_1(job)
    rc, out, err = job.finish_job()
    assert rc != 0 and "PASS" not in out, out + err
    mine = [ln for ln in err.splitlines() if ln.startswith("stasis:")]
    assert mine == [f"stasis: rank 1 (pid {victim} on {os.uname().nodename}) died: its connection "
                    f"to the node agent on {os.uname().nodename} closed without a goodbye (killed, "
                    f"or crashed); not recovered: --max-restarts 0 reached"], err


def test_recover_none_ends_as_the_launcher_says(p2p, job):
    job.start(*launcher("openmpi", 2), p2p["openmpi"], ITERS, SLEEP_MS,
              extra=["--recover", "none"])
    checkpoint_then_kill_rank_1(job)
    rc, out, err = job.finish_job()
    assert rc != 0 and "PASS" not in out, out + err
    assert "recovery" not in err, err


def test_bad_recovery_options_are_refused_in_one_line(job):
    r = job.stasis("run", "--dir", job.ck, "--recover", "sometimes", "--", "true", check=False)
    assert r.returncode == 2 and r.stderr == "stasis: run: bad --recover 'sometimes' (none or auto)\n"
    r = job.stasis("run", "--dir", job.ck, "--max-restarts", "x", "--", "true", check=False)
    assert r.returncode == 2 and \
        r.stderr == "stasis: run: bad --max-restarts 'x' (a number from 0 to 1000)\n"
    r = job.stasis("run", "--dir", job.ck, "--recover", "auto", "--", "true", check=False)
    assert r.returncode == 1 and r.stderr == (
        "stasis: run: --recover auto relaunches MPI jobs (a launcher such as mpirun or srun), "
        "not a single program\n"), r.stderr

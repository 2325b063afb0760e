"""The upgrades of a checkpoint (partner copy, global copy) commit on their
own: a job takes one checkpoint, then sleeps without calling Stasis, and
meanwhile its partner copies and its global copy appear in the store, the
global index records the level reached, and each rank has a thread at
SCHED_IDLE (the progress thread). Two ranks on two simulated nodes, Open
MPI with mpi4py (sleeper.py)."""
import os
import subprocess
import time

import pytest

from binding_jobs import PYTHON, ROOT, Job, require_library

PACKAGE_DIR = ROOT / "bindings" / "python"
SLEEPER = ROOT / "tests" / "bindings" / "sleeper.py"
LEVEL_PARTNER = 2


def have(module):
    return subprocess.run([PYTHON, "-c", f"import {module}"], capture_output=True,
                          timeout=60).returncode == 0


def wait_for(what, cond, timeout=40):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


def index_records(path):
    """The ops of a store index, in order ("R <len> <crc> <json>" lines)."""
    import json
    ops = []
    for line in path.read_text().splitlines()[1:]:
        parts = line.split(" ", 3)
        if len(parts) == 4 and parts[0] == "R":
            try:
                ops.append(json.loads(parts[3]))
            except ValueError:
                pass
    return ops


def test_upgrade_commits_while_the_job_sleeps(tmp_path):
    if not (have("numpy") and have("mpi4py.MPI")):
        pytest.skip(f"numpy or mpi4py not installed for {PYTHON}")
    lib = require_library("stasis")
    job = Job(tmp_path / "job", [PYTHON, SLEEPER], mpi=True,
              extra_env={"PYTHONPATH": str(PACKAGE_DIR), "STASIS_LIBRARY": str(lib),
                         "STASIS_GLOBAL_FLUSH": "on"})
    flags = tmp_path / "flags"
    flags.mkdir()
    cmd = job.command([LEVEL_PARTNER, flags])
    proc = subprocess.Popen(cmd, cwd=job.root, env=job.env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        ready = [flags / f"ready.{r}" for r in range(2)]
        wait_for("both ranks to checkpoint", lambda: all(p.exists() for p in ready))
        pids = [int(p.read_text()) for p in ready]
        # each rank has a thread at SCHED_IDLE: its progress thread
        for pid in pids:
            policies = [os.sched_getscheduler(int(t)) for t in os.listdir(f"/proc/{pid}/task")]
            assert os.SCHED_IDLE in policies, f"rank pid {pid}: no SCHED_IDLE thread {policies}"
        glob_index = job.root / "global" / "counter" / "index"
        level = wait_for("the LEVEL record", lambda: [r for r in index_records(glob_index)
                                                       if r["op"] == "LEVEL"])
        assert level[0]["name"] == "partner+global" and "reason" not in level[0], level
        ckpt = level[0]["ckpt"]
        annex = {r["name"] for r in index_records(glob_index) if r["op"] == "ANNEX"}
        assert annex == {"rank-00000.img", "rank-00001.img"}, annex
        # rank 0 (nodeA) keeps rank 1's copy and rank 1 (nodeB) rank 0's
        for node, other in (("nodeA", 1), ("nodeB", 0)):
            local = job.root / "local" / node / node / "counter"
            assert (local / ckpt / f"partner-{other:05d}.img").is_file(), node
            ops = [(r["op"], r.get("name")) for r in index_records(local / "index")]
            assert ("ANNEX", f"partner-{other:05d}.img") in ops, ops
        assert proc.poll() is None, "the job ended before it was told to"
    finally:
        (flags / "go").touch()
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            out, err = proc.communicate()
    assert proc.returncode == 0 and "sleeper: done" in out, f"{out}\n{err}"

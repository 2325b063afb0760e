"""Fault walk of transparent checkpoints (DESIGN §8): the n-th pass through
each fault point of the image and store commit path, failing or killing the
coordinator, during a series of checkpoints of a running program. Every
checkpoint either is established or fails with one line while the program
runs on; a restart then brings back the newest established checkpoint (the
program verifies itself), or, if none was established, refuses with one
line. A damaged or partial checkpoint is never picked."""
import os
import re
import signal

import pytest

from proc_harness import ROOT, descendants, job, program  # noqa: F401 (job is a fixture)

POINTS = [p for p in re.findall(r'^FAULT_POINT\(\w+,\s*"([^"]+)"',
                                (ROOT / "src/common/fault_points.h").read_text(), re.M)
          if p.startswith(("image.", "store.")) and p != "store.prune.remove"]


def lines(text):
    return [l for l in text.splitlines() if l.strip()]


@pytest.mark.parametrize("action", ["fail", "kill"])
@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize("point", POINTS)
def test_fault_walk(job, point, n, action):
    job.run(program("heap"), env={"STASIS_FAULT": f"{point}:{n}:{action}"})
    program_pids = descendants(job.proc.pid)
    established = 0
    for _ in range(3):
        r = job.stasis("checkpoint", "--dir", job.ck, check=False)
        if r.returncode == 0:
            established += 1
            continue
        errs = lines(r.stderr)
        assert len(errs) == 1 and errs[0].startswith("stasis: checkpoint: "), r.stderr
        if job.proc.poll() is not None:
            break    # the coordinator was killed at the fault point
    assert action == "kill" or job.proc.poll() is None
    # the program outlives a killed coordinator: end it like a crash would
    for pid in program_pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    job.kill()
    complete = [l for l in job.stasis("ls", "--dir", job.ck).stdout.splitlines()
                if "COMPLETE" in l or "CURRENT" in l]
    if not complete:
        r = job.stasis("restart", "--dir", job.ck, check=False)
        errs = lines(r.stderr)
        assert r.returncode != 0 and len(errs) == 1 and errs[0].startswith("stasis: restart: "), \
            r.stderr
        return
    job.restart()
    rc, out, err = job.finish()
    assert rc == 0 and out.strip() == "PASS", f"{complete}\n{err}"


# Three processes, each holding 12 MiB of random data it made after the fork
# and checks at the end; the parent says PASS when the children did too.
TREE = r"""
import hashlib, os, sys, time
def hold(data, digest):
    while not os.path.exists("stop"):
        time.sleep(0.02)
    return hashlib.sha256(data).digest() == digest
r, w = os.pipe()
kids = []
for i in range(2):
    pid = os.fork()
    if pid == 0:
        os.close(r)
        data = bytearray(os.urandom(12 << 20))
        digest = hashlib.sha256(data).digest()
        os.write(w, b"x")
        os._exit(0 if hold(data, digest) else 1)
    kids.append(pid)
os.close(w)
data = bytearray(os.urandom(12 << 20))
digest = hashlib.sha256(data).digest()
got = 0
while got < 2:
    got += len(os.read(r, 2))
print("READY", flush=True)
ok = hold(data, digest)
ok &= all(os.waitstatus_to_exitcode(os.waitpid(k, 0)[1]) == 0 for k in kids)
print("PASS" if ok else "FAIL")
"""


def test_a_tree_whose_image_fails_mid_stream(job):
    """The processes of a tree dump at once; the 3rd chunk of the job's
    images fails to be written, early in one process's stream. The
    checkpoint fails as a whole with one line, the tree runs on, and the
    next checkpoint is established (the failed process's stream was read to
    its end: its agent was not left blocked mid-stream, its channel stays in
    step); a restart brings that one back. About 4 s."""
    (job.work / "tree.py").write_text(TREE)
    job.run("/usr/bin/python3", "tree.py", env={"STASIS_FAULT": "image.chunk.write:3:fail"})
    r = job.stasis("checkpoint", "--dir", job.ck, check=False)
    errs = lines(r.stderr)
    assert r.returncode != 0 and len(errs) == 1 and errs[0].startswith("stasis: checkpoint: "), \
        r.stderr
    assert job.checkpoint() == "ckpt-000002"
    states = {l.split()[0]: l.split()[1] for l in job.stasis("ls", "--dir", job.ck).stdout.splitlines()
              if l.split()[0].startswith("ckpt-")}
    assert states == {"ckpt-000001": "FAILED", "ckpt-000002": "CURRENT"}, states
    job.kill()
    job.restart()
    rc, out, err = job.finish()
    assert rc == 0 and out.strip() == "PASS", err


def test_a_newer_checkpoint_missing_an_image_is_passed_over(job):
    """A process image recorded in a FILES record (a tree's seal) deleted
    after the checkpoint was established: restart selection must pass that
    checkpoint over, as it does one of FILE records, and bring back the
    older one (tests/cli/test_corruption.py's test_deleted_image for
    `stasis save`). About 2 s."""
    job.run(program("heap"))
    assert job.checkpoint() == "ckpt-000001"
    assert job.checkpoint() == "ckpt-000002"
    job.kill()
    images = sorted(job.ck.glob("*/ckpt-000002/*.img"))
    assert images, sorted(str(p) for p in job.ck.rglob("*"))
    images[0].unlink()
    out = job.stasis("ls", "--dir", job.ck).stdout
    assert re.search(r"ckpt-000001\s+CURRENT", out), out
    job.restart()
    rc, out, err = job.finish()
    assert rc == 0 and out.strip() == "PASS", err

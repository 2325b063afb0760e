"""Checkpoint and restart of whole MPI jobs through the split process
(docs/split.md): `stasis run -- mpirun ...` puts each rank above a lower
half, `stasis checkpoint` saves every rank's upper half, the job is killed
with SIGKILL and `stasis restart` brings it back on a fresh MPI, three
times; the program checks its own memory and results.

Environment: STASIS_BIN, STASIS_BUILD."""
import json
import os
import pathlib
import re
import subprocess
import sys
import time

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "proc"))
from proc_harness import BIN, Job, program  # noqa: E402
from split_common import MPI_ENV, launcher, program_fixture  # noqa: E402

# The three cycles of cycles() take a job's first few iterations (each
# checkpoint comes one or two iterations after the previous restart:
# iterations 0, 2 and 4 under a load of 10 on 2 cores); the rest of the
# run is margin, and time the suite spends waiting for the job's end.
ITERS = 30
SLEEP_MS = 100


hello = program_fixture("hello")


class MpiJob(Job):
    def __init__(self, tmp):
        super().__init__(tmp)
        self.env.update(MPI_ENV)
        self.seen = []
        # hello.c's and p2p.c's last argument: once it exists, their ranks
        # stop sleeping
        self.no_sleep = tmp / "no-sleep"

    def events_over(self):
        """The test's events are over: a job given no_sleep runs to its end
        without its sleeps, restarted or not (its output is the same)."""
        self.no_sleep.touch()

    def lines_until(self, pattern, timeout=90):
        """Read the job's output until a line matches pattern; return it."""
        end = time.time() + timeout
        while time.time() < end:
            line = self.read_line(end - time.time())
            if line is None:
                continue
            if not line:
                break
            self.seen.append(line)
            if re.fullmatch(pattern, line.strip()):
                return line.strip()
        out, err = self.kill() or ("", "")
        raise AssertionError(f"no line like {pattern!r}: {self.seen[-5:]} {out} {err}")

    def start(self, *cmd, extra=()):
        self._start(["run", "--dir", self.ck, *extra, "--", *cmd])

    def restart(self, *args, env=None):
        """`stasis restart` of this job's directory; the output seen so far
        is forgotten."""
        self.seen = []
        self._start(["restart", "--dir", self.ck, *args], env)

    def checkpoint_kill_restart(self, *args, env=None):
        """Checkpoint the job, SIGKILL it, restart it; the checkpoint's name."""
        name = self.checkpoint()
        self.kill()
        self.restart(*args, env=env)
        return name

    def finish_job(self, timeout=180):
        out, err = self.communicate(timeout)
        rc = self.proc.returncode
        self.proc = None
        return rc, "".join(self.seen) + out, err


def iteration(line):
    return int(line.split()[-1])


def cycled(tmp_path, lower, n, prog, *args, other=None):
    """prog on n ranks of lower under `stasis run` through three checkpoint,
    SIGKILL and restart cycles, or, with other, one whose restart is under
    the other MPI's launcher; (rc, stdout, stderr) of the job's end."""
    job = MpiJob(tmp_path)
    job.start(*launcher(lower, n), prog, *args)
    if other:
        cycles(job, n=1, restart_args=["--launcher", " ".join(launcher(other, n))])
    else:
        cycles(job)
    return job.finish_job()


def cycles(job, n=3, restart_args=()):
    """n times: checkpoint once rank 0 made progress, kill the job, restart
    it; the restarted job goes on from where the checkpoint was."""
    for _ in range(n):
        before = iteration(job.lines_until(r"rank 0 iteration \d+"))
        name = job.checkpoint_kill_restart(*restart_args)
        after = iteration(job.lines_until(r"rank 0 iteration \d+"))
        # the checkpoint was taken at or after `before`: no restart from scratch
        assert after >= before, (name, before, after)


# (hello.c sends nothing in its loop: its 4 ranks take the coordinator's
# and the lower half's paths of 2 under MPICH, and Open MPI's 4 those of
# a job of more than one pair; MPICH's 4 busy-polling ranks stay where
# traffic is in flight, test_restart_p2p.py and test_coll.py)
@pytest.mark.parametrize("lower,n", [("openmpi", 2), ("openmpi", 4), ("mpich", 2)])
def test_hello_three_cycles(hello, lower, n, tmp_path):
    job = MpiJob(tmp_path)
    job.start(*launcher(lower, n), hello[lower], ITERS, SLEEP_MS, "-", job.no_sleep)
    cycles(job)
    job.events_over()
    rc, out, err = job.finish_job()
    assert rc == 0, out + err
    assert f"PASS ranks={n} iterations={ITERS} total=" in out, out + err
    assert "FAIL" not in out
    ls = job.stasis("ls", "--dir", job.ck).stdout
    assert len(re.findall(r"ckpt-\d+\s+(CURRENT|COMPLETE)\s+" + str(n + 2) + " ", ls)) == 3, ls


@pytest.mark.parametrize("first,second", [("openmpi", "mpich"), ("mpich", "openmpi")])
def test_restart_under_the_other_mpi(hello, first, second, tmp_path):
    """The upper half does not depend on the MPI below it: a job checkpointed
    above one MPI restarts above the other with --launcher."""
    job = MpiJob(tmp_path)
    job.start(*launcher(first, 2), hello[first], ITERS, SLEEP_MS, "-", job.no_sleep)
    cycles(job, n=1, restart_args=["--launcher", " ".join(launcher(second, 2))])
    job.events_over()
    rc, out, err = job.finish_job()
    assert rc == 0 and f"PASS ranks=2 iterations={ITERS}" in out, out + err


def test_checkpoint_stop_then_restart(hello, tmp_path):
    job = MpiJob(tmp_path)
    job.start(*launcher("openmpi", 2), hello["openmpi"], 40, SLEEP_MS, "-", job.no_sleep)
    job.lines_until(r"rank 0 iteration [3-9]")
    r = job.stasis("checkpoint", "--dir", job.ck, "--stop")
    assert r.stdout.strip().startswith("ckpt-")
    rc, out, err = job.finish_job(timeout=60)
    assert rc == 0, err
    assert "PASS" not in out
    decode_round_trip(job, next(job.ck.glob(f"*/{r.stdout.strip()}/rank-00001.img")),
                      hello["openmpi"], tmp_path)
    job.events_over()
    job.restart()
    rc, out, err = job.finish_job()
    assert rc == 0 and "PASS ranks=2 iterations=40" in out, out + err


def decode_round_trip(job, image, prog, tmp_path):
    """A rank's image holds the process records of any process image and
    a split section (`stasis inspect --decode`, docs/format.md); each
    decoded section encodes back to its bytes as stored."""
    d = json.loads(job.stasis("inspect", "--decode", image).stdout)
    assert d["split"]["rank"] == 1 and d["split"]["size"] == 2, d["split"]
    proc = d["process"]
    assert len(proc["threads"]) == proc["header"]["nthreads"] >= 1
    assert [t["flags"] for t in proc["threads"]].count(1) == 1, proc["threads"]
    assert len(proc["sigactions"]) == 64
    assert any(r["kind"] == "file_private" and r["path"] == prog for r in proc["regions"])
    assert any(r["kind"] == "anon" and r["runs"] for r in proc["regions"])
    decoded = tmp_path / "decoded.json"
    decoded.write_text(json.dumps(d))
    for section in ["process", "split", "fds", *d["files"]]:
        stored = tmp_path / f"stored.{section}"
        job.stasis("extract", image, section, stored)
        encoded = subprocess.run([BIN, "inspect", "--encode", section,
                                 str(decoded)], capture_output=True, check=True).stdout
        assert encoded == stored.read_bytes(), section


@pytest.mark.parametrize("lower", ["openmpi", "mpich"])
def test_restart_reads_the_image_after_init(hello, lower, tmp_path):
    """STASIS_RESTORE_EARLY=0: no rank reads its image while MPI initializes
    (the launcher's rank variables are not used); each reads it after
    MPI_Init, under MPI's rank, and the job goes on."""
    job = MpiJob(tmp_path)
    job.start(*launcher(lower, 2), hello[lower], ITERS, SLEEP_MS)
    before = iteration(job.lines_until(r"rank 0 iteration \d+"))
    job.checkpoint_kill_restart(env=dict(STASIS_RESTORE_EARLY="0", STASIS_LOG="debug"))
    assert iteration(job.lines_until(r"rank 0 iteration \d+")) >= before
    rc, out, err = job.finish_job()
    assert rc == 0 and f"PASS ranks=2 iterations={ITERS}" in out, out + err
    for r in (0, 1):
        assert f"stasis: lower half: rank {r} reads its image after MPI_Init" in err, err


def test_restart_without_user_namespaces(hello, tmp_path):
    """A kernel (or a site) that refuses new user namespaces restarts an MPI
    job all the same: the split restart needs none (they give a single
    process its pid back). Before, `stasis restart` probed for them first
    and refused the job: "this kernel refuses new user and PID namespaces".
    tests/proc/nokernel fails every unshare(2) with ENOSPC, as
    user.max_user_namespaces = 0 does."""
    job = MpiJob(tmp_path)
    job.start(*launcher("openmpi", 2), hello["openmpi"], 12, SLEEP_MS)
    before = iteration(job.lines_until(r"rank 0 iteration \d+"))
    job.checkpoint()
    job.kill()
    job.seen = []
    job.proc = subprocess.Popen([program("nokernel"), "272", "28", "--", BIN, "restart", "--dir",
                                 str(job.ck)], cwd=job.work, env=job.env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, errors="replace")
    job._pending = b""
    assert iteration(job.lines_until(r"rank 0 iteration \d+")) >= before
    rc, out, err = job.finish_job()
    assert rc == 0 and "PASS ranks=2 iterations=12" in out, out + err


def test_rank_killed_during_checkpoint(hello, tmp_path):
    """Rank 1 dies while it writes its image of the second checkpoint: that
    checkpoint fails, the first stays established, and the job restarts from
    it."""
    job = MpiJob(tmp_path)
    job.env.update(STASIS_FAULT="split.rank.write:2:kill", STASIS_FAULT_RANK="1")
    job.start(*launcher("openmpi", 2), hello["openmpi"], ITERS, SLEEP_MS)
    job.lines_until(r"rank 0 iteration [2-9]")
    first = job.checkpoint()
    r = job.stasis("checkpoint", "--dir", job.ck, check=False)
    assert r.returncode != 0
    assert "stasis: checkpoint: checkpoint failed: rank 1 (pid" in r.stderr, r.stderr
    assert "ended during the checkpoint" in r.stderr, r.stderr
    job.kill()
    del job.env["STASIS_FAULT"]
    job.restart()
    rc, out, err = job.finish_job()
    assert rc == 0 and f"PASS ranks=2 iterations={ITERS}" in out, out + err
    ls = job.stasis("ls", "--dir", job.ck).stdout
    assert re.search(rf"{first}\s+(CURRENT|COMPLETE)\s", ls), ls
    assert re.search(r"ckpt-000002\s+FAILED", ls), ls


@pytest.mark.parametrize("lower,other", [("openmpi", "mpich"), ("mpich", "openmpi")])
@pytest.mark.parametrize("mode", ["dup", "late"])
def test_created_communicator_and_message_in_flight_survive(hello, lower, other, mode, tmp_path):
    """dup: the ranks hold a communicator they created (rebuilt from its
    members at restart); late: a message sent at the start is received only
    at the end, so it is in flight at every checkpoint (drained into the
    ledger, delivered from there after the restart). Two cycles on the same
    MPI, then one under the other MPI; the program checks what it gets."""
    job = MpiJob(tmp_path)
    job.start(*launcher(lower, 2), hello[lower], 30, SLEEP_MS, mode)
    cycles(job, n=2)
    cycles(job, n=1, restart_args=["--launcher", " ".join(launcher(other, 2))])
    rc, out, err = job.finish_job()
    assert rc == 0 and "PASS ranks=2 iterations=30" in out, out + err
    assert "FAIL" not in out


def test_restart_refuses_a_changed_program(hello, tmp_path):
    """A program (or library) rebuilt since the checkpoint would run its
    saved state against other code: the restart refuses it, naming it."""
    prog = tmp_path / "hello"
    prog.write_bytes(pathlib.Path(hello["openmpi"]).read_bytes())
    prog.chmod(0o755)
    job = MpiJob(tmp_path)
    job.start(*launcher("openmpi", 2), prog, ITERS, SLEEP_MS)
    job.lines_until(r"rank 0 iteration [2-9]")
    job.checkpoint()
    job.kill()
    os.utime(prog, (time.time() + 5, time.time() + 5))
    job._start(["restart", "--dir", job.ck])
    rc, out, err = job.finish_job()
    assert rc != 0
    for rank in (0, 1):
        assert (f"stasis: lower half: rank {rank}: {prog} changed since the checkpoint (size or "
                "modification time): the restart needs the files the program had mapped\n"
                ) in err, err


def test_restart_reads_the_job_files_ahead(hello, tmp_path):
    """A checkpoint records the files the job maps (the launcher's, the
    lower halves', the program's: its record "files"); a restart reads them
    and the images ahead while the launcher starts (docs/split.md,
    "Restart"); with prefetch=off it reads nothing ahead and restarts the
    same."""
    job = MpiJob(tmp_path)
    job.start(*launcher("openmpi", 2), hello["openmpi"], ITERS, SLEEP_MS)
    job.lines_until(r"rank 0 iteration [2-9]")
    name = job.checkpoint()
    job.kill()
    lines = next(job.ck.glob(f"*/{name}/files")).read_text().splitlines()
    assert lines[0] == "stasis-files 1", lines
    paths = lines[1:]
    assert hello["openmpi"] in paths, paths
    # the lower half's executable with split_onetls's padding or without
    assert any(re.search(r"/stasis-lh-openmpi(-nopad)?$", p) for p in paths), paths
    assert any(re.search(r"/libmpi\.so\.40(\.\d+)*$", p) and "/uh/" not in p for p in paths), paths
    assert any(p.endswith("/orterun") for p in paths), paths
    # no shared segments of the job (Open MPI's session directory, gone
    # with the job unless it was killed), nothing twice
    assert not [p for p in paths if "/ompi." in p or not os.path.isfile(p)], paths
    assert len(set(paths)) == len(paths), paths

    job.env["STASIS_LOG"] = "debug"
    job.restart()
    job.lines_until(r"rank 0 iteration \d+")
    _, err = job.kill()
    # not staged: both ranks read their global copies, both read ahead
    ahead = re.search(rf"reading (\d+) files and (\d+) rank images of {name} ahead\n", err)
    assert ahead and int(ahead.group(1)) >= len(paths) and ahead.group(2) == "2", err

    job.env["STASIS_PREFETCH"] = "off"
    job.restart()
    rc, out, err = job.finish_job()
    assert rc == 0 and f"PASS ranks=2 iterations={ITERS}" in out, out + err
    assert "rank images of" not in err, err

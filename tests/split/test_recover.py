"""Automatic recovery on one host (docs/coordinator.md, "Events and recovery
policies"): `stasis run --recover auto` of an MPI job whose rank 1 is
SIGKILLed after a checkpoint stops the job, relaunches it from that
checkpoint (with staging, each rank from its node-local copy) and ends
with the program's status and its own output; `--max-restarts 0` gives up
in one line with the failure status; `--recover none` ends as before.
heatdis (libstasis, application level) on two simulated nodes, its rank 2
killed: relaunched, it recovers from its own checkpoint and ends with the
grid of an uninterrupted run; `stasis predict` of it is refused. A rank
that the program ends itself (exit without MPI_Finalize, MPI_Abort) is
not recovered: one line, the program's status; a child it forks that
exits is not the rank's end.
The cluster's cases (a node lost, spares) are tests/cluster/test_recover.py.
About 45 s.

Environment: STASIS_BIN, STASIS_BUILD."""
import os
import re
import signal
import subprocess
import time

import pytest

from split_common import BUILD, launcher, program_fixture
from test_ckpt import MpiJob

# p2p.c's iterations take 0.3 s: the kill comes at iteration 5, the
# recovered job goes on from the checkpoint at 3 to the end
ITERS = 15
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


def test_a_bad_applevel_file_does_not_stop_a_recovery(p2p, job):
    """The job directory's applevel file (libstasis's rank 0 writes 'global
    <directory>/<job>' there) names no directory: the coordinator cut the
    line at a slash it did not have and died (SIGSEGV) when the recovery,
    with no checkpoint of its own, asked it. It now recovers from the
    start. About 4 s."""
    job.start(*launcher("openmpi", 2), p2p["openmpi"], 10, SLEEP_MS,
              extra=["--recover", "auto"])
    job.lines_until(r"rank 0 iteration 2")
    dirs = [p.parent for p in job.ck.glob("*/coord.secret")]
    assert len(dirs) == 1, list(job.ck.iterdir())
    (dirs[0] / "applevel").write_text("global nodirectory\n")
    os.kill(rank_pid(job, 1), signal.SIGKILL)
    rc, out, err = job.finish_job()
    assert rc == 0 and "PASS ranks=2 iterations=10 messages=" in out, out + err
    lines = [ln for ln in err.splitlines() if ln.startswith("stasis: recovery")]
    assert len(lines) == 1 and "; from the start (no checkpoint established); " in lines[0], err


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


HEATDIS = BUILD / "examples" / "heatdis" / "heatdis.openmpi"
# heatdis of a sanitized build is instrumented, and an instrumented program
# cannot run above a lower half (ASan's shadow memory lies where the split
# process keeps the upper half)
SANITIZED = "STASIS_SANITIZE:BOOL=ON" in ((BUILD / "CMakeCache.txt").read_text()
                                          if (BUILD / "CMakeCache.txt").exists() else "")
HEATDIS_ARGS = ["--rows-per-rank", 32, "--cols", 64, "--iterations", 400, "--checkpoint-every",
                50, "--level", "partner", "--output", "grid.bin"]


def heatdis_command(job, local, *extra):
    """heatdis on 4 ranks, ranks 0-1 on simulated node nodeA and 2-3 on
    nodeB (STASIS_NODE, a node-local directory each under local: tests/mpi's
    layout)"""
    cmd = ["mpirun.openmpi", "--oversubscribe"]
    for i, node in enumerate(("nodeA", "nodeB")):
        cmd += [":"] if i else []
        cmd += ["-np", "2", "-x", f"STASIS_NODE={node}",
                "-x", f"STASIS_LOCAL_DIR={local}/{node}", HEATDIS,
                *HEATDIS_ARGS, *extra]
    return [str(a) for a in cmd]


def test_heatdis_killed_rank_recovers_from_its_own_checkpoints(job, tmp_path):
    """An application-level job (libstasis, docs/coordinator.md): rank 2
    kills itself at iteration 230; the relaunch starts the program afresh,
    libstasis recovers from its checkpoint at iteration 200, and the job
    ends with the grid of a run that was never interrupted."""
    if not HEATDIS.exists() or SANITIZED:
        pytest.skip(f"{HEATDIS} not built, or instrumented")
    job.env.update(STASIS_JOB="heat", STASIS_GLOBAL_DIR=str(tmp_path / "global"))
    ref = subprocess.run(heatdis_command(job, tmp_path / "ref-local"), cwd=job.work, env=dict(job.env,
                         STASIS_GLOBAL_DIR=str(tmp_path / "ref")), capture_output=True,
                         text=True, timeout=120)
    assert ref.returncode == 0 and "heatdis: done" in ref.stdout, ref.stdout + ref.stderr
    reference = (job.work / "grid.bin").read_bytes()
    (job.work / "grid.bin").unlink()
    job.start(*heatdis_command(job, tmp_path / "local", "--kill-rank", 2, "--kill-iteration", 230),
              extra=["--recover", "auto"])
    rc, out, err = job.finish_job(timeout=120)
    assert rc == 0 and "heatdis: restarted at iteration 200\n" in out, out + err
    assert out.splitlines()[-1] == ref.stdout.splitlines()[-1], out + err
    assert (job.work / "grid.bin").read_bytes() == reference, out + err
    lines = [ln for ln in err.splitlines() if ln.startswith("stasis: recovery")]
    assert len(lines) == 1 and re.fullmatch(
        r"stasis: recovery 1 of 3: rank 2 \(pid \d+ on \S+\) died: .*; from ckpt-000004 or "
        r"older \(libstasis recovers the newest it can verify\); \d+\.\d s", lines[0]), err


def test_heatdis_predict_is_refused_in_one_line(job, tmp_path):
    if not HEATDIS.exists() or SANITIZED:
        pytest.skip(f"{HEATDIS} not built, or instrumented")
    job.env.update(STASIS_JOB="heat", STASIS_GLOBAL_DIR=str(tmp_path / "global"))
    cmd = heatdis_command(job, "local")   # relative to the job's directory
    job.start(*[a if a != "400" else "1000000" for a in cmd])
    end = time.time() + 30
    while not list(job.ck.glob("*/applevel")) and time.time() < end:
        time.sleep(0.1)
    # where libstasis tells the coordinator its caches are: absolute, as a
    # migration's move runs elsewhere
    applevel = list(job.ck.glob("*/applevel"))[0].read_text()
    assert f"\nlocal {job.work}/local/nodeA\n" in applevel, applevel
    r = job.stasis("predict", "--dir", job.ck, "--node", os.uname().nodename, "--within", "60s",
                   check=False)
    assert r.returncode == 1 and r.stderr == (
        "stasis: predict: a predicted fault of an application-level job (libstasis) is not "
        "handled: its ranks cannot be checkpointed from outside (stasis migrate asks it to stop "
        "and moves it; --recover auto recovers it)\n"), r.stderr


quit = program_fixture("quit")


@pytest.mark.parametrize("lower,how", [("openmpi", "exit"), ("openmpi", "abort"),
                                       ("mpich", "exit")])
def test_a_rank_the_program_ends_itself_is_not_recovered(quit, job, lower, how):
    """exit(3) without MPI_Finalize, or MPI_Abort(3), on rank 1: the
    program's decision, which a relaunch would repeat. One line says so;
    the job ends as its launcher does, with the program's status."""
    job.start(*launcher(lower, 2), quit[lower], ITERS, SLEEP_MS, 3, how,
              extra=["--recover", "auto"])
    rc, out, err = job.finish_job()
    assert rc == 3 and "PASS" not in out, out + err
    mine = [ln for ln in err.splitlines() if ln.startswith("stasis:")]
    what = ("called MPI_Abort (error code 3)" if how == "abort" else
            "exited with status 3 without calling MPI_Finalize")
    assert len(mine) == 1 and re.fullmatch(
        rf"stasis: rank 1 \(pid \d+ on \S+\) {re.escape(what)}: the program's own end, not "
        rf"recovered", mine[0]), err


def test_a_forked_child_s_exit_is_not_the_rank_s(quit, job):
    """Rank 1 forks a child that calls exit(0): the child inherits the
    upper half's on_exit and the rank's connection to its node agent, but
    its end is not the rank's. The job runs to its end with no line of
    stasis's (it said 'rank 1 ... exited with status 0 without calling
    MPI_Finalize: the program's own end, not recovered')."""
    job.start(*launcher("openmpi", 2), quit["openmpi"], 8, SLEEP_MS, 3, "fork",
              extra=["--recover", "auto"])
    rc, out, err = job.finish_job()
    assert rc == 0 and "PASS" in out, out + err
    assert not [ln for ln in err.splitlines() if ln.startswith("stasis:")], err

"""Spare ranks (`stasis run --spares S`, docs/coordinator.md, "Spare
ranks"): the launcher starts N + S ranks, the last S wait past MPI_Init
without a program, and the program sees N ranks. spares.c prints what its
MPI_COMM_WORLD, a split of it, MPI_COMM_SELF's group and a ring tell each
rank: above lower halves with a spare it must print what it prints
natively, end with its own status, survive a checkpoint and a restart
with the spare there, and leave no process behind. About 15 s in all.

Environment: STASIS_BIN, STASIS_BUILD."""
import subprocess

import pytest

from split_common import ENV, TIMEOUT, launcher, program_fixture
from test_ckpt import MpiJob

spares = program_fixture("spares")


def summary(out):
    """The ranks' last lines, in rank order (their order on stdout varies)."""
    return sorted(line for line in out.splitlines() if line.startswith("rank ") and " of " in line)


def left_running(prog):
    """Processes still running prog (a lower half's command line names it)."""
    r = subprocess.run(["pgrep", "-f", prog], capture_output=True, text=True)
    return r.stdout.split()


def lower_halves(prog, lower):
    """The lower halves running prog now: ranks and spares."""
    r = subprocess.run(["pgrep", "-f", f"stasis-lh-{lower} -- {prog}"], capture_output=True,
                       text=True)
    return len(r.stdout.split())


@pytest.mark.parametrize("lower", ["openmpi", "mpich"])
def test_spare_run_prints_what_native_prints(spares, lower, tmp_path):
    prog = spares[lower]
    native = subprocess.run(launcher(lower, 2) + [prog, "2", "0", "3"], env=ENV,
                            capture_output=True, text=True, timeout=TIMEOUT)
    assert len(summary(native.stdout)) == 2, native.stdout + native.stderr
    job = MpiJob(tmp_path)
    job.start(*launcher(lower, 2), prog, "2", "0", "3", extra=["--spares", "1"])
    rc, out, err = job.finish_job()
    assert summary(out) == summary(native.stdout), out + err
    assert rc == native.returncode == 3, (rc, native.returncode, err)
    assert not left_running(prog)


def test_spare_checkpoint_restart(spares, tmp_path):
    prog = spares["openmpi"]
    native = subprocess.run(launcher("openmpi", 2) + [prog, "2", "0"], env=ENV,
                            capture_output=True, text=True, timeout=TIMEOUT)
    job = MpiJob(tmp_path)
    job.start(*launcher("openmpi", 2), prog, "30", "100", extra=["--spares", "1"])
    job.lines_until(r"rank 0 iteration 2")
    assert lower_halves(prog, "openmpi") == 3
    job.checkpoint_kill_restart("--spares", "1")
    job.lines_until(r"rank 0 iteration \d+")
    assert lower_halves(prog, "openmpi") == 3
    rc, out, err = job.finish_job()
    assert rc == 0, out + err
    assert summary(out) == summary(native.stdout), out + err
    assert not left_running(prog)


def test_spares_refused_in_one_line(spares, tmp_path):
    job = MpiJob(tmp_path)
    r = job.stasis("run", "--dir", job.ck, "--spares", "1", "--", "mpiexec.mpich", spares["mpich"],
                   check=False)
    assert r.returncode != 0
    assert r.stderr.strip().splitlines()[-1] == (
        "stasis: run: --spares 1: the launcher's command (mpiexec.mpich) gives no number of ranks "
        "(-np N, -n N) to add the spares to"), r.stderr
    r = job.stasis("run", "--dir", job.ck, "--spares", "x", "--", "mpiexec.mpich", "-n", "1",
                   spares["mpich"], check=False)
    assert r.returncode != 0 and r.stderr == "stasis: run: bad --spares 'x' (a number from 0 to 4096)\n"

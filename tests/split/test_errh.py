"""Error handlers (docs/split.md, "Errors"): the program's handlers and
MPI_ERRORS_RETURN, set on communicators and files, inherited by the
communicators made from them, called with the program's own handles; and
the same after every kill and restart, on a fresh MPI of either library;
MPI_ERRORS_ARE_FATAL ends the job with one line naming the call
(tests/split/errh.c).

Environment: STASIS_BIN, STASIS_BUILD."""
import subprocess

import pytest

from split_common import ENV, LH, TIMEOUT, launcher, program_fixture, run_on
from test_ckpt import MpiJob, cycles

ITERS = 30
SLEEP_MS = 100


errh = program_fixture("errh")


@pytest.mark.parametrize("lower,restart_under", [("openmpi", "openmpi"), ("mpich", "mpich"),
                                                 ("openmpi", "mpich")])
def test_error_handlers_survive_restarts(errh, lower, restart_under, tmp_path):
    job = MpiJob(tmp_path)
    job.start(*launcher(lower, 2), errh[lower], ITERS, SLEEP_MS)
    cycles(job, restart_args=["--launcher", " ".join(launcher(restart_under, 2))])
    rc, out, err = job.finish_job()
    assert rc == 0, out + err
    assert f"PASS ranks=2 iterations={ITERS} calls={5 * ITERS}" in out, out + err
    assert "FAIL" not in out


@pytest.mark.parametrize("lower", ["openmpi", "mpich"])
def test_fatal_error_names_the_call(errh, lower, tmp_path):
    """Natively the send to a rank that does not exist ends the job; under
    Stasis too, with one line that names the call, the error and the
    handler."""
    for cmd in ([errh[lower], "fatal"], [str(LH / f"stasis-lh-{lower}"), errh[lower], "fatal"]):
        r = subprocess.run(launcher(lower, 2) + cmd, cwd=tmp_path, env=ENV, capture_output=True,
                           text=True, timeout=TIMEOUT, errors="replace")
        assert r.returncode != 0, r
        assert "survived" not in r.stdout, r.stdout
    text = "invalid rank" if lower == "openmpi" else "Invalid rank"
    assert (f"stasis: rank 1: MPI_Send failed: MPI_ERR_RANK: {text} (the error handler of its "
            "communicator is MPI_ERRORS_ARE_FATAL); aborting the job") in r.stderr.splitlines(), \
        r.stderr



@pytest.mark.parametrize("lower", ["openmpi", "mpich"])
def test_no_communicator_is_refused(errh, lower, tmp_path):
    """A value that is no communicator given to a collective: MPI_ERR_COMM
    returned (MPICH's answer natively), where the lower half used to spin
    for good growing its counts' arrays to the upper half's number for it
    (NWChem's BLACS did, after an MPI_Win_create that failed)."""
    lh = str(LH / f"stasis-lh-{lower}")
    r = subprocess.run(launcher(lower, 2) + [lh, errh[lower], "badcomm"], cwd=tmp_path,
                       env=ENV, capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stdout + r.stderr
    for rank in (0, 1):
        assert f"rank {rank}: MPI_Comm_dup of no communicator: class MPI_ERR_COMM" in \
            r.stdout.splitlines(), r.stdout + r.stderr


errh_mt = program_fixture("errh_mt")


def test_each_threads_request_error_on_its_own_communicator(errh_mt, tmp_path):
    """MPI_THREAD_MULTIPLE, two threads a rank, each completing requests in
    error on its own communicator while the other calls MPI: every error
    is raised on the handler of the request's communicator. The lower half
    used to leave that communicator in one word for the whole rank, which
    the other thread's next call could overwrite before the upper half
    read it: each of 5 runs of errh_mt.c failed, most aborted by
    MPI_COMM_WORLD's handler, the others had errors on the other thread's
    communicator. Above Open MPI's lower half (the code is the same above
    MPICH's, whose own path for messages to oneself fails under threads),
    about 2 s."""
    r = run_on(errh_mt["openmpi"], "openmpi", 1, ["50000"], tmp_path,
               env={"STASIS_MPI_THREAD_LEVEL": "multiple"})
    assert r.returncode == 0 and r.stdout.splitlines() == [
        "rank 0: PASS threads=2 iterations=50000 errors=100000"], r.stdout + r.stderr


waitall_err = program_fixture("waitall_err")


@pytest.mark.parametrize("lower", ["openmpi", "mpich"])
def test_waitall_error_survives_a_checkpoint_inside_it(waitall_err, lower, tmp_path):
    """One of MPI_Waitall's requests fails at once, the other completes
    only after a checkpoint taken inside the call, a kill and a restart:
    MPI_Waitall still returns MPI_ERR_IN_STATUS (waitall_err.c)."""
    job = MpiJob(tmp_path)
    job.start(*launcher(lower, 2), waitall_err[lower])
    job.lines_until(r"in waitall")
    job.checkpoint_kill_restart()
    (job.work / "go").touch()
    rc, out, err = job.finish_job()
    assert rc == 0 and "PASS" in out and "FAIL" not in out, out + err

"""Threaded ranks (docs/split.md, "Threaded ranks"): a hybrid program whose
ranks run OpenMP threads and pthreads beside the MPI calls of their main
thread (MPI_THREAD_FUNNELED) is checkpointed with every thread stopped,
killed and restarted: each thread goes on from where it was, with its
registers, stack, TLS and thread id (tests/split/threads.c checks them
every iteration and joins its threads at the end).

Environment: STASIS_BIN, STASIS_BUILD."""
import re

import pytest

from split_common import launcher, program_fixture, run_on
from test_ckpt import MpiJob, cycles

ITERS = 24
SLEEP_MS = 250
# libgomp's idle threads sleep instead of spinning: 2 ranks of 3 threads
# share 2 CPUs
OMP = {"OMP_WAIT_POLICY": "passive"}


threads = program_fixture("threads")


def threaded_job(tmp_path, **env):
    job = MpiJob(tmp_path)
    job.env.update(OMP, **env)
    return job


@pytest.mark.parametrize("lower", ["openmpi", "mpich"])
def test_threaded_ranks_three_cycles(threads, lower, tmp_path):
    job = threaded_job(tmp_path)
    job.start(*launcher(lower, 2), threads[lower], ITERS, SLEEP_MS)
    cycles(job)
    rc, out, err = job.finish_job()
    assert rc == 0, out + err
    assert f"PASS ranks=2 iterations={ITERS}" in out, out + err
    assert "FAIL" not in out


def test_threaded_ranks_restart_under_the_other_mpi(threads, tmp_path):
    job = threaded_job(tmp_path)
    # one cycle: half the iterations leave time enough (3 s of the run)
    job.start(*launcher("openmpi", 2), threads["openmpi"], ITERS // 2, SLEEP_MS)
    cycles(job, n=1, restart_args=["--launcher", " ".join(launcher("mpich", 2))])
    rc, out, err = job.finish_job()
    assert rc == 0 and f"PASS ranks=2 iterations={ITERS // 2}" in out, out + err


mt = program_fixture("mt")
MT_ITERS = 40
MT_SLEEP_MS = 40


def results(out):
    return [line for line in out.splitlines() if line.startswith(("thread ", "PASS", "FAIL"))]


@pytest.mark.parametrize("lower", ["openmpi", "mpich"])
def test_every_thread_calls_mpi_three_cycles(mt, lower, tmp_path):
    """MPI_THREAD_MULTIPLE (docs/split.md, "MPI from every thread"): 4
    threads a rank in point-to-point calls and collectives at once, each
    on its own communicator, some waiting inside MPI when the checkpoint
    comes; three checkpoint/kill/restart cycles, and the program prints
    what an uninterrupted native run prints."""
    native = run_on(mt[lower], None, 2, [str(MT_ITERS), "0"], tmp_path)
    assert native.returncode == 0 and "PASS" in native.stdout, native.stdout + native.stderr
    job = threaded_job(tmp_path, STASIS_MPI_THREAD_LEVEL="multiple")
    job.start(*launcher(lower, 2), mt[lower], MT_ITERS, MT_SLEEP_MS)
    cycles(job)
    rc, out, err = job.finish_job()
    assert rc == 0, out + err
    assert results(out) == results(native.stdout), out + err


def test_any_thread_one_at_a_time_three_cycles(mt, tmp_path):
    """MPI_THREAD_SERIALIZED: the same exchanges, non-blocking, every MPI
    call of the 4 threads under one mutex of the program's (any thread,
    one at a time), some threads held at the mutex when the checkpoint
    comes; three cycles above Open MPI, output equal to a native run's."""
    args = [str(MT_ITERS), "0", "serialized"]
    native = run_on(mt["openmpi"], None, 2, args, tmp_path)
    assert native.returncode == 0 and "PASS" in native.stdout, native.stdout + native.stderr
    job = threaded_job(tmp_path, STASIS_MPI_THREAD_LEVEL="serialized")
    job.start(*launcher("openmpi", 2), mt["openmpi"], MT_ITERS, MT_SLEEP_MS, "serialized")
    cycles(job)
    rc, out, err = job.finish_job()
    assert rc == 0, out + err
    assert results(out) == results(native.stdout), out + err


mt_dup = program_fixture("mt_dup")


@pytest.mark.parametrize("lower", ["openmpi", "mpich"])
def test_threads_make_communicators_at_once(mt_dup, lower, tmp_path):
    """MPI_THREAD_MULTIPLE: on each rank one thread duplicates A while the
    other duplicates B, 300 times, the other rank's threads the other way
    round. A call that kept the lower half's lock while the real
    MPI_Comm_dup waited for the other rank let neither rank's other thread
    in: both waited for good (500 iterations did on each MPI, ended by
    the program's SIGALRM after 60 s). About 2 s each."""
    r = run_on(mt_dup[lower], lower, 2, ["300"], tmp_path,
               env={"STASIS_MPI_THREAD_LEVEL": "multiple"})
    assert r.returncode == 0 and "PASS ranks=2 iterations=300\n" in r.stdout, \
        r.stdout + r.stderr


# main, ticker, waiter and the 2 other threads of the OpenMP team: 5
def test_sixty_four_threads_restart(threads, tmp_path):
    """A rank of 64 threads, the most the image's table holds, is
    checkpointed and restarted, and every thread runs on. The checkpoint
    must come before the job's end: 12 iterations leave 3 s after the
    first (8 did not under a load of 15: 2 of 6 failed, "rank 1 ended
    during the checkpoint"). About 10 s."""
    job = threaded_job(tmp_path)
    job.start(*launcher("openmpi", 2), threads["openmpi"], 12, SLEEP_MS, 64 - 5)
    cycles(job, n=1)
    rc, out, err = job.finish_job()
    assert rc == 0 and "PASS ranks=2 iterations=12" in out, out + err


def test_more_than_sixty_four_threads_are_refused(threads, tmp_path):
    job = threaded_job(tmp_path)
    # from iteration 1 both ranks run their OpenMP teams; 12 iterations
    # leave the checkpoint 2.5 s before the job's end
    job.start(*launcher("openmpi", 2), threads["openmpi"], 12, SLEEP_MS, 65 - 5)
    job.lines_until(r"rank 0 iteration ([1-9]|1[01])")
    r = job.stasis("checkpoint", "--dir", job.ck, check=False)
    assert r.returncode != 0, r
    assert re.search(r"checkpoint failed: rank [01]: the program runs (more than 64|65) "
                     r"threads; the split process checkpoints at most 64 per rank\n",
                     r.stderr), r.stderr
    rc, out, err = job.finish_job()
    assert rc == 0 and "PASS ranks=2 iterations=12" in out, out + err

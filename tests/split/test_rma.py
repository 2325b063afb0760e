"""One-sided communication (docs/split.md, "Windows"): rma_fence.c puts,
accumulates and gets through a window of MPI_Win_create and one of
MPI_Win_allocate with fences, with operations in flight while it sleeps
(where the checkpoints come), and checks every value itself; natively,
above the other ABI's lower half, and through three checkpoint, SIGKILL
and restart cycles above each MPI's own (2 ranks: MPICH busy-polls).
rma_passive.c, rma_pscw.c, rma_dynamic.c and rma_shared.c likewise. The final sum of
the accumulates is the native run's and the formula's. rma_churn.c makes
and frees windows by the thousand after a restart.

Environment: STASIS_BIN, STASIS_BUILD."""
import pytest

from split_common import launcher, program_fixture, run_on
from test_ckpt import MpiJob, cycled
from test_local import ABOVE

rma_fence = program_fixture("rma_fence")
ITERS, SLEEP_MS = 12, 100
# natively and above the other ABI's lower half: above its own, each
# program runs in its three-cycle test
ACROSS = [(abi, lower) for abi, lower in ABOVE if abi != lower]


def passed(n, iters):
    per = n * (n + 1) // 2
    total = per * iters * (iters + 1) // 2
    return f"PASS ranks={n} iterations={iters} checks={4 * n * iters} sum={total}\n"


@pytest.mark.parametrize("abi,lower", ACROSS)
def test_rma_fence(rma_fence, abi, lower, tmp_path):
    """Natively (lower None) and above a lower half, without a checkpoint."""
    r = run_on(rma_fence[abi], lower, 2, ["4", "10"], tmp_path)
    assert r.returncode == 0 and passed(2, 4) in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("lower", ["openmpi", "mpich"])
def test_rma_fence_three_cycles(rma_fence, lower, tmp_path):
    rc, out, err = cycled(tmp_path, lower, 2, rma_fence[lower], ITERS, SLEEP_MS)
    assert rc == 0 and passed(2, ITERS) in out and "FAIL" not in out, out + err


rma_passive = program_fixture("rma_passive")


def passive_passed(n, iters):
    return f"PASS ranks={n} iterations={iters} checks={4 * n * iters} count={n * iters}\n"


@pytest.mark.parametrize("abi,lower", ACROSS)
def test_rma_passive(rma_passive, abi, lower, tmp_path):
    """Natively and above a lower half, without a checkpoint. Natively
    Open MPI's osc/rdma dies of SIGSEGV in MPI_Win_lock_all (vader, Open
    MPI 4.1): the native run uses osc/pt2pt; the lower half never calls
    the real lock_all but with MPI_MODE_NOCHECK."""
    env = {"OMPI_MCA_osc": "pt2pt"} if lower is None and abi == "openmpi" else None
    r = run_on(rma_passive[abi], lower, 2, ["4", "20"], tmp_path, env=env)
    assert r.returncode == 0 and passive_passed(2, 4) in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("lower", ["openmpi", "mpich"])
def test_rma_passive_three_cycles(rma_passive, lower, tmp_path):
    """Checkpoints come inside exclusive lock epochs (the other rank waits
    for the lock) and inside lock_all epochs with atomics in flight."""
    rc, out, err = cycled(tmp_path, lower, 2, rma_passive[lower], ITERS, SLEEP_MS)
    assert rc == 0 and passive_passed(2, ITERS) in out and "FAIL" not in out, out + err


rma_pscw = program_fixture("rma_pscw")


def pscw_passed(n, iters):
    return f"PASS ranks={n} iterations={iters} checks={2 * n * iters} " \
           f"sum={(n - 1) * iters * (iters + 1) // 2}\n"


@pytest.mark.parametrize("abi,lower", ACROSS)
def test_rma_pscw(rma_pscw, abi, lower, tmp_path):
    """Natively and above a lower half, without a checkpoint."""
    r = run_on(rma_pscw[abi], lower, 2, ["4", "20"], tmp_path)
    assert r.returncode == 0 and pscw_passed(2, 4) in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("lower", ["openmpi", "mpich"])
def test_rma_pscw_three_cycles(rma_pscw, lower, tmp_path):
    """Checkpoints come with exposure and access epochs open and puts and
    accumulates issued in them."""
    rc, out, err = cycled(tmp_path, lower, 2, rma_pscw[lower], ITERS, SLEEP_MS)
    assert rc == 0 and pscw_passed(2, ITERS) in out and "FAIL" not in out, out + err


rma_dynamic = program_fixture("rma_dynamic")


def dynamic_passed(n, iters):
    return f"PASS ranks={n} iterations={iters} counter={n * (n + 1) // 2 * (iters - 3)}\n"


@pytest.mark.parametrize("lower", ["openmpi", "mpich"])
def test_rma_dynamic_three_cycles(rma_dynamic, lower, tmp_path):
    """A window of MPI_Win_create_dynamic with a static array attached
    and a malloc'd counter attached, accumulated into and detached while
    the program runs, puts and accumulates in flight where the
    checkpoints come: the attached memory is attached again at each
    restart, at the same addresses (the displacements). The counter's
    final value is the formula's (a native run prints it too)."""
    rc, out, err = cycled(tmp_path, lower, 2, rma_dynamic[lower], ITERS, SLEEP_MS)
    assert rc == 0 and dynamic_passed(2, ITERS) in out and "FAIL" not in out, out + err


rma_shared = program_fixture("rma_shared")


def shared_passed(n, iters):
    return f"PASS ranks={n} iterations={iters} counter={n * (n + 1) // 2 * iters}\n"


@pytest.mark.parametrize("abi,lower", [("mpich", None), ("openmpi", "mpich")])
def test_rma_shared(rma_shared, abi, lower, tmp_path):
    """Natively (the result the cycles must give) and above the other
    ABI's lower half, without a checkpoint."""
    r = run_on(rma_shared[abi], lower, 2, ["4", "10"], tmp_path)
    assert r.returncode == 0 and shared_passed(2, 4) in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("lower", ["openmpi", "mpich"])
def test_rma_shared_three_cycles(rma_shared, lower, tmp_path):
    """A window of MPI_Win_allocate_shared between the 2 ranks of one node:
    plain stores into the neighbour's part (MPI_Win_shared_query) and an
    accumulate made where the checkpoints come, checked with plain loads
    after each: the segment is one memory again after every restart, its
    contents rank 0's image's. The native run's result is the same
    (test_rma_shared_natively)."""
    rc, out, err = cycled(tmp_path, lower, 2, rma_shared[lower], ITERS, SLEEP_MS)
    assert rc == 0 and shared_passed(2, ITERS) in out and "FAIL" not in out, out + err


rma_churn = program_fixture("rma_churn")


def test_rma_churn_after_restart_mpich(rma_churn, tmp_path):
    """2100 windows made and freed after a restart above MPICH, 8 at a
    time, each checked with a put, as NWChem's Global Arrays do in an SCF:
    each window's hidden communicator used to stay retired, with its
    duplicate, until the next checkpoint, and MPICH's 2048 context ids ran
    out (`MPI_Win_create` failed; NWChem went on with garbage handles).
    About 1 s here."""
    job = MpiJob(tmp_path)
    job.start(*launcher("mpich", 2), rma_churn["mpich"], "4", str(SLEEP_MS), "2100")
    job.lines_until(r"rank 0 iteration 1")
    job.checkpoint_kill_restart()
    rc, out, err = job.finish_job()
    assert rc == 0 and "PASS ranks=2 windows=2100 checks=4200\n" in out, out + err

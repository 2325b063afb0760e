"""Checkpoint and restart of MPI jobs with messages in flight and MPI objects
(docs/split.md): p2p.c keeps point-to-point messages sent and not received,
and requests posted and not completed, at almost every moment; objects.c
makes communicators, groups, Cartesian topologies, derived datatypes and a
user operation before its loop and uses them in every iteration. Each is
checkpointed, killed with SIGKILL and restarted three times under
`stasis run`, under Open MPI and MPICH, on 2 and 4 ranks (objects.c on 2 of
MPICH); the programs check every message and every object themselves and
count what they checked.

Environment: STASIS_BIN, STASIS_BUILD."""
import pathlib
import re
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
from split_common import ENV, TIMEOUT, build_programs, launcher  # noqa: E402
from test_ckpt import MpiJob, cycles  # noqa: E402

P2P_ITERS = 16      # about 0.3 s each with SLEEP_MS = 100 (test_ckpt.ITERS)
OBJECTS_ITERS = 20  # about 0.1 s each (test_local.ITERS)
SLEEP_MS = 100
MATRIX = [("openmpi", 2), ("openmpi", 4), ("mpich", 2), ("mpich", 4)]
# objects.c's objects are rebuilt by the same calls on 2 ranks as on 4:
# MPICH's 4 busy-polling ranks only for p2p.c's traffic in flight (the
# drain), as test_local.MATRIX
OBJECTS_MATRIX = MATRIX[:3]


@pytest.fixture(scope="module")
def progs(tmp_path_factory):
    return build_programs(tmp_path_factory, ("p2p", "objects"))


def p2p_messages(n, iters):
    """The messages p2p.c verifies in all, as its header describes them."""
    per_iteration = (3 * (n // 2)            # a: ping, 256 KiB, reply per pair
                     + 4 * (n - 1)           # b: 3 to rank 0 and an acknowledgement
                     + 5 * 2 * n             # c: 5 ring rounds of 2 messages
                     + 2 * n                 # d: Sendrecv, Sendrecv_replace
                     + 8 * n)                # e: 4 ways of probing, 2 messages each
    return iters * per_iteration


def objects_checks(n, iters):
    """The checks objects.c makes in all: per rank and iteration 2 on
    collectives, 3 per datatype (status, bytes, size and extent), 2 per
    communicator it belongs to (dup, split, cart1; the MPI_Comm_create one on
    ranks 0..n/2; with 4 ranks or more the 2-D Cartesian one and its row), 3 on
    groups, 1 on MPI_Comm_compare/MPI_Topo_test, 1 on the 1-D Cartesian
    communicator and 2 on the 2-D ones."""
    total = 0
    for r in range(n):
        comms = 3 + (r <= n // 2) + 2 * (n >= 4)
        total += 2 + 3 * 5 + 2 * comms + 3 + 1 + 1 + 2 * (n >= 4)
    return iters * total


def assert_checkpoints(job, n, count=3):
    ls = job.stasis("ls", "--dir", job.ck).stdout
    assert len(re.findall(r"ckpt-\d+\s+(CURRENT|COMPLETE)\s+" + str(n + 2) + " ", ls)) == count, ls


@pytest.mark.parametrize("abi", ["openmpi", "mpich"])
@pytest.mark.parametrize("name", ["p2p", "objects"])
def test_programs_pass_natively(progs, name, abi, tmp_path):
    """The test programs themselves pass without Stasis (2 ranks, 3 iterations)."""
    r = subprocess.run(launcher(abi, 2) + [progs[(name, abi)], "3", "20"], cwd=tmp_path, env=ENV,
                       capture_output=True, text=True, timeout=TIMEOUT, errors="replace")
    want = (f"messages={p2p_messages(2, 3)}" if name == "p2p" else f"checks={objects_checks(2, 3)}")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"PASS ranks=2 iterations=3 {want}\n" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("lower,n", MATRIX)
def test_p2p_three_cycles(progs, lower, n, tmp_path):
    job = MpiJob(tmp_path)
    job.start(*launcher(lower, n), progs[("p2p", lower)], P2P_ITERS, SLEEP_MS, job.no_sleep)
    cycles(job)
    job.events_over()
    rc, out, err = job.finish_job()
    assert rc == 0, out + err
    assert (f"PASS ranks={n} iterations={P2P_ITERS} messages={p2p_messages(n, P2P_ITERS)}\n"
            in out), out + err
    assert "FAIL" not in out
    assert_checkpoints(job, n)


@pytest.mark.parametrize("lower,n", OBJECTS_MATRIX)
def test_objects_three_cycles(progs, lower, n, tmp_path):
    job = MpiJob(tmp_path)
    job.start(*launcher(lower, n), progs[("objects", lower)], OBJECTS_ITERS, SLEEP_MS)
    cycles(job)
    rc, out, err = job.finish_job()
    assert rc == 0, out + err
    assert (f"PASS ranks={n} iterations={OBJECTS_ITERS} "
            f"checks={objects_checks(n, OBJECTS_ITERS)}\n" in out), out + err
    assert "FAIL" not in out
    assert_checkpoints(job, n)


@pytest.mark.parametrize("first,second", [("openmpi", "mpich"), ("mpich", "openmpi")])
@pytest.mark.parametrize("name", ["p2p", "objects"])
def test_restart_under_the_other_mpi(progs, name, first, second, tmp_path):
    """p2p: messages drained at the checkpoint above one MPI are delivered
    above the other after the restart (--launcher). objects: communicators, a
    Cartesian topology (MPI_Topo_test answers in the program's ABI: MPI_CART
    is 1 in Open MPI's and 2 in MPICH's), datatypes and a user op built
    again above the other MPI."""
    iters = P2P_ITERS if name == "p2p" else OBJECTS_ITERS
    want = (f"messages={p2p_messages(2, iters)}" if name == "p2p"
            else f"checks={objects_checks(2, iters)}")
    job = MpiJob(tmp_path)
    job.start(*launcher(first, 2), progs[(name, first)], iters, SLEEP_MS,
              *([job.no_sleep] if name == "p2p" else []))
    cycles(job, n=1, restart_args=["--launcher", " ".join(launcher(second, 2))])
    job.events_over()
    rc, out, err = job.finish_job()
    assert rc == 0, out + err
    assert f"PASS ranks=2 iterations={iters} {want}\n" in out, out + err
    assert "FAIL" not in out

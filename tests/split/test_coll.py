"""Collectives across checkpoints (docs/split.md, "Collectives at a
checkpoint"): coll.c runs every blocking collective, overlapping
collectives on communicators from Comm_split, Comm_dup, Comm_create and
Comm_split_type, and every non-blocking collective around naps, with ranks
arriving at different
times, so that each checkpoint finds some ranks inside a collective and
others before it. Three checkpoint, SIGKILL and restart cycles; the program
checks every result.

Environment: STASIS_BIN, STASIS_BUILD."""
import json
import pathlib
import re
import subprocess

import pytest

from split_common import (ENV, LH, TIMEOUT, build_programs, data_file, launcher, program_fixture,
                          run_on)
from test_ckpt import MpiJob, cycles

ITERS = 16         # test_ckpt.ITERS says why few
SLEEP_MS = 200


def expected_checks(size, iters):
    """What coll.c counts: its CHECKs, summed over ranks and iterations."""
    t = size * (size + 1) // 2
    return iters * (9 * size + 1 + (size + 1) // 2 + (size - 1) + size + 2 * t + 3 * size * size
                    + size * t + 12 * size + size)


coll = program_fixture("coll")


@pytest.mark.parametrize("lower,n", [("openmpi", 2), ("openmpi", 4), ("mpich", 2), ("mpich", 4)])
def test_collectives_three_cycles(coll, lower, n, tmp_path):
    job = MpiJob(tmp_path)
    job.start(*launcher(lower, n), coll[lower], ITERS, SLEEP_MS)
    cycles(job)
    rc, out, err = job.finish_job()
    assert rc == 0, out + err
    assert f"PASS ranks={n} iterations={ITERS} checks={expected_checks(n, ITERS)}\n" in out, \
        out + err
    assert "FAIL" not in out


@pytest.mark.parametrize("abi,lower", [("openmpi", "mpich"), ("mpich", "openmpi")])
def test_collectives_above_the_other_lower_half(coll, abi, lower, tmp_path):
    """A program built with one MPI above the other's lower half, without a
    checkpoint: the values that differ between the ABIs (MPI_COMM_TYPE_SHARED
    is 0 in Open MPI's, 1 in MPICH's) mean the same."""
    r = subprocess.run(launcher(lower, 3) + [str(LH / f"stasis-lh-{lower}"), coll[abi], "3", "20"],
                       cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"PASS ranks=3 iterations=3 checks={expected_checks(3, 3)}\n" in r.stdout, \
        r.stdout + r.stderr


def test_collectives_restart_under_the_other_mpi(coll, tmp_path):
    job = MpiJob(tmp_path)
    job.start(*launcher("mpich", 2), coll["mpich"], ITERS, SLEEP_MS)
    cycles(job, n=1, restart_args=["--launcher", " ".join(launcher("openmpi", 2))])
    rc, out, err = job.finish_job()
    assert rc == 0 and f"PASS ranks=2 iterations={ITERS} checks={expected_checks(2, ITERS)}\n" \
        in out, out + err


@pytest.mark.parametrize("lower,n", [("openmpi", 4), ("mpich", 2)])
def test_checkpoint_while_a_rank_waits_in_a_barrier(coll, lower, n, tmp_path):
    """Rank 0 waits inside MPI_Barrier while the others sleep before it: the
    others run on to the barrier (their target) before the images are
    written, and the job goes on from there after the restart."""
    job = MpiJob(tmp_path)
    job.start(*launcher(lower, n), coll[lower], 6, 200, "skew")
    cycles(job, n=2)
    rc, out, err = job.finish_job()
    assert rc == 0 and f"PASS ranks={n} iterations=6 checks={expected_checks(n, 6)}\n" in out, \
        out + err


@pytest.fixture(scope="module")
def churn(tmp_path_factory):
    return build_programs(tmp_path_factory, ("comm_churn",))


@pytest.mark.parametrize("lower", ["openmpi", "mpich"])
def test_freed_communicator_three_cycles(churn, lower, tmp_path):
    """Checkpoints while some ranks freed a communicator and the others still
    hold it (comm_churn.c): the freed one stays in the rounds of targets
    until every member freed it (before, the ranks holding it waited forever
    in a round the others did not join), and a restart makes it again on
    every member."""
    job = MpiJob(tmp_path)
    job.start(*launcher(lower, 2), churn[("comm_churn", lower)], 40, 150)
    cycles(job)
    rc, out, err = job.finish_job()
    assert rc == 0, out + err
    assert "PASS ranks=2 iterations=40 checks=80\n" in out, out + err
    assert "FAIL" not in out


def as_natively_across_a_restart(prog, lower, args, native_args, want, line, tmp_path):
    """prog's native run prints want; above lower's lower half, checkpointed,
    killed and restarted once line is out, it ends the same way."""
    native = run_on(prog, None, 2, native_args, tmp_path)
    assert native.returncode == 0 and want in native.stdout, native.stdout + native.stderr
    job = MpiJob(tmp_path)
    job.start(*launcher(lower, 2), prog, *args)
    job.lines_until(line)
    job.checkpoint_kill_restart()
    rc, out, err = job.finish_job()
    assert rc == 0 and want in out and "FAIL" not in out, out + err
    return job


def test_comm_churn(churn, tmp_path):
    """2100 dup/free pairs of MPI_COMM_WORLD under MPICH (2048 context ids),
    then a checkpoint, SIGKILL and restart while the ranks free
    communicators apart, then as many pairs again (comm_churn.c): the
    result is the native run's. A freed communicator costs the MPI nothing
    until the next checkpoint lets go of its record; before, a duplicate
    of it kept until then used up the ids and the program's MPI_Comm_dup
    failed where the native one succeeds. (Open MPI's ids did not run out:
    test_as_many_communicators_as_natively restarts 500 there.)"""
    prog, args = churn[("comm_churn", "mpich")], ["3", "100", "2100"]
    job = as_natively_across_a_restart(prog, "mpich", args, args,
                                       f"PASS ranks=2 iterations=3 checks={2 * (3 + 2 * 2100 + 16)}\n",
                                       r"rank 1 iteration 1", tmp_path)
    # the 2100 freed ones left no records in the ledger (more than 96 bytes
    # each: slot, counts, key, members; 92 KiB stored in all here, 364 KiB
    # when each waited for a checkpoint's round to go)
    image = next(pathlib.Path(job.ck).glob("*/ckpt-000001/rank-00000.img"))
    sections = json.loads(job.stasis("inspect", "--json", image).stdout)["sections"]
    ledger = next(s for s in sections if s["name"] == "mem.200800000000")
    assert ledger["stored"] < 2100 * 96, ledger
    # above the lower half, no checkpoint, 16 freed right before
    # MPI_Finalize: no request left (MPICH's UCX warned of each, on
    # stdout, about 14 lines, when each freed one had a reduction pending)
    r = run_on(prog, "mpich", 2, ["0", "0", "10"], tmp_path)
    assert r.returncode == 0 and "PASS ranks=2 iterations=0 checks=72\n" in r.stdout \
        and "not returned to mpool" not in r.stdout + r.stderr, r.stdout + r.stderr


many = program_fixture("comm_many")


@pytest.mark.parametrize("lower,n", [("openmpi", 500), ("mpich", 2040)])
def test_as_many_communicators_as_natively(many, lower, n, tmp_path):
    """n dups of MPI_COMM_WORLD held at once, a checkpoint, SIGKILL and
    restart, then a reduction on each (comm_many.c): the native run's
    output. MPICH gives a program 2046 (2048 context ids); before, the
    lower half made a duplicate of each communicator to count its
    collectives on, and under MPICH the program's MPI_Comm_dup failed at
    about 1020. (Open MPI made 16000 here: 500 check its restart.) About
    15 s for MPICH, 10 s for Open MPI."""
    as_natively_across_a_restart(many[lower], lower, [str(n), "3000"], [str(n)],
                                 f"PASS ranks=2 comms={n} checks={4 * n}\n",
                                 rf"rank 1 made {n}", tmp_path)


def test_file_churn_mpich(churn, tmp_path):
    """1100 dup/free pairs, each with an MPI_File_open and MPI_File_close,
    natively and above MPICH's lower half (comm_churn.c): the file's own
    communicator goes at its close like a freed one. Before, retired with
    its duplicate until the next checkpoint, it used up MPICH's context
    ids with the pairs' ones (the rank died of SIGSEGV). About 3 s."""
    prog, want = churn[("comm_churn", "mpich")], "PASS ranks=2 iterations=0 checks=4432\n"
    for lower in (None, "mpich"):
        r = run_on(prog, lower, 2, ["0", "0", "1100", data_file(tmp_path)], tmp_path)
        assert r.returncode == 0 and want in r.stdout, r.stdout + r.stderr


held = program_fixture("comm_held")


def test_uncounted_communicator_refuses_the_checkpoint(held, tmp_path):
    """The members of the program's communicator cannot agree on its key
    (STASIS_FAULT=split.coll.dup: as when the MPI fails that first
    collective): its collectives go uncounted, so a checkpoint while the program
    holds it is refused in one line naming it, the job runs on, and once
    the program freed it a checkpoint, kill and restart ends as the native
    run does. Before, the checkpoint was taken without counting them."""
    prog, want = held["openmpi"], "PASS ranks=2 iterations=12 checks=24\n"
    native = run_on(prog, None, 2, ["12", "10"], tmp_path)
    assert native.returncode == 0 and want in native.stdout, native.stdout + native.stderr
    job = MpiJob(tmp_path)
    job.env["STASIS_FAULT"] = "split.coll.dup:1:fail"
    job.start(*launcher("openmpi", 2), prog, "12", "150")
    del job.env["STASIS_FAULT"]   # the job has it; not the restart
    job.lines_until(r"rank 0 iteration 1")
    r = job.stasis("checkpoint", "--dir", job.ck, check=False)
    assert r.returncode != 0, r.stdout
    # the program's communicator by its members, not the lower half's number
    assert re.fullmatch(r"stasis: checkpoint: checkpoint failed: rank [01]: no checkpoint while "
                        r"the program holds a communicator of 2 ranks: world ranks [01], [01] "
                        r"whose collectives the lower half cannot count \(.+\)\n", r.stderr), r.stderr
    job.lines_until(r"freed")
    job.checkpoint_kill_restart()
    rc, out, err = job.finish_job()
    assert rc == 0 and want in out and "FAIL" not in out, out + err


op_pending = program_fixture("op_pending")


@pytest.mark.parametrize("abi,lower,mode", [("openmpi", None, ""), ("openmpi", "openmpi", ""),
                                            ("mpich", "mpich", ""), ("openmpi", "openmpi", "free")])
def test_freed_operation_of_a_pending_reduction(op_pending, abi, lower, mode, tmp_path):
    """A user operation freed right after MPI_Iallreduce, and 65 others
    made before MPI_Wait (op_pending.c): the reduction still calls the
    freed one, natively and above a lower half. Before, the freed
    operation's trampoline slot went to a new operation, which the pending
    reduction then called (a sum of -1). "free": the request freed too
    (MPI_Request_free, which Open MPI allows and MPI-3.1 5.12 calls
    erroneous), the reduction completed while the ranks drive MPI after a
    barrier: the slot stays held while the freed request lives (a slot
    given up at the free made the sum -1), and no longer (66 rounds: held
    until the drain of a checkpoint, the 64 slots ran out and
    MPI_Op_create failed at round 63). About 4 s."""
    rounds = 66 if mode else 3
    r = run_on(op_pending[abi], lower, 2, [str(rounds)] + ([mode] if mode else []), tmp_path)
    assert r.returncode == 0 and f"PASS ranks=2 rounds={rounds} checks={4 * rounds}\n" \
        in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("lower", ["openmpi", "mpich"])
def test_rank_failing_in_a_round(held, lower, tmp_path):
    """Rank 1 cannot take part in the first round of collective counts
    (STASIS_FAULT=split.coll.round, as when it has no memory for its
    tallies): the checkpoint fails at once in one line that names rank 1
    and why, the job runs on, and the next checkpoint, kill and restart
    ends as the native run does. Before, rank 1 skipped the exchange and
    the other ranks waited in it for good. About 4 s each."""
    prog, want = held[lower], "PASS ranks=2 iterations=12 checks=24\n"
    job = MpiJob(tmp_path)
    job.env.update(STASIS_FAULT="split.coll.round:1:fail", STASIS_FAULT_RANK="1")
    job.start(*launcher(lower, 2), prog, "12", "150")
    del job.env["STASIS_FAULT"], job.env["STASIS_FAULT_RANK"]   # not the restart's
    job.lines_until(r"rank 0 iteration 1")
    r = job.stasis("checkpoint", "--dir", job.ck, check=False, timeout=60)
    assert r.returncode != 0, r.stdout
    assert re.fullmatch(r"stasis: checkpoint: checkpoint failed: rank [01]: rank 1 failed in a "
                        r"round of the collective counts: no memory for its tallies\n",
                        r.stderr), r.stderr
    job.checkpoint_kill_restart()
    rc, out, err = job.finish_job()
    assert rc == 0 and want in out and "FAIL" not in out, out + err


def test_a_round_tells_what_moved(many, tmp_path):
    """A round of collective counts carries the communicators whose count
    moved since the last checkpoint (comm_many.c: 300 dups, each checked
    with a reduction, then two checkpoints while the ranks nap): the
    first checkpoint's rounds tell of every dup, the second's of none.
    Before, every round told of every communicator of every rank (world
    size times communicators). About 6 s."""
    job = MpiJob(tmp_path)
    job.env["STASIS_LOG"] = "debug"
    job.start(*launcher("openmpi", 2), many["openmpi"], "300", "4000")
    job.lines_until(r"rank 1 made 300")
    job.checkpoint()
    job.checkpoint()
    rc, out, err = job.finish_job()
    assert rc == 0 and "PASS ranks=2 comms=300 checks=1200\n" in out, out + err
    for rank in (0, 1):
        moved = [int(m) for m in re.findall(rf"rank {rank}: a round of collective counts: "
                                             r"(\d+) of its communicators moved", out + err)]
        assert len(moved) >= 2 and moved[0] >= 300 and moved[-1] == 0, (rank, moved)

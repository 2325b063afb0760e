"""Faults after a move into a waiting spare (docs/coordinator.md, "Moving
a rank into a spare"), found by a review (issue 23): a move's cut is no
checkpoint (only the moving rank writes its image), so a recovery after
it starts from the checkpoint before, whose image of the moved rank the
transfer removed from the source: from the global tier, with the moved
rank launched on the target, never on the source; a second move takes no
moved rank's old process for a spare. Open MPI, comm_held.c. About 12 s
each. Needs root."""
import re
import time

import pytest

from cluster_common import (BASE, build_in_global, cluster, launcher, node_procs, sh,  # noqa: F401
                            ClusterJob)

ITERS = 40
SLEEP_MS = 100


@pytest.fixture(scope="module")
def progs(cluster):
    return build_in_global(["comm_held"])


def staged(job):
    job.env = {"STASIS_LOG": "info", "STASIS_STAGING": "on", "STASIS_LOCAL_DIR": f"{BASE}/local"}


def wait_global(job, name, timeout=30):
    end, line = time.time() + timeout, ""
    while time.time() < end and "global" not in line:
        line = "".join(ln for ln in job.stasis("ls", "--dir", job.ck).stdout.splitlines()
                       if ln.split()[:1] == [name])
        time.sleep(0.2)
    return line


def start(job, progs, spares=1, opts=" --recover auto", iters=ITERS):
    """comm_held.c, rank 0 on n1, rank 1 on n2, the spares on n3 (and n4)"""
    job.start(launcher("openmpi", "n1:1,n2:1,n3:1,n4:1", 2), progs[("comm_held", "openmpi")],
              iters, SLEEP_MS, opts=f"--spares {spares}{opts}")


def ends_well(job, recovered_from=None, iters=ITERS):
    """the program's PASS; recovered: once, from that checkpoint, with rank
    1 on n3 (where its image is), n2 not"""
    rc, out, err = job.finish(timeout=150)
    assert rc == 0, err[-4000:]
    assert f"PASS ranks=2 iterations={iters} checks={2 * iters}" in out, out
    if recovered_from:
        assert re.search(rf"stasis: recovery 1 of 3: .*; from {recovered_from}", err), err[-4000:]
        assert re.findall(r"rank 1 of 2 registered \(pid \d+ on (\S+)\)", err)[-1] == "n3", \
            err[-4000:]
    return err


def move(job, before=True):
    """rank 1 from n2 into the spare on n3, after a checkpoint that reached
    the global tier (before): that checkpoint's name"""
    job.lines_until(r"rank 0 iteration 3")
    name = job.checkpoint() if before else None
    if name:
        assert "global" in wait_global(job, name), job.stasis("ls", "--dir", job.ck).stdout
    r = job.stasis("migrate", "--dir", job.ck, "--node", "n2", timeout=120)
    if not r.stdout.endswith("; into spares\n"):
        out, err = job.kill()
        raise AssertionError(r.stdout + r.stderr + err[-3000:])
    return name


def test_the_moved_rank_killed_recovers_on_the_target(cluster, progs, tmp_path):
    """rank 1, moved into the spare on n3, is killed on its own: the
    recovery launches it on n3 (from the checkpoint before the move, its
    image from the global tier), not on n2"""
    job = ClusterJob(cluster, tmp_path)
    staged(job)
    sh("start-node", "n2", check=False)
    try:
        start(job, progs)
        name = move(job)
        status = job.stasis("status", "--dir", job.ck).stdout
        pid = re.search(r"(?:=|,)1:(\d+)@n3", status).group(1)
        cluster.exec("n3", f"kill -9 {pid}")
        ends_well(job, name)
    finally:
        job.kill()


def test_a_second_move_takes_no_old_process_for_a_spare(cluster, progs, tmp_path):
    """--spares 2 (on n3 and n4): rank 1 moves from n2 into n3's spare,
    then rank 0 from n1: n2, where rank 1's old process was (it ended),
    is no spare; rank 0 goes into n4's, and the job ends as an
    uninterrupted run"""
    job = ClusterJob(cluster, tmp_path)
    staged(job)
    try:
        start(job, progs, 2, "")
        move(job, before=False)
        r = job.stasis("migrate", "--dir", job.ck, "--node", "n1", timeout=120)
        assert re.fullmatch(r"migration: ranks 0 from n1 to n4, .*; into spares\n", r.stdout), \
            r.stdout + r.stderr
        status = job.stasis("status", "--dir", job.ck).stdout
        assert re.search(r"(?:=|,)0:\d+@n4", status) and re.search(r"(?:=|,)1:\d+@n3", status), \
            status
        assert "relaunched" not in ends_well(job)
    finally:
        job.kill()


def failed_move(job, progs, fault, said, iters=ITERS):
    """The staged job with fault armed, a checkpoint at level global, then
    `stasis migrate --node n2`: it fails in one line matching said; the
    checkpoint's name."""
    staged(job)
    job.env.update({"STASIS_FAULT": fault, "OMPI_MCA_mca_base_env_list": "STASIS_FAULT"})
    start(job, progs, iters=iters)
    job.lines_until(r"rank 0 iteration 3")
    name = job.checkpoint()
    assert "global" in wait_global(job, name), job.stasis("ls", "--dir", job.ck).stdout
    r = job.stasis("migrate", "--dir", job.ck, "--node", "n2", check=False, timeout=120)
    if not (r.returncode == 1 and r.stdout == "" and re.fullmatch(said, r.stderr)):
        raise AssertionError(r.stdout + r.stderr + job.kill()[1][-5000:])
    return name


def test_a_spare_that_dies_as_it_adopts_fails_the_migration(cluster, progs, tmp_path):
    """the spare that became rank 1 dies before it registers
    (split.spare.adopt): mpirun ends the job, and the client hears the
    migration failed, not the recovery's line as its success; the
    recovery then completes the job"""
    job = ClusterJob(cluster, tmp_path)
    try:
        name = failed_move(job, progs, "split.spare.adopt:1:kill",
                           r"stasis: migrate: migration: .*; automatic recovery takes over\n")
        ends_well(job, name)
    finally:
        job.kill()


def test_a_relink_failing_on_one_rank_ends_the_job_at_once(cluster, progs, tmp_path):
    """rank 0 cannot make its communicators again once every rank agreed
    to the move (split.move.relink): it says why in one line and ends, and
    the job with it (the others waited 600 s inside MPI, then as long
    again); the client hears the migration failed, and the job recovers
    from the checkpoint before the move"""
    job = ClusterJob(cluster, tmp_path)
    try:
        name = failed_move(job, progs, "split.move.relink:1:fail",
                           r"stasis: migrate: migration.*; automatic recovery takes over\n")
        rc, out, err = job.finish(timeout=150)
        assert rc == 0 and f"PASS ranks=2 iterations={ITERS} checks={2 * ITERS}" in out, err[-4000:]
        assert re.search(r"^stasis: lower half: rank 0: fault point split\.move\.relink; the move "
                         r"was agreed: the job ends$", err, re.M), err[-4000:]
        assert re.search(rf"stasis: recovery 1 of 3: .*; from {name}", err), err[-4000:]
    finally:
        job.kill()


def test_a_frozen_receiver_fails_the_move_to_automatic_recovery(cluster, progs, tmp_path):
    """the receiver on n3 stops (node.receive:1:stop, SIGSTOP) with rank
    1's image, small enough for the socket buffers, read whole: rank 1
    waits for its answer as long as checking that image may take (5 s),
    not 60 s; the migration fails to automatic recovery from the
    checkpoint before, and no receiver stays on n3 (it stayed, stopped)"""
    job = ClusterJob(cluster, tmp_path)
    try:
        name = failed_move(job, progs, "node.receive:1:stop",
                           r"stasis: migrate: migration of ranks 1 from n2 to n3 failed: .*the "
                           r"migration's receiver did not confirm the image within 5 s.*; "
                           r"automatic recovery from ckpt-\d+ takes over\n")
        assert node_procs(cluster, "n3", "stasis-node --receive") == ""
        rc, out, err = job.finish(timeout=150)
        assert rc == 0 and f"PASS ranks=2 iterations={ITERS} checks={2 * ITERS}" in out, \
            err[-4000:]
        assert re.search(rf"stasis: recovery 1 of 3: .*; from {name}", err), err[-4000:]
    finally:
        job.kill()


def test_a_receiver_its_node_agent_cannot_start_fails_the_move(cluster, progs, tmp_path):
    """n3's node agent starts the receiver (no remote shell), and cannot
    (node.agent.receive:1:fail): the migration fails in one line that says
    why, automatic recovery from the checkpoint before completes the job,
    and no receiver is left on n3"""
    job = ClusterJob(cluster, tmp_path)
    try:
        name = failed_move(job, progs, "node.agent.receive:1:fail",
                           r"stasis: migrate: migration of ranks 1 from n2 to n3 failed: the "
                           r"receiver on n3 did not start: the node agent on n3 cannot start the "
                           r"receiver: fault point node\.agent\.receive; automatic recovery from "
                           r"ckpt-\d+ takes over\n")
        assert node_procs(cluster, "n3", "stasis-node --receive") == ""
        rc, out, err = job.finish(timeout=150)
        assert rc == 0 and f"PASS ranks=2 iterations={ITERS} checks={2 * ITERS}" in out, \
            err[-4000:]
        assert re.search(rf"stasis: recovery 1 of 3: .*; from {name}", err), err[-4000:]
    finally:
        job.kill()


def local_only_checkpoint(job, progs):
    """the agents' copies to the global tier fail (node.copy): the job's
    first checkpoint stays at level local; its name"""
    job.env.update({"STASIS_FAULT": "node.copy:1:fail",
                    "OMPI_MCA_mca_base_env_list": "STASIS_FAULT"})
    start(job, progs)
    job.lines_until(r"rank 0 iteration 3")
    return job.checkpoint()


def test_no_move_into_spares_while_the_last_checkpoint_is_only_local(cluster, progs, tmp_path):
    """the checkpoint before the move never reached the global tier: a
    move would remove its only copy of rank 1's image (on n2), and a later
    failure would lose the job; the job is relaunched instead, its every
    image written, and rank 1 then killed on n3 recovers from that one"""
    job = ClusterJob(cluster, tmp_path)
    staged(job)
    try:
        before = local_only_checkpoint(job, progs)
        r = job.stasis("migrate", "--dir", job.ck, "--node", "n2", timeout=120)
        m = re.fullmatch(r"migration: ranks 1 from n2 to n3, .*; from (ckpt-\d+)\n", r.stdout)
        assert m and m.group(1) != before, r.stdout + r.stderr
        # relaunched: once its ranks registered again
        pid, end = None, time.time() + 60
        while not pid and time.time() < end:
            status = job.stasis("status", "--dir", job.ck).stdout
            pid = re.search(r"(?:=|,)1:(\d+)@n3", status) or time.sleep(0.2)
        if not pid:
            raise AssertionError(status + job.kill()[1][-5000:])
        cluster.exec("n3", f"kill -9 {pid.group(1)}")
        err = ends_well(job, m.group(1))
        assert f"migration: not into a spare ({before} is not in the global tier yet): the " \
            "job is relaunched" in err, err[-4000:]
    finally:
        job.kill()


def test_a_recovery_passes_over_a_checkpoint_whose_image_is_missing(cluster, progs, tmp_path):
    """rank 1's only copy of the last checkpoint is gone (removed from
    n2, never in the global tier): the first recovery's rank 1 says so and
    ends; the next one starts over, not from that checkpoint again"""
    job = ClusterJob(cluster, tmp_path)
    staged(job)
    try:
        name = local_only_checkpoint(job, progs)
        cluster.exec("n2", f"find {BASE}/local -path '*/{name}/rank-00001.img' -delete")
        status = job.stasis("status", "--dir", job.ck).stdout
        cluster.exec("n1", "kill -9 " + re.search(r"(?:=|,)0:(\d+)@n1", status).group(1))
        rc, out, err = job.finish(timeout=150)
        assert rc == 0 and f"PASS ranks=2 iterations={ITERS} checks={2 * ITERS}" in out, \
            err[-4000:]
        assert f"rank 1: no copy of its image of {name}: not in n2's local directory" in err, \
            err[-4000:]
        assert re.search(r"stasis: recovery 2 of 3: .*; from the start", err), err[-4000:]
        assert f"recovery: {name} passed over: a rank of a relaunch from it found no copy of " \
            "its image" in err, err[-4000:]
        # the ranks' word is this run's: it goes with it (it stayed, and a
        # later run's recovery passed over that checkpoint for it)
        assert not (job.ck / job.ck.name / "restart.missing").exists()
    finally:
        job.kill()


def test_a_source_agent_that_never_answers_fails_the_move(cluster, progs, tmp_path):
    """n2's node agent takes the MIGRATE that asks it to remove the job's
    directory once rank 1 moved, and answers nothing while it goes on
    (node.agent.migrate:1:fail; its heartbeats go on): the client waited
    for good (120 s, then blamed the target). Now the move fails once the
    bound for that answer passed (5 s and the image bytes at 64 MiB/s),
    in one line, and automatic recovery from the checkpoint before ends
    the job, leaving no node agent on n2. 80 iterations: the job runs
    past the bound (8 s after the move at the least); about 20 s"""
    job = ClusterJob(cluster, tmp_path)
    try:
        name = failed_move(job, progs, "node.agent.migrate:1:fail",
                           r"stasis: migrate: migration of ranks 1 from n2 to n3 failed: the node "
                           r"agent on n2 did not say within \d+ s that it removed the job's "
                           r"directory there; automatic recovery from ckpt-\d+ takes over\n",
                           iters=80)
        ends_well(job, name, iters=80)
        assert node_procs(cluster, "n2", "stasis-node") == ""
    finally:
        job.kill()


# last: it kills n2 (start-node brings it back for the next file)
def test_the_source_node_lost_after_a_move(cluster, progs, tmp_path):
    """the predicted fault comes true after the move: n2, where the moved
    rank's old process was (it ended; mpirun's orted stays), is killed;
    mpirun aborts for it, and the job recovers from the checkpoint before
    the move with rank 1 on n3"""
    job = ClusterJob(cluster, tmp_path)
    staged(job)
    try:
        start(job, progs)
        name = move(job)
        sh("kill-node", "n2")
        ends_well(job, name)
    finally:
        job.kill()
        sh("start-node", "n2", check=False)


"""Automatic recovery across the simulated cluster (docs/coordinator.md,
"Events and recovery policies"): `stasis run --recover auto` on head, a
host list with one spare node; a node killed while the job runs (its
processes killed, its cable unplugged: silence), and the job ends
unattended with the output of an uninterrupted run, relaunched from the
checkpoint with the spare in the lost node's place, the lost node unused.
Open MPI's mpirun exits by itself about a second after the loss; MPICH's
mpiexec hangs, and the coordinator finds the node by its agent's silence
and ends it. A rank killed alone (its node lives) under staging: every
rank back on its node, from that node's copy. An srun step in a
--no-kill allocation, relaunched on its third node. A spare that dies
while the job runs (Open MPI's mpirun ends the job, and cannot start
again with it): found dead, passed over. heatdis (libstasis, level
partner) losing a node: relaunched on the spare, it recovers from its
partner copies to the grid of an uninterrupted run; heatdis migrated
(stasis migrate: it stops at a checkpoint, its node cache moves, it goes
on). About 160 s. Needs root.

--max-restarts and --recover none are tests/split/test_recover.py: the
same paths, on one host."""
import re

import pytest

from cluster_common import BASE, BUILD, STASIS, build_in_global, cluster, launcher, sh, ClusterJob  # noqa: F401,E501

# p2p.c's iterations take 0.3 s: the node or rank is killed at iteration
# 5, where the other ranks wait for its messages, and the recovered job
# goes on from the checkpoint at 3 to its end. When a spare dies instead
# (no rank there), the ranks run on until mpirun ends the job: LONG_ITERS.
ITERS = 25
LONG_ITERS = 40
SLEEP_MS = 100


@pytest.fixture(scope="module")
def progs(cluster):
    return build_in_global(["p2p"])


@pytest.mark.parametrize("lower,hosts,n,victim,spare", [
    ("openmpi", "n1:1,n2:1,n3:1,n4:1", 3, "n2", "n4"),
    ("mpich", "n1,n3,n4", 2, "n3", "n4"),   # MPICH: 2 ranks (docs/cluster.md, UCX)
])
def test_a_node_killed_recovers_on_the_spare(cluster, progs, lower, hosts, n, victim, spare,
                                             tmp_path):
    job = ClusterJob(cluster, tmp_path)
    job.env = {"STASIS_LOG": "info"}
    try:
        job.start(launcher(lower, hosts, n), progs[("p2p", lower)], ITERS, SLEEP_MS,
                  job.no_sleep, opts="--recover auto")
        job.lines_until(r"rank 0 iteration 3")
        name = job.checkpoint()
        job.lines_until(r"rank 0 iteration 5")
        sh("kill-node", victim)
        job.events_over()   # the others wait for the lost rank's messages
        rc, out, err = job.finish(done=r"PASS .*" if lower == "mpich" else None)
        assert rc in ((0, None) if lower == "mpich" else (0,)), out + err
        assert f"PASS ranks={n} iterations={ITERS} messages=" in out, out + err
        lines = [ln for ln in err.splitlines() if ln.startswith("stasis: recovery")]
        assert len(lines) == 1 and re.fullmatch(
            rf"stasis: recovery 1 of 3: .*; from {name}; {victim} replaced by {spare}; "
            rf"\d+\.\d s", lines[0]), err
        # the relaunch's registrations come just before its line: none on the lost node
        hosts_after = re.findall(r"rank \d+ of \d+ registered \(pid \d+ on (\S+)\)",
                                 err.split(lines[0])[0])[-n:]
        assert victim not in hosts_after and spare in hosts_after, (hosts_after, err)
    finally:
        job.kill()   # the module's cluster goes down after its last test, the dead node too


def test_a_rank_killed_alone_restarts_from_the_node_local_copies(cluster, progs, tmp_path):
    """staging on n1 and n4: rank 1 SIGKILLed (its node lives); both ranks
    come back on their nodes, each from its node's copy of the checkpoint"""
    import os
    import signal
    import time
    from cluster_common import BASE
    job = ClusterJob(cluster, tmp_path)
    job.env = {"STASIS_LOG": "info", "STASIS_STAGING": "on", "STASIS_LOCAL_DIR": f"{BASE}/local"}
    try:
        job.start(launcher("openmpi", "n1:1,n4:1", 2), progs[("p2p", "openmpi")], ITERS,
                  SLEEP_MS, job.no_sleep, opts="--recover auto")
        job.lines_until(r"rank 0 iteration 3")
        name = job.checkpoint()
        job.lines_until(r"rank 0 iteration 5")
        end, victim = time.time() + 30, None
        while victim is None and time.time() < end:
            found = re.findall(r"(?:=|,)1:(\d+)@n4", job.stasis("status", "--dir", job.ck).stdout)
            victim = int(found[-1]) if found else None
        os.kill(victim, signal.SIGKILL)   # no PID namespace: the host reaches it
        job.events_over()   # rank 0 waits for rank 1's messages
        rc, out, err = job.finish()
        assert rc == 0 and f"PASS ranks=2 iterations={ITERS} messages=" in out, out + err
        lines = [ln for ln in err.splitlines() if ln.startswith("stasis: recovery")]
        assert len(lines) == 1 and re.fullmatch(
            rf"stasis: recovery 1 of 3: rank 1 \(pid {victim} on n4\) died: .*; from {name}; "
            rf"\d+\.\d s", lines[0]), err
        assert len(re.findall(r"reads its node-local copy", err)) == 2, err
    finally:
        job.kill()


def test_srun_step_relaunched_in_its_allocation_without_the_lost_node(cluster, progs, tmp_path):
    """`stasis run --recover auto -- srun` inside `salloc --no-kill` of 3
    nodes, the step on 2: the node of rank 1 killed; the coordinator lets
    Slurm end the step (when it marks the node down, 11-16 s here) and
    starts another with --exclude= of the lost node, on the allocation's
    third node"""
    job = ClusterJob(cluster, tmp_path)
    job.env = {"STASIS_LOG": "info"}
    for node in ("n2", "n3"):   # killed by the tests above
        sh("start-node", node, check=False)
        sh("wait-state", node, "^idle", 60, timeout=90, check=False)
    try:
        job.start("srun --mpi=pmix -N 2 -n 2", progs[("p2p", "openmpi")], ITERS, SLEEP_MS,
                  job.no_sleep, alloc="-N3 -n3 --no-kill -w n1,n2,n3", opts="--recover auto")
        job.lines_until(r"rank 0 iteration 3")
        name = job.checkpoint()
        job.lines_until(r"rank 0 iteration 5")
        found = re.findall(r"(?:=|,)1:\d+@(n\d)", job.stasis("status", "--dir", job.ck).stdout)
        victim = found[-1]
        sh("kill-node", victim)
        job.events_over()   # rank 0 waits for rank 1's messages
        rc, out, err = job.finish()
        assert rc == 0 and f"PASS ranks=2 iterations={ITERS} messages=" in out, out + err
        lines = [ln for ln in err.splitlines() if ln.startswith("stasis: recovery")]
        assert len(lines) == 1 and re.fullmatch(
            rf"stasis: recovery 1 of 3: .*; from {name}; srun --exclude={victim}; \d+\.\d s",
            lines[0]), err
        hosts_after = re.findall(r"rank \d+ of \d+ registered \(pid \d+ on (\S+)\)",
                                 err.split(lines[0])[0])[-2:]
        assert victim not in hosts_after, (hosts_after, err)
    finally:
        job.kill()


def bring_up(*nodes):
    """start the nodes that are down (other tests of the module kill
    nodes), then wait until mpirun starts a daemon on them: right after
    start-node the first launch may fail to (test_applevel_cluster.py)"""
    import time
    for node in nodes:
        if sh("exec", node, "true", check=False, timeout=30).returncode != 0:
            sh("start-node", node, timeout=180)
    for _ in range(10):
        r = sh("exec", "head", "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
               f"timeout 30 mpirun.openmpi --host {','.join(nodes)} -np {len(nodes)} true",
               check=False, timeout=60)
        if r.returncode == 0:
            return
        time.sleep(1)
    raise AssertionError(f"mpirun cannot start daemons on {nodes}: {r.stdout}\n{r.stderr}")


def test_a_spare_dead_before_its_agent_started_is_passed_over(cluster, progs, tmp_path):
    """ranks on n1 and n4, spares n2 and n3; n2 dies while the job runs:
    Open MPI's mpirun, which has a daemon on every node of its list, ends
    the job; the relaunch fails at once (no daemon on n2); the coordinator
    finds n2 dead through the remote shell and relaunches without it"""
    bring_up("n1", "n2", "n3", "n4")
    job = ClusterJob(cluster, tmp_path)
    job.env = {"STASIS_LOG": "info"}
    try:
        job.start(launcher("openmpi", "n1:1,n4:1,n2:1,n3:1", 2), progs[("p2p", "openmpi")],
                  LONG_ITERS, SLEEP_MS, opts="--recover auto")
        job.lines_until(r"rank 0 iteration 3")
        name = job.checkpoint()
        job.lines_until(r"rank 0 iteration 5")
        sh("kill-node", "n2")
        rc, out, err = job.finish()
        assert rc == 0 and f"PASS ranks=2 iterations={LONG_ITERS} messages=" in out, out + err
        assert re.search(r"warn: recovery: n2 does not answer \(ssh n2 true\): taken for lost",
                         err), err
        lines = [ln for ln in err.splitlines() if ln.startswith("stasis: recovery")]
        assert len(lines) == 1 and re.fullmatch(
            rf"stasis: recovery 2 of 3: .*; from {name}; n2 replaced by n3; \d+\.\d s",
            lines[0]), err
        hosts_after = re.findall(r"rank \d+ of \d+ registered \(pid \d+ on (\S+)\)",
                                 err.split(lines[0])[0])[-2:]
        assert sorted(hosts_after) == ["n1", "n4"], (hosts_after, err)
    finally:
        job.kill()


HEATDIS = BUILD / "examples" / "heatdis" / "heatdis.openmpi"
HEATDIS_SERIAL = BUILD / "examples" / "heatdis" / "heatdis.serial"
HEAT_ITERS, HEAT_EVERY = 800, 50


def heatdis_start(cluster, tmp_path, level, iterations=HEAT_ITERS, every=HEAT_EVERY):
    """heatdis under `stasis run --recover auto` on n1, n2, n3 (spare n4),
    and the grid of an uninterrupted run (heatdis.serial of the same rows:
    the grid does not depend on the decomposition): (job, reference)"""
    import subprocess
    if not HEATDIS.exists() or not HEATDIS_SERIAL.exists():
        pytest.skip("heatdis not built")
    bring_up("n1", "n2", "n3", "n4")
    grid = ["--cols", 64, "--iterations", iterations]
    ref = subprocess.run([str(HEATDIS_SERIAL), "--rows-per-rank", "96", *map(str, grid),
                          "--output", str(tmp_path / "ref.bin")], capture_output=True, text=True,
                         env={"STASIS_CONFIG": "/dev/null", "STASIS_GLOBAL_DIR": str(tmp_path),
                              "PATH": "/usr/bin:/bin"}, timeout=60)
    assert ref.returncode == 0, ref.stdout + ref.stderr
    job = ClusterJob(cluster, tmp_path)
    job.env = {"STASIS_LOG": "info"}
    job.name = job.dir.name   # libstasis's job: its node caches are the test's alone
    xs = {"STASIS_CONFIG": "/dev/null", "STASIS_GLOBAL_DIR": job.dir / "global",
          "STASIS_JOB": job.name, "STASIS_LOCAL_DIR": BASE / "local"}
    words = launcher("openmpi", "n1:1,n2:1,n3:1,n4:1", 3) + "".join(
        f" -x {k}={v}" for k, v in xs.items())
    job.start(words, HEATDIS, "--rows-per-rank", 32, *grid, "--checkpoint-every", every,
              "--level", level, "--output", "grid.bin", opts="--recover auto")
    return job, (tmp_path / "ref.bin").read_bytes()


def heatdis_ls(job):
    import subprocess
    return subprocess.run([str(STASIS), "ls", "--dir", str(job.dir / "global"), job.name],
                          capture_output=True, text=True, timeout=30).stdout


def heatdis_end(cluster, job):
    """every process of the job killed, its node caches removed"""
    import shutil
    job.kill()
    for node in ("n1", "n2", "n3", "n4"):
        shutil.rmtree(cluster.local(node) / node / job.name, ignore_errors=True)


def test_heatdis_losing_a_node_recovers_from_its_partner_copies(cluster, tmp_path):
    """heatdis (libstasis, level partner) on n1, n2, n3, spare n4: once a
    checkpoint has its partner copies, n2 is killed; the relaunch puts n4
    in its place and libstasis recovers rank 1 from its partner copy on n3;
    the grid is the bytes of an uninterrupted run"""
    import time
    job, reference = heatdis_start(cluster, tmp_path, "partner")
    try:
        end = time.time() + 60
        while time.time() < end and not re.search(r"level partner", heatdis_ls(job)):
            time.sleep(0.1)
        sh("kill-node", "n2")
        rc, out, err = job.finish()
        assert rc == 0 and "heatdis: done" in out, out + err
        assert "heatdis: restarted at iteration" in out, out + err
        assert (job.dir / "grid.bin").read_bytes() == reference, err
        lines = [ln for ln in err.splitlines() if ln.startswith("stasis: recovery")]
        assert len(lines) == 1 and re.fullmatch(
            r"stasis: recovery 1 of 3: .*; from ckpt-\d+ or older \(libstasis recovers the "
            r"newest it can verify\); n2 replaced by n4; \d+\.\d s", lines[0]), err
        assert re.search(r"rank 1: ckpt-\d+: .*asking the partner copies", err), err
    finally:
        heatdis_end(cluster, job)


def test_heatdis_migrated_stops_at_a_checkpoint_and_goes_on_from_the_moved_cache(cluster,
                                                                                 tmp_path):
    """`stasis migrate --node n2` of heatdis at level single: asked to stop
    (stasis_should_exit), it checkpoints and ends; n2's libstasis cache
    moves to n4, the job is relaunched with n4 in n2's place, and rank 1
    reads its image there (single: no other copy exists); the grid is the
    bytes of an uninterrupted run; nothing of the job is left on n2"""
    import time
    # long enough for the request to come before the end, loaded or not
    job, reference = heatdis_start(cluster, tmp_path, "single", iterations=2000)
    try:
        end = time.time() + 60
        # every rank registered, libstasis initialized (its rank 0 said so)
        while time.time() < end and ("ranks=3/3" not in job.stasis("status", "--dir", job.ck,
                                                                   check=False).stdout
                                     or not list(job.ck.glob("*/applevel"))):
            assert job.proc.poll() is None, f"the job ended first: {job.finish()}"
            time.sleep(0.1)
        r = job.stasis("migrate", "--dir", job.ck, "--node", "n2", check=False, timeout=120)
        assert r.returncode == 0 and re.fullmatch(
            r"migration: ranks 1 from n2 to n4, libstasis's node cache moved in \d+\.\d\d s; "
            r"from ckpt-\d+ or older \(libstasis recovers the newest it can verify\)\n",
            r.stdout), r.stdout + r.stderr
        rc, out, err = job.finish()
        assert rc == 0 and "heatdis: done" in out, out + err
        stopped = re.findall(r"^heatdis: stopped at iteration (\d+)$", out, re.M)
        assert stopped and f"heatdis: restarted at iteration {stopped[0]}\n" in out, out + err
        assert (job.dir / "grid.bin").read_bytes() == reference, err
        assert not (cluster.local("n2") / "n2" / job.name).exists(), "n2's cache stayed"
        assert any((cluster.local("n4") / "n4" / job.name).glob("ckpt-*/rank-00001.img"))
        assert not (job.dir / "global" / job.name / "halt").exists()
    finally:
        heatdis_end(cluster, job)


def test_heatdis_ending_before_it_sees_the_migration_is_not_run_again(cluster, tmp_path):
    """`stasis migrate` of heatdis that never checkpoints (so never calls
    stasis_should_exit) and comes to its own end: the halt file is still
    there, so the migration fails in one line and the job is not relaunched
    (it would have run again from its last checkpoint, its output twice)"""
    import time
    job, reference = heatdis_start(cluster, tmp_path, "single", iterations=1500, every=10 ** 6)
    try:
        end = time.time() + 60
        while time.time() < end and not list(job.ck.glob("*/applevel")):
            assert job.proc.poll() is None, f"the job ended first: {job.finish()}"
            time.sleep(0.1)
        r = job.stasis("migrate", "--dir", job.ck, "--node", "n2", check=False, timeout=120)
        assert r.returncode != 0 and r.stderr.endswith(
            "migration: the program ended by itself before it saw the request to stop\n"), \
            r.stdout + r.stderr
        rc, out, err = job.finish()
        assert rc == 0 and out.count("heatdis: done") == 1, out + err
        assert "restarted" not in out, out + err
        assert (job.dir / "grid.bin").read_bytes() == reference, err
        assert not (job.dir / "global" / job.name / "halt").exists()
    finally:
        heatdis_end(cluster, job)

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
again with it): found dead, passed over. About 130 s. Needs root.

--max-restarts and --recover none are tests/split/test_recover.py: the
same paths, on one host."""
import re

import pytest

from cluster_common import build_in_global, cluster, launcher, sh, ClusterJob  # noqa: F401

ITERS = 40
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
                  opts="--recover auto")
        job.lines_until(r"rank 0 iteration 3")
        name = job.checkpoint()
        job.lines_until(r"rank 0 iteration 5")
        sh("kill-node", victim)
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
                  SLEEP_MS, opts="--recover auto")
        job.lines_until(r"rank 0 iteration 3")
        name = job.checkpoint()
        job.lines_until(r"rank 0 iteration 5")
        end, victim = time.time() + 30, None
        while victim is None and time.time() < end:
            found = re.findall(r"(?:=|,)1:(\d+)@n4", job.stasis("status", "--dir", job.ck).stdout)
            victim = int(found[-1]) if found else None
        os.kill(victim, signal.SIGKILL)   # no PID namespace: the host reaches it
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
                  alloc="-N3 -n3 --no-kill -w n1,n2,n3", opts="--recover auto")
        job.lines_until(r"rank 0 iteration 3")
        name = job.checkpoint()
        job.lines_until(r"rank 0 iteration 5")
        found = re.findall(r"(?:=|,)1:\d+@(n\d)", job.stasis("status", "--dir", job.ck).stdout)
        victim = found[-1]
        sh("kill-node", victim)
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


def node_up(node):
    return sh("exec", node, "true", check=False, timeout=30).returncode == 0


def test_a_spare_dead_before_its_agent_started_is_passed_over(cluster, progs, tmp_path):
    """ranks on n1 and n4, spares n2 and n3; n2 dies while the job runs:
    Open MPI's mpirun, which has a daemon on every node of its list, ends
    the job; the relaunch fails at once (no daemon on n2); the coordinator
    finds n2 dead through the remote shell and relaunches without it"""
    for node in ("n1", "n2", "n3", "n4"):   # other tests of the module kill nodes
        if not node_up(node):
            sh("start-node", node, timeout=180)
    job = ClusterJob(cluster, tmp_path)
    job.env = {"STASIS_LOG": "info"}
    try:
        job.start(launcher("openmpi", "n1:1,n4:1,n2:1,n3:1", 2), progs[("p2p", "openmpi")],
                  ITERS, SLEEP_MS, opts="--recover auto")
        job.lines_until(r"rank 0 iteration 3")
        name = job.checkpoint()
        job.lines_until(r"rank 0 iteration 5")
        sh("kill-node", "n2")
        rc, out, err = job.finish()
        assert rc == 0 and f"PASS ranks=2 iterations={ITERS} messages=" in out, out + err
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

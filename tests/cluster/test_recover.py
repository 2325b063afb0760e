"""Automatic recovery across the simulated cluster (docs/coordinator.md,
"Events and recovery policies"): `stasis run --recover auto` on head, a
host list with one spare node; a node killed while the job runs (its
processes killed, its cable unplugged: silence), and the job ends
unattended with the output of an uninterrupted run, relaunched from the
checkpoint with the spare in the lost node's place, the lost node unused.
Open MPI's mpirun exits by itself about a second after the loss; MPICH's
mpiexec hangs, and the coordinator finds the node by its agent's silence
and ends it. About 60 s. Needs root.

A rank killed alone (its node lives), --max-restarts and --recover none
are tests/split/test_recover.py: the same paths, on one host."""
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

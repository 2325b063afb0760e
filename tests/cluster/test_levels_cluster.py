"""Levels partner and rs for transparent MPI jobs, and their restart after a
node's loss (issue 22, docs/levels.md): with staging on and `level =
partner` (or rs), the node agents copy each rank's staged image to another
node (or encode parity across nodes) after the job resumed; `stasis ls`
shows the level. A node killed and its local directory wiped, the global
copies of the images removed, the restart on a spare node rebuilds the lost
ranks' images from what the surviving nodes hold, checks them (chunk CRCs,
the image's id) and the job ends as an uninterrupted one does. Too many
nodes lost: the restart is refused in one line naming the ranks and an
older checkpoint that can be rebuilt.

One job of 3 ranks on n1..n3 per test, n4 the spare. Needs root."""
import re

import pytest

from cluster_common import BASE, ClusterJob, build_in_global, cluster, launcher, sh  # noqa: F401

ITERS = 40
SLEEP_MS = 100


@pytest.fixture(scope="module")
def progs(cluster):
    return build_in_global(["p2p"])


def staged_job(cluster, tmp_path, level):
    job = ClusterJob(cluster, tmp_path)
    job.env = {"STASIS_STAGING": "on", "STASIS_LOCAL_DIR": f"{BASE}/local", "STASIS_LOG": "info",
               "STASIS_LEVEL": level, "STASIS_GROUP_SIZE": "3", "STASIS_RS_PARITY": "1"}
    return job


def local_job(job):
    """the job's directory name in the node-local directories: <job>.<stage id>"""
    [sid] = job.ck.glob("*/stage.id")
    return f"{sid.parent.name}.{sid.read_text()[:16]}"


def ls_level(job, name):
    for line in job.stasis("ls", "--dir", job.ck).stdout.splitlines():
        if line.split()[:1] == [name]:
            m = re.search(r"level (\S+)", line)
            return m.group(1).rstrip(":") if m else None
    return None


def wipe(cluster, node):
    sh("kill-node", node, "--wipe")
    sh("start-node", node)


def drop_global_images(job, name):
    """the images' global copies go: only the nodes can give them back"""
    gone = list(job.ck.glob(f"*/{name}/rank-*.img"))
    assert gone, list(job.ck.glob("*/*"))
    for p in gone:
        p.unlink()


def run_to_level(job, lower, hosts, n, prog, level):
    job.start(launcher(lower, hosts, n), prog, ITERS, SLEEP_MS)
    job.lines_until(r"rank 0 iteration 3")
    return job.stasis("checkpoint", "--dir", job.ck, "--wait", level).stdout.strip()


# MPICH over UCX hangs at times in MPI_Finalize with 3 ranks across nodes
# (docs/cluster.md): its job has 2 ranks, n3 the spare
SETUPS = {"openmpi": ("n1:1,n2:1,n3:1", 3, "n1:1,n4:1,n3:1"), "mpich": ("n1,n2", 2, "n1,n3")}


@pytest.mark.parametrize("lower", ["openmpi", "mpich"])
def test_partner_node_lost_restart_on_a_spare(cluster, progs, lower, tmp_path):
    job = staged_job(cluster, tmp_path, "partner")
    hosts, n, spare = SETUPS[lower]
    try:
        name = run_to_level(job, lower, hosts, n, progs[("p2p", lower)], "partner")
        assert name == "ckpt-000001"
        # each node holds its rank's image and the partner copy of the
        # previous node's rank (a ring n1 -> n2 -> ... -> n1)
        nodes = [f"n{i}" for i in range(1, n + 1)]
        held = {nd: sorted(p.name for p in (cluster.local(nd) / local_job(job) / name).glob("*.img"))
                for nd in nodes}
        assert held == {nd: sorted([f"rank-{i:05d}.img", f"partner-{(i - 1) % n:05d}.img"])
                        for i, nd in enumerate(nodes)}, held
        job.stasis("checkpoint", "--dir", job.ck, "--wait", "global")
        assert ls_level(job, name) == "partner+global"
        job.kill()
        wipe(cluster, "n2")
        drop_global_images(job, name)
        job.restart(launcher(lower, spare, n))
        rc, out, err = job.finish(done=r"PASS .*" if lower == "mpich" else None)
        assert rc in ((0, None) if lower == "mpich" else (0,)), out + err
        assert f"PASS ranks={n} iterations={ITERS} messages=" in out, out + err
        assert "rank 0 iteration 0\n" not in out, out   # from the checkpoint
        assert re.search(r"rank 1 reads \S+/\.fetched-00001\.img", err), err
    finally:
        job.kill()

"""scripts/cluster.sh (docs/cluster.md): nodes with their own hostname,
address, /dev/shm and node-local directory, one shared global directory, a
real Slurm across them, ssh-like exec, a node killed whole (and wiped) and
started again, and nothing left behind by down.

Needs root."""
import pathlib
import re
import subprocess

from cluster_common import BASE, SCRIPT, Cluster, cluster, sh  # noqa: F401


def test_nodes_are_separate_hosts(cluster):
    for n in ["head"] + cluster.nodes:
        assert cluster.exec(n, "hostname").stdout.strip() == n
    assert cluster.exec("n1", "ssh -x n2 hostname").stdout.strip() == "n2"
    assert cluster.exec("n1", "ip route get 192.0.2.2", check=False).returncode != 0
    cluster.exec("n1", "echo x > /dev/shm/sts-probe")
    assert cluster.exec("n2", "test -e /dev/shm/sts-probe", check=False).returncode != 0
    cluster.exec("n1", "rm /dev/shm/sts-probe")


def test_node_local_and_global_directories(cluster):
    cluster.exec("n2", f"echo n2 > {BASE}/local/probe && echo all > {BASE}/global/probe")
    assert (cluster.local("n2") / "probe").read_text() == "n2\n"
    assert cluster.exec("n3", f"test -e {BASE}/local/probe", check=False).returncode != 0
    assert cluster.exec("n3", f"cat {BASE}/global/probe").stdout == "all\n"
    df = cluster.exec("n2", f"stat -f -c %T {BASE}/local").stdout.strip()
    assert df == "tmpfs", df


def test_slurm_runs_across_the_nodes(cluster):
    out = cluster.exec("head", "srun -N4 hostname | sort | paste -sd,").stdout.strip()
    assert out == "n1,n2,n3,n4"
    states = cluster.exec("head", "sinfo -h -N -o '%N %T'").stdout.split("\n")
    assert sorted(s for s in states if s) == [f"n{i} idle" for i in range(1, 5)]


def test_kill_node_wipe_and_start_node(cluster):
    (cluster.local("n3") / "img").write_text("staged")
    sh("kill-node", "n3", "--wipe")
    pids = subprocess.run(["ip", "netns", "pids", "sts-n3"], capture_output=True, text=True).stdout
    assert pids.strip() == ""
    assert list(cluster.local("n3").iterdir()) == []
    r = cluster.exec("n3", "true", check=False)
    assert r.returncode == 255 and r.stderr.strip() == "nodeexec: n3: node is down", r.stderr
    sh("start-node", "n3")
    sh("wait-state", "n3", "^idle", 60, timeout=90)
    assert cluster.exec("n3", "hostname").stdout.strip() == "n3"


def test_bad_input_is_one_line():
    r = sh("frobnicate", check=False)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0
    assert "unknown command 'frobnicate'" in r.stderr
    r = sh("kill-node", "n99", check=False)
    assert r.returncode == 1 and r.stderr.strip() == "cluster: kill-node: no node 'n99'"


def test_down_leaves_nothing(cluster):
    # a process of the host with its cwd in n1's node-local tmpfs (a shell
    # left there) keeps umount from working: down detaches the tmpfs and
    # says so in one line naming the process
    (cluster.local("n1") / "stale").write_text("x")
    holder = subprocess.Popen(["sleep", "60"], cwd=cluster.local("n1"))
    try:
        r = sh("down")
    finally:
        holder.kill()
        holder.wait()
    said = [ln for ln in r.stderr.splitlines() if ln.startswith("cluster:")]
    assert said == [f"cluster: node-local directory {cluster.local('n1')} is in use (pid "
                    f"{holder.pid} sleep): detached, its memory goes with them"], r.stderr
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not re.search(r"^sts-", netns, re.M), netns
    procs = "\n".join(ln for ln in subprocess.run(["ps", "-eo", "stat=,args="], capture_output=True,
                      text=True).stdout.splitlines() if not ln.startswith("Z"))  # PID 1 reaps late
    assert "sts-anchor" not in procs and "slurmd" not in procs and "munged" not in procs, procs
    mounts = open("/proc/self/mounts").read()
    assert str(BASE) not in mounts and "sts-local-" not in mounts, mounts
    assert not any(pathlib.Path(p).exists() for p in ("/sys/fs/cgroup/stasis-cluster",
                                                      "/sys/fs/cgroup/unified/stasis-cluster"))
    # Open MPI's session directories of the nodes (the modules before this
    # one killed jobs on them)
    left = [p for n in ["head"] + cluster.nodes for p in pathlib.Path("/tmp").glob(f"ompi.{n}.*")]
    assert not left, left
    sh("down")   # a second down is harmless
    # what a down that never ended (killed, timed out) leaves: n2's tmpfs
    # still mounted, twice (a second up without the lock), files in both
    # layers: up starts from empty node-local directories all the same
    for layer in ("lower", "upper"):
        subprocess.run(["mount", "-t", "tmpfs", "sts-stale", str(cluster.local("n2"))], check=True)
        (cluster.local("n2") / layer).write_text("x")
    # up without N: 4 nodes, whatever the last cluster had (a module with
    # CLUSTER_NODES = 7 ran before); the module's fixture still owns it
    (BASE / "nnodes").write_text("7\n")
    sh("up", timeout=180)
    assert (BASE / "nnodes").read_text().strip() == "4"
    assert sh("exec", "n5", "true", check=False).returncode != 0
    left = {n: sorted(p.name for p in cluster.local(n).iterdir()) for n in cluster.nodes}
    assert left == {n: [] for n in cluster.nodes}, left
    assert open("/proc/self/mounts").read().count(f" {cluster.local('n2')} ") == 1

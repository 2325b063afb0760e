"""libstasis across the simulated cluster's nodes (issue 21, item 5;
docs/applevel.md, Across nodes): examples/heatdis under Open MPI, launched
from head with `mpirun.openmpi --host ...` (nodeexec is ssh), each rank's
node named by its hostname (no STASIS_NODE), its cache in the node-local
directory of its node, its global tier in the shared global directory, its
progress links between the nodes' cluster addresses.

At PARTNER and RS level: once a checkpoint has all its copies (`stasis
ls`: `level partner`, `level rs`), n2 fails (`kill-node n2 --wipe`: its
processes and its local directory gone) while the job computes, the rest
of the job is killed, and the job restarts on the three survivors and a
spare: n2 back with an empty local directory, listed last (every rank
after rank 0 moves one node on, as in a new allocation), or head (Open
MPI's mpirun puts its own node first: rank 0 moves too). The final grid
must be the bytes of an uninterrupted run. With two ranks a node, RS
groups must hold one rank per node: losing n2's two ranks is then one loss
per group.

Every run has a timeout, and its processes are killed by pid at the end.
Needs root."""
import json
import os
import re
import signal
import subprocess
import time
import uuid

import pytest

from cluster_common import BASE, BUILD, SCRIPT, STASIS, cluster, sh  # noqa: F401

HEATDIS = BUILD / "examples" / "heatdis" / "heatdis.openmpi"
LOCAL = BASE / "local"          # a node's node-local directory, inside the node
ROOT_OK = "export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; "
ALL_NODES = ["head", "n1", "n2", "n3", "n4"]
ADDRESS = {"head": "10.78.0.1", "n1": "10.78.0.11", "n2": "10.78.0.12", "n3": "10.78.0.13",
           "n4": "10.78.0.14"}      # docs/cluster.md

# One global grid of 256 x 256 for 4 ranks of 64 rows or 8 of 32: the grid
# does not depend on the decomposition (docs/heatdis.md), the residual does.
COLS, ITERATIONS, EVERY = 256, 1000, 50
TIMEOUT = 240                   # seconds for one launch
GONE = 30                       # seconds the job gets to end by itself after a node died
CRASH_MARKERS = ("Segmentation fault", "core dumped", "AddressSanitizer", "runtime error:")
CKPT_LINE = re.compile(r"^\s*ckpt-(\d+)\s+(?:COMPLETE|CURRENT)\s.*\blevel (\S+)\s*$", re.M)


def grid(ranks):
    return ["--rows-per-rank", 256 // ranks, "--cols", COLS, "--iterations", ITERATIONS]


def pids_naming(text):
    """pids of the processes whose command line contains text (any node:
    the cluster has no PID namespaces)"""
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    found.append(int(d))
        except OSError:
            pass
    return found


class Run:
    def __init__(self, rc, out, err):
        self.rc, self.out, self.err = rc, out, err

    def __repr__(self):
        return f"rc={self.rc}\nstdout:\n{self.out[-6000:]}\nstderr:\n{self.err[-6000:]}"

    @property
    def restarted_at(self):
        found = re.findall(r"^heatdis: restarted at iteration (\d+)$", self.out, re.M)
        assert len(found) <= 1, self
        return int(found[0]) if found else None

    @property
    def done(self):
        m = re.search(r"^heatdis: done iterations=(\d+) residual=(\S+)$", self.out, re.M)
        return (int(m.group(1)), m.group(2)) if m else None

    def nodes(self):
        """{rank: node} from the library's info lines"""
        return {int(r): n for r, n in re.findall(r"info: rank (\d+)/\d+ on node (\S+),", self.err)}


class HeatdisJob:
    """One heatdis job (its name, its directory in the global directory)
    launched from head any number of times: a later launch restarts it."""

    def __init__(self, cluster):
        self.c = cluster
        self.dir = BASE / "global" / f"applevel-{uuid.uuid4().hex[:10]}"
        self.dir.mkdir(parents=True)
        self.name = self.dir.name
        self.global_dir = self.dir / "global"
        # every process of the job names the directory: kill() finds them
        (self.dir / "heatdis").symlink_to(HEATDIS)
        self.proc = None
        self.launches = 0

    def start(self, hosts, nranks, *args, env=None):
        assert self.proc is None
        self.launches += 1
        self.out = self.dir / f"out.{self.launches}"
        self.err = self.dir / f"err.{self.launches}"
        xs = {"STASIS_CONFIG": "/dev/null", "STASIS_GLOBAL_DIR": self.global_dir,
              "STASIS_LOCAL_DIR": LOCAL, "STASIS_JOB": self.name, "STASIS_LOG": "info",
              **(env or {})}
        words = " ".join(f"-x {k}={v}" for k, v in xs.items())
        cmd = (f"cd {self.dir}; {ROOT_OK}exec timeout -s KILL {TIMEOUT + 30} mpirun.openmpi "
               f"--host {hosts} -np {nranks} {words} {self.dir}/heatdis "
               + " ".join(map(str, args)))
        with open(self.out, "w") as out, open(self.err, "w") as err:
            self.proc = subprocess.Popen([str(SCRIPT), "exec", "head", cmd], stdout=out,
                                         stderr=err, start_new_session=True)

    def result(self):
        return Run(self.proc.returncode if self.proc else None, self.out.read_text(errors="replace"),
                   self.err.read_text(errors="replace"))

    def wait(self, timeout=TIMEOUT):
        """the launch's Run once it ended; killed after timeout (rc None)"""
        try:
            self.proc.wait(timeout=timeout)
            r = self.result()
        except subprocess.TimeoutExpired:
            self.kill()
            r = self.result()
            r.rc = None
        self.proc = None
        for marker in CRASH_MARKERS:
            assert marker not in r.out + r.err, f"{marker!r}: {r}"
        return r

    def kill(self):
        """SIGKILL of every process of the job, on every node, by pid"""
        if self.proc:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for _ in range(20):
            pids = pids_naming(str(self.dir))
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.2)
        if self.proc:
            self.proc.wait(timeout=30)

    def ls(self):
        r = subprocess.run([STASIS, "ls", "--dir", str(self.global_dir), self.name],
                           capture_output=True, text=True, timeout=60)
        return r.stdout if r.returncode == 0 else ""

    def wait_level(self, level, at_least=2, timeout=120):
        """the number of the newest checkpoint `stasis ls` shows at level,
        once it is at least at_least; the job must still be running"""
        end = time.time() + timeout
        while time.time() < end:
            assert self.proc.poll() is None, f"the job ended first: {self.result()}"
            done = [int(n) for n, lvl in CKPT_LINE.findall(self.ls()) if lvl == level]
            if done and max(done) >= at_least:
                return max(done)
            time.sleep(0.1)
        self.kill()
        raise AssertionError(f"no checkpoint at level {level} within {timeout} s: "
                             f"{self.ls()}\n{self.result()}")

    def start_to_level(self, hosts, nranks, args, level):
        """start, then wait_level(level). Once more from scratch when Open
        MPI's own TCP transport hung connecting its ranks ("failed to TCP
        connect to a peer MPI process ... Operation now in progress": an
        upstream issue of Open MPI 4.1.x on loaded hosts, open-mpi/ompi
        #10734 and #11508; seen once in a whole-suite run, the job hung
        before its first checkpoint)"""
        for attempt in (1, 2):
            self.start(hosts, nranks, *args)
            try:
                return self.wait_level(level)
            except AssertionError as e:
                if attempt == 2 or "failed to TCP connect to a peer MPI process" not in str(e):
                    raise
            print("start_to_level: Open MPI's TCP connection hung; launching once more")
            self.kill()
            self.proc = None
            subprocess.run(["rm", "-rf", str(self.global_dir)], check=False)
            for node in ALL_NODES:
                subprocess.run(["rm", "-rf", str(self.cache(node))], check=False)

    def info(self, ckpt):
        return json.loads((self.global_dir / self.name / ckpt / "checkpoint.json").read_text())

    def cache(self, node):
        """the job's cache on node, as the host sees it"""
        return self.c.local(node) / node / self.name

    def cleanup(self):
        self.kill()
        for node in ALL_NODES:
            subprocess.run(["rm", "-rf", str(self.cache(node))], check=False)
        subprocess.run(["rm", "-rf", str(self.dir)], check=False)


def node_up(node):
    r = sh("exec", node, "true", check=False, timeout=30)
    return r.returncode == 0


def start_n2():
    """start-node n2, then wait until mpirun starts a daemon there: three
    times, with other suites loading the machine, the first 4-node launch
    right after start-node failed with "ORTE was unable to reliably start
    one or more daemons" (n2's daemon could not connect to head's mpirun);
    not reproduced on an idle machine, never seen after this probe"""
    sh("start-node", "n2", timeout=180)
    for attempt in range(10):
        r = sh("exec", "head", f"{ROOT_OK}timeout 30 mpirun.openmpi --host n2 -np 1 hostname",
               check=False, timeout=60)
        if r.returncode == 0 and r.stdout.split()[-1:] == ["n2"]:
            if attempt:
                print(f"start_n2: mpirun reached n2 at attempt {attempt + 1}")
            return
        time.sleep(1)
    raise AssertionError(f"mpirun cannot start a daemon on n2: {r.stdout}\n{r.stderr}")


@pytest.fixture
def job(cluster):
    j = HeatdisJob(cluster)
    try:
        yield j
    finally:
        j.cleanup()
        if not node_up("n2"):
            start_n2()


@pytest.fixture(scope="module")
def reference(cluster):
    """(grid bytes, done) of an uninterrupted run of 4 ranks on n1..n4"""
    j = HeatdisJob(cluster)
    try:
        j.start("n1,n2,n3,n4", 4, *grid(4), "--output", "ref.bin")
        r = j.wait()
        assert r.rc == 0 and r.done and r.done[0] == ITERATIONS, r
        assert r.restarted_at is None, r
        data = (j.dir / "ref.bin").read_bytes()
        assert len(data) == 256 * COLS * 8, r
        return data, r.done
    finally:
        j.cleanup()


def kill_n2_and_the_job(job, cluster):
    """n2 fails with its local directory; the job ends by itself (Open
    MPI's mpirun loses its daemon there) or is killed"""
    sh("kill-node", "n2", "--wipe")
    assert not any(cluster.local("n2").iterdir()), "kill-node --wipe left files"
    try:
        job.proc.wait(timeout=GONE)
    except subprocess.TimeoutExpired:
        pass
    job.kill()
    crashed = job.wait(timeout=10)
    assert crashed.done is None, f"the job finished before n2 died: {crashed}"
    assert not pids_naming(str(job.dir)), "processes of the job survived"
    return crashed


@pytest.mark.parametrize("ranks_per_node,level,link", [(2, "partner", None), (2, "rs", "eth0")])
def test_nodes_links_and_copies_are_the_cluster_s(cluster, job, ranks_per_node, level, link):
    """node names from the hostnames, links at the nodes' cluster
    addresses (link_address unset, or an interface name), each rank's image
    in its own node's local directory, a partner copy in the next node's,
    rs parity with its rank"""
    n = 4 * ranks_per_node
    env = {"STASIS_LOG": "debug", **({"STASIS_LINK_ADDRESS": link} if link else {})}
    job.start(",".join(f"n{i}:{ranks_per_node}" for i in range(1, 5)), n,
              "--rows-per-rank", 256 // n, "--cols", COLS, "--iterations", 200,
              "--checkpoint-every", EVERY, "--level", level, env=env)
    r = job.wait()
    assert r.rc == 0 and r.done is not None, r
    nodes = r.nodes()
    want = {rank: f"n{rank // ranks_per_node + 1}" for rank in range(n)}
    assert nodes == want, r
    links = dict((int(k), a) for k, a in
                 re.findall(r"debug: rank (\d+): progress link on ([\d.]+):\d+", r.err))
    assert links == {rank: ADDRESS[node] for rank, node in want.items()}, r

    last = sorted(p.name for p in (job.global_dir / job.name).glob("ckpt-*"))[-1]
    assert job.info(last)["nodes"] == [want[k] for k in range(n)]
    assert re.search(rf"{last}\s+CURRENT\s.*\blevel {level}\s*$", job.ls(), re.M), job.ls()
    ring = ["n1", "n2", "n3", "n4"]
    for rank, node in want.items():
        held = {f.name for f in (job.cache(node) / last).iterdir()}
        assert f"rank-{rank:05d}.img" in held, (node, held)
        if level == "partner":
            # the p-th rank of a node sends to the p-th rank of the next node
            nxt = ring[(ring.index(node) + 1) % 4]
            there = {f.name for f in (job.cache(nxt) / last).iterdir()}
            assert f"partner-{rank:05d}.img" in there, (nxt, there)
            assert f"partner-{rank:05d}.img" not in held
        else:
            assert f"rs-{rank:05d}.img" in held, (node, held)
    # nothing of the job anywhere else than its nodes' local directories
    assert not job.cache("head").exists()


RESTARTS = {
    # n2 comes back with an empty local directory, listed last: ranks 1..3
    # each run one node on (rank 1 where its partner copy is)
    "n2-back-last": ("n1,n3,n4,n2", True),
    # head as the spare: mpirun places rank 0 on its own node, first
    "head-spare": ("n1,n3,n4,head", False),
}


# Each level once and each restart once: the ranks' placement comes from
# the hostnames whatever the level, and rs with n2 back in its place is
# test_two_ranks_a_node_rs_group_loses_one_rank_per_node's too.
@pytest.mark.parametrize("level,restart", [("partner", "n2-back-last"), ("rs", "head-spare")])
def test_node_lost_mid_run_restart_on_survivors_and_a_spare(cluster, job, reference, level,
                                                            restart):
    ref, ref_done = reference
    args = [*grid(4), "--checkpoint-every", EVERY, "--level", level, "--output", "out.bin"]
    first = job.start_to_level("n1,n2,n3,n4", 4, args, level)
    crashed = kill_n2_and_the_job(job, cluster)
    assert crashed.nodes() == {0: "n1", 1: "n2", 2: "n3", 3: "n4"}, crashed
    assert crashed.restarted_at is None, crashed

    hosts, n2_back = RESTARTS[restart]
    if n2_back:
        start_n2()
    job.start(hosts, 4, *args)
    again = job.wait()
    assert again.rc == 0 and again.done is not None, again
    moved = again.nodes()
    assert sorted(moved.values()) == sorted(hosts.split(",")), again
    assert any(moved[k] != crashed.nodes()[k] for k in (0, 2, 3)), \
        f"no surviving rank moved: {moved}"
    # not older than the checkpoint seen with all its copies; a newer one
    # whose copies were under way when n2 died may have been skipped
    assert again.restarted_at is not None and again.restarted_at >= first * EVERY, \
        f"restarted before ckpt-{first:06d}: {again}"
    lost = [k for k, node in crashed.nodes().items() if node == "n2"]
    how = "asking the partner copies" if level == "partner" else "rebuilding from its rs group"
    assert any(f"rank {k}: ckpt-" in line and how in line
               for k in lost for line in again.err.splitlines()), again
    assert (job.dir / "out.bin").read_bytes() == ref, f"the grid differs: {again}"
    assert again.done == ref_done, again
    if n2_back:
        assert any(job.cache("n2").glob("ckpt-*/rank-*.img")), "n2's cache not used again"


def test_two_ranks_a_node_rs_group_loses_one_rank_per_node(cluster, job, reference):
    """8 ranks, 2 a node, rs groups of 4 with parity 1: each group holds
    one rank of every node, so n2's two ranks are one loss in each"""
    ref, _ = reference
    hosts = "n1:2,n2:2,n3:2,n4:2"
    args = [*grid(8), "--checkpoint-every", EVERY, "--level", "rs", "--output", "out.bin"]
    first = job.start_to_level(hosts, 8, args, "rs")
    crashed = kill_n2_and_the_job(job, cluster)
    assert sorted(k for k, n in crashed.nodes().items() if n == "n2") == [2, 3], crashed
    start_n2()
    job.start(hosts, 8, *args)
    again = job.wait()
    assert again.rc == 0 and again.done is not None, again
    assert again.restarted_at is not None and again.restarted_at >= first * EVERY, again
    for k in (2, 3):
        assert re.search(rf"rank {k}: ckpt-\d+: .*rebuilding from its rs group", again.err), again
    assert (job.dir / "out.bin").read_bytes() == ref, f"the grid differs: {again}"


def test_link_address_naming_no_interface_fails_init_in_one_line(cluster, job):
    job.start("n1,n2", 2, "--iterations", 10, env={"STASIS_LINK_ADDRESS": "nosuch0"})
    r = job.wait(timeout=60)
    assert r.rc != 0 and r.done is None, r
    assert ("heatdis: rank 0: stasis_init: rank 0: link_address nosuch0: neither an IPv4 "
            "address nor an interface of this node with one") in r.err, r

"""The scale harness at CI size (docs/scale.md): 4,096 simulated ranks on 64
simulated nodes, each node a real stasis-node, under the real `stasis
run` coordinator. Every rank registers; a checkpoint is established with
every rank's image, recorded by the node agents (one FILES record a
node); a rank that dies during the next checkpoint fails it
in one line naming the rank, the previous checkpoint staying the one a
restart takes; a node agent killed between checkpoints takes its 64
ranks with it, and the coordinator says so (STATUS, `stasis status
--json`'s lost ranks, the next checkpoint's message); so do two more,
the second the one that took the first's place in the coordinator's
table. About 10 s on 2 cores. A DONE line the agent cannot read fails
its checkpoint (8 ranks, under a second each), and so does a rank that
cannot park (counted on its node's board, its reason on its socket). A node whose rank
numbers do not fit a migration's lines is refused in one line. The
coordinator's connections to its agents send each line at once
(TCP_NODELAY, read on a copy of its descriptor).

Environment: STASIS_BIN, STASIS_BUILD."""
import ctypes
import errno
import json
import os
import re
import signal
import socket
import subprocess
import time

import pytest

import scale_harness as h

NODES, PPN = 64, 64
TCP_ESTABLISHED = 1               # tcp_info's tcpi_state
SIZE = NODES * PPN
FAIL_RANK = 1234                  # on sim00019
LOST_NODE = 33                    # ranks 2112..2175


@pytest.fixture
def job(tmp_path):
    j = h.SimJob(tmp_path, NODES, PPN, env={"SCALE_FAIL_RANK": str(FAIL_RANK),
                                             "SCALE_FAIL_CKPT": "2"})
    yield j
    j.kill()


def checkpoints(job):
    """name -> `stasis ls --json`'s entry"""
    r = subprocess.run([h.STASIS, "ls", "--json", "--dir", str(job.ck)], capture_output=True,
                       text=True, env=job.env, timeout=60)
    assert r.returncode == 0, r.stderr
    return {c["name"]: c for j in json.loads(r.stdout)["jobs"] for c in j["checkpoints"]}


def running(pid):
    """pid runs (a zombie does not)"""
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def agent_pids(job):
    """host -> pid of every node agent the launcher started"""
    lines = (job.dir / "tmp/agents").read_text().split("\n")
    return {w[0]: int(w[1]) for w in (x.split() for x in lines) if w}


def sockets_of(pid):
    """pid's socket descriptors, each a socket of ours on a copy of it
    (pidfd_getfd, root): that process's own, whatever else the machine
    holds"""
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(pid)
    out = []
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if not os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:["):
                    continue
            except OSError:
                continue   # closed since the listing
            copy = libc.syscall(438, pidfd, int(fd), 0)   # pidfd_getfd
            if copy < 0 and ctypes.get_errno() == errno.EBADF:
                continue
            assert copy >= 0, os.strerror(ctypes.get_errno())
            out.append(socket.socket(fileno=copy))
    finally:
        os.close(pidfd)
    return out


def tcp_links(pid):
    """{(local address, peer address): socket} of pid's established TCP
    connections. Not from /proc/net/tcp: read while other processes open
    and close connections (a benchmark's, their TIME_WAIT sockets), it
    lists some sockets twice"""
    out = {}
    for s in sockets_of(pid):
        if s.family == socket.AF_INET and \
                s.getsockopt(socket.SOL_SOCKET, socket.SO_PROTOCOL) == socket.IPPROTO_TCP and \
                s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] == TCP_ESTABLISHED:
            out[(s.getsockname(), s.getpeername())] = s
        else:
            s.close()
    return out


def tcp_nodelay(coord, agents):
    """host -> TCP_NODELAY of each of the coordinator's connections to that
    host's node agent (agents: host -> pid), matched end to end"""
    ends = {}
    for host, pid in agents.items():
        for (local, _), s in tcp_links(pid).items():
            ends[local] = host
            s.close()
    out = {}
    for (_, peer), s in tcp_links(coord).items():
        if peer in ends:
            out.setdefault(ends[peer], []).append(s.getsockopt(socket.IPPROTO_TCP,
                                                                socket.TCP_NODELAY))
        s.close()
    return out


def until(what, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        got = what()
        if got:
            return got
        time.sleep(0.05)
    return what()


def test_thousands_of_ranks_a_rank_and_a_node_lost(job):
    job.start()
    job.wait_registered(0, timeout=120)
    st = job.status()
    assert st["registered"] == f"{SIZE}/{SIZE}", st
    agents = agent_pids(job)
    assert len(agents) == NODES and all(running(p) for p in agents.values())
    # the coordinator sends each line to an agent at once: with Nagle's
    # algorithm one that followed a line the agent had not answered
    # (STREAM after WRITE) waited about 40 ms for its delayed ACK
    links = tcp_nodelay(job.coord_pid(), agents)
    assert links == {host: [1] for host in agents}, links

    # every rank parks, writes its image, resumes: established
    ok, name, _, _ = job.checkpoint()
    assert ok and name == "ckpt-000001", name
    ev = job.ckpt_events(name, SIZE)
    assert sum(e["ranks"] for e in ev) == SIZE, ev
    assert all(e["parked"] == e["ranks"] == e["done"] and e["verdict"] == "RESUME" for e in ev), ev
    images = sorted(p.name for p in (job.ck / h.JOB / name).glob("rank-*.img"))
    assert images == [f"rank-{r:05d}.img" for r in range(SIZE)]
    # their records: one FILES record a node, appended by its agent
    # (docs/coordinator.md "Records a node"), every image listed once
    index = (job.ck / h.JOB / "index").read_text().splitlines()
    files = [json.loads(x.split(" ", 3)[3]) for x in index if '"op":"FILES"' in x]
    assert len(files) == NODES, len(files)
    assert sorted(f[0] for r in files for f in r["files"]) == images
    assert not [x for x in index if '"op":"FILE"' in x and '"rank-' in x]

    # rank FAIL_RANK closes its connection when CHECKPOINT reaches it
    ok, why, _, _ = job.checkpoint()
    assert not ok
    assert re.fullmatch(rf"checkpoint failed: rank {FAIL_RANK} \(pid \d+ on sim00019\) ended during "
                        r"the checkpoint: its connection to the node agent on sim00019 closed "
                        r"without a goodbye \(killed, or crashed\)", why), why
    ev = job.ckpt_events("ckpt-000002", SIZE - 1)
    assert sum(e["ranks"] for e in ev) == SIZE - 1, ev
    assert all(e["verdict"] == "RESUME failed" for e in ev), ev
    listed = checkpoints(job)
    assert listed["ckpt-000001"]["current"] and listed["ckpt-000002"]["state"] == "FAILED", listed
    st = job.status()
    assert st["registered"] == f"{SIZE - 1}/{SIZE}", st

    # a node lost between checkpoints: its agent killed, its ranks with it
    host = f"sim{LOST_NODE:05d}"
    os.kill(agents[host], signal.SIGKILL)
    gone = until(lambda: job.status()["registered"] == f"{SIZE - 1 - PPN}/{SIZE}")
    assert gone, job.status()
    # `stasis status --json`: the lost ranks are listed (as many as fit), each
    # rank FAIL_RANK or one of the lost node's
    r = subprocess.run([h.STASIS, "status", "--json", "--dir", str(job.ck)], capture_output=True,
                       text=True, env=job.env, timeout=60)
    assert r.returncode == 0, r.stderr
    [st] = [j["coordinator"] for j in json.loads(r.stdout)["jobs"]]
    assert st["lost"] and st["nodes"], st
    assert all((x["rank"], x["host"]) == (FAIL_RANK, "sim00019") or
               (x["host"] == host and x["rank"] // PPN == LOST_NODE) for x in st["lost"]), st["lost"]
    assert {x["host"] for x in st["lost"]} == {"sim00019", host}, st["lost"]
    ok, why, _, _ = job.checkpoint()
    assert not ok
    first = LOST_NODE * PPN
    assert why.startswith(f"checkpoint failed: {SIZE - 1 - PPN} of {SIZE} ranks of the job are "
                          f"registered; rank {FAIL_RANK} (pid "), why
    assert re.search(rf"; rank {first} \(pid \d+ on {host}\), {first + 1} .*, \.\.\.: died with "
                     rf"its node agent on {host} \(pid {agents[host]}\), whose connection "
                     r"closed", why), why
    listed = checkpoints(job)   # refused before it began
    assert sorted(listed) == ["ckpt-000001", "ckpt-000002"] and listed["ckpt-000001"]["current"]

    # the coordinator's table of agents in STATUS order: the first one's
    # agent killed, the last takes its place (and its epoll event must
    # follow it there); that one killed in turn goes too, its ranks with it
    def first_node():
        host, _, pid = job.status()["nodes"].split(",")[0].partition(":")
        return host, int(pid)

    left = SIZE - 1 - PPN
    for _ in range(2):
        host, pid = first_node()
        os.kill(pid, signal.SIGKILL)
        left -= PPN
        assert until(lambda: job.status()["registered"] == f"{left}/{SIZE}"), job.status()
        assert host not in job.status()["nodes"], (host, job.status())

    # the coordinator ends: every agent of the job goes with it
    job.kill()
    assert until(lambda: not [p for p in agents.values() if running(p)], 30), \
        [p for p in agents.values() if running(p)]


@pytest.mark.parametrize("tail", ["rank-00005.img 412 xyz 1", "rank-00005.img 412 0badc0de1 1",
                                  "rank-00005.img 412 0badc0de 2"])
def test_a_done_line_the_agent_cannot_read_fails_that_checkpoint(tmp_path, tail):
    """A DONE line naming its image in another form than `DONE <regions>
    <pages> <file> <size> <crc> <0|1>` (the agent reads it by hand, not
    with sscanf): that checkpoint fails in one line quoting it, the next
    one is established. 8 ranks on 2 nodes, about 2 s."""
    line = f"DONE 0 0 {tail}"
    job = h.SimJob(tmp_path, 2, 4, env={"SCALE_BAD_DONE_RANK": "5", "SCALE_BAD_DONE_LINE": line})
    try:
        job.start()
        job.wait_registered(0, timeout=60)
        ok, why, _, _ = job.checkpoint()
        assert not ok
        assert why == f"checkpoint failed: rank 5: a DONE line the node agent on sim00001 cannot " \
                      f"read: {line}", why
        job.ckpt_events("ckpt-000001", 8)
        ok, name, _, _ = job.checkpoint()
        assert ok and name == "ckpt-000002", name
        listed = checkpoints(job)
        assert listed["ckpt-000001"]["state"] == "FAILED" and listed["ckpt-000002"]["current"]
        # the coordinator killed: its agents end, and the simulated ranks
        # with them, though an agent's last line (RESUME) and its close
        # reach a rank together (a worker waited for ever on 3 of some 30
        # such runs when it stopped at the line)
        workers = {int(w.split(":")[1].split("@")[0]) for w in job.status()["ranks"].split(",")}
        job.kill()
        assert until(lambda: not [p for p in workers if running(p)], 30), \
            [p for p in workers if running(p)]
    finally:
        job.kill()


def test_a_rank_that_cannot_park_fails_that_checkpoint_with_its_reason(tmp_path):
    """The ranks are told CHECKPOINT on their node's board and count
    themselves parked there (docs/coordinator.md, "Stopping a node's ranks
    at once"); one that cannot park counts itself and says why on its
    socket: that checkpoint fails in one line quoting it, whether its count
    or its line reaches the agent first, and the next one is established.
    8 ranks on 2 nodes, about 1 s."""
    job = h.SimJob(tmp_path, 2, 4, env={"SCALE_PARK_FAIL_RANK": "6"})
    try:
        job.start()
        job.wait_registered(0, timeout=60)
        ok, why, _, _ = job.checkpoint()
        assert not ok
        assert why == "checkpoint failed: rank 6: 1 thread(s) of the program did not stop " \
                      "within 10 s (simulated)", why
        ev = job.ckpt_events("ckpt-000001", 8)
        assert sum(e["parked"] for e in ev) == 7 and sum(e["failed"] for e in ev) == 1, ev
        ok, name, _, _ = job.checkpoint()
        assert ok and name == "ckpt-000002", name
        ev = job.ckpt_events(name, 8)
        assert all(e["parked"] == e["ranks"] == e["done"] and e["verdict"] == "RESUME"
                   for e in ev), ev
    finally:
        job.kill()


def test_a_node_of_more_ranks_than_a_migration_names_is_refused(tmp_path):
    """200 ranks on one node: their numbers do not fit the migration's
    lines (MIGRATE, MOVE), so `stasis migrate` refuses in one line instead
    of moving some of them (it cut the list). About 1 s."""
    job = h.SimJob(tmp_path, 1, 200)
    try:
        job.start()
        job.wait_registered(0, timeout=60)
        ok, why, _, _ = job.request("MIGRATE sim00000 -", timeout=30)
        assert not ok and why == "node sim00000 runs more ranks than a migration moves (their " \
                                 "numbers take at most 398 characters)", why
    finally:
        job.kill()

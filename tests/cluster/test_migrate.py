"""Migration and predicted faults across the simulated cluster
(docs/coordinator.md, "Migration"): `stasis migrate` moves a node's ranks
of a running job (staging on) to a spare: the job stops at a checkpoint,
the images go from the source node's agent straight to the target node's
local directory (its tmpfs), the job goes on with the new placement and
its output is an uninterrupted run's; after a relaunch nothing of the job
stays on the source node; after a move into a spare, no file, and no
process but the launcher's daemon under Open MPI (the rank's old process
ended), and under MPICH exactly the rank's old process, holding nothing
of the program's memory but its stack (its UCX endpoint must answer the
others' MPI_Finalize), and its parent hydra_pmi_proxy, both gone once the
job ended by itself. A fault injected in the transfer (node.migrate) hands over
to --recover auto, and without it (the source agent killed) the job goes
on where it was; `stasis predict` with a bound no migration can meet
checkpoints instead, and when the node then fails the job recovers from
that checkpoint. With --spares 1 a rank moves into the spare waiting on
the target instead, and nothing is relaunched (MPICH's case, and one
under Open MPI, and one refused that takes the relaunch). About 100 s
(each case 7-18 s). Needs root."""
import ctypes
import json
import os
import pathlib
import re
import struct
import subprocess
import time

import pytest

from cluster_common import (BASE, build_in_global, cluster, launcher, node_procs, sh,  # noqa: F401
                            ClusterJob)

ITERS = 40
SLEEP_MS = 100


@pytest.fixture(scope="module")
def progs(cluster):
    return build_in_global(["p2p", "comms", "comm_held"])


def staged(job, extra=None):
    job.env = {"STASIS_LOG": "info", "STASIS_STAGING": "on", "STASIS_LOCAL_DIR": f"{BASE}/local"}
    job.env.update(extra or {})


def uninterrupted(out, n, checks="messages="):
    """every iteration of rank 0 once, in order, and the PASS of n ranks"""
    its = [int(m) for m in re.findall(r"^rank 0 iteration (\d+)$", out, re.M)]
    assert its == list(range(len(its))) and len(its) >= ITERS - 1, out
    assert f"PASS ranks={n} iterations={ITERS} {checks}" in out, out


def watch(path):
    """an inotify watch of what is created in the directory path (its
    descriptor, for created())"""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_NONBLOCK)
    assert fd >= 0 and libc.inotify_add_watch(fd, str(path).encode(), 0x100 | 0x80) >= 0, \
        os.strerror(ctypes.get_errno())   # IN_CREATE | IN_MOVED_TO
    return fd


def created(fd):
    """the names created in the watched directory since watch()"""
    names = []
    while True:
        try:
            buf = os.read(fd, 65536)
        except BlockingIOError:
            break
        i = 0
        while i < len(buf):
            _, mask, _, n = struct.unpack_from("iIII", buf, i)
            if mask & (0x100 | 0x80):
                names.append(buf[i + 16:i + 16 + n].rstrip(b"\0").decode())
            i += 16 + n
    os.close(fd)
    return names


UPPER = (0x10000, 0x201000000000)   # the upper half's range (split_format.h)


def upper_maps(pid):
    """the lines of /proc/PID/maps in the upper half's range (the simulated
    nodes share the host's PIDs)"""
    lines = pathlib.Path(f"/proc/{pid}/maps").read_text().splitlines()
    return [ln for ln in lines if UPPER[0] <= int(ln.split("-")[0], 16) < UPPER[1]]


def parent(pid):
    """the parent's pid of process pid (field 4 of /proc/PID/stat)"""
    stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2:].split()[1]


def open_files(pid):
    """the paths of the files process pid holds open (its descriptors that
    are no pipe, socket or anonymous object)"""
    fds = pathlib.Path(f"/proc/{pid}/fd")
    links = [os.readlink(fd) for fd in fds.iterdir()]
    return sorted(ln for ln in links if ln.startswith("/"))


def agents_gone(cluster, node):
    """Whether no node agent (stasis-node) runs on node, waited for: the
    job's agent there ends once its ranks left"""
    return gone(cluster, node, ["stasis-node"])


def gone(cluster, node, patterns, wait=60):
    """Whether no process matching one of patterns runs on node, waited for
    at most wait s"""
    end = time.time() + wait
    while any(node_procs(cluster, node, p) for p in patterns):
        if time.time() > end:
            return False
        time.sleep(0.5)
    return True


def local_files(cluster, node):
    """every path in the node's local directory (stage directories, node
    agents' sockets, locks and logs)"""
    r = subprocess.run(["find", str(cluster.local(node))], capture_output=True, text=True)
    return set(r.stdout.splitlines())


@pytest.mark.parametrize("lower,hosts,n,source,spare,ask,spares", [
    # a prediction with time enough migrates the same way, by a relaunch
    # even with a spare waiting (a move would leave the old process on the
    # node about to fail); n4 keeps a slot for the spare
    ("openmpi", "n1:1,n2:1,n3:1,n4:1", 2, "n2", "n3",
     ["predict", "--node", "n2", "--within", "60s"], 1),
    # with a spare rank waiting on n3, into it (no relaunch)
    ("mpich", "n1,n2,n3", 2, "n2", "n3", ["migrate", "--node", "n2"], 1),
])
def test_a_nodes_ranks_migrate_while_the_job_runs(cluster, progs, lower, hosts, n, source, spare,
                                                   ask, spares, tmp_path):
    job = ClusterJob(cluster, tmp_path)
    staged(job)
    before = local_files(cluster, source)
    try:
        job.start(launcher(lower, hosts, n), progs[("p2p", lower)], ITERS, SLEEP_MS, job.no_sleep,
                  opts=f"--spares {spares}" if spares else "")
        job.lines_until(r"rank 0 iteration 3")
        assert local_files(cluster, source) - before, "the job left nothing to move"
        into = spares and ask[0] == "migrate"
        old = re.search(rf"(?:=|,)1:(\d+)@{source}", job.stasis("status", "--dir", job.ck).stdout)
        prog = pathlib.Path(progs[("p2p", lower)]).name
        assert any(ln.endswith(prog) for ln in upper_maps(old.group(1))), old.group(1)
        r = job.stasis(ask[0], "--dir", job.ck, *ask[1:], timeout=120)
        assert re.fullmatch(rf"migration: ranks 1 from {source} to {spare}, \d+\.\d MiB node to "
                            rf"node in \d+\.\d\d s; from ckpt-\d+{'; into spares' if into else ''}\n",
                            r.stdout), r.stdout + r.stderr
        # while the job runs: relaunched, nothing of the job is left on the
        # source. Moved into a spare (MPICH over UCX), exactly two
        # processes stay there until the job's end (docs/coordinator.md,
        # "A moved rank's old process"): the rank's old process, whose UCX
        # endpoint every other process's MPI_Finalize flushes, and its
        # parent, Hydra's proxy, which mpiexec's last PMI barrier needs;
        # the job's node agent ended
        daemon = "orted" if lower == "openmpi" else "hydra_pmi_proxy"
        stays = [old.group(1)] if into else []
        left = (node_procs(cluster, source, job.dir.name), node_procs(cluster, source, daemon),
                agents_gone(cluster, source))
        assert [ln.split()[0] for ln in left[0].splitlines()] == stays and \
            len(left[1].splitlines()) == len(stays) and left[2], left
        if into:
            assert parent(old.group(1)) == left[1].split()[0], left
            # of the program's memory it holds nothing but its one thread's
            # stack, and no file of the node's local directory is open in it
            kept = upper_maps(old.group(1))
            assert len(kept) <= 1 and not any(ln.split()[4] != "0" for ln in kept), kept
            held = open_files(old.group(1))
            assert not [f for f in held if f.startswith((f"{BASE}/local", f"{BASE}/nodes"))], held
        name = re.search(r"from (ckpt-\d+)", r.stdout).group(1)
        # the image came to the target's memory (its tmpfs), not through the
        # global tier (its node-local copy read, below); into a spare, a cut
        # no restart can use, it goes once the spare restored it
        # (this job's directory: <local_dir>/<job>.<stage id>, docs/split.md;
        # the previous case's relaunch left its own ckpt-000001 there)
        job_name = pathlib.Path(progs[("p2p", lower)]).name
        stage_id = (job.ck / job_name / "stage.id").read_text().strip()
        mine = cluster.local(spare) / f"{job_name}.{stage_id}"
        assert (mine / name / "rank-00001.img").exists() != into, r.stdout
        assert not (job.ck / job.ck.name / name / "rank-00001.img").exists()
        job.events_over()
        rc, out, err = job.finish(done=r"PASS .*" if lower == "mpich" else None)
        assert rc in ((0, None) if lower == "mpich" else (0,)), out + err
        uninterrupted(out, n)
        if rc == 0:
            # both ended with the job (one that hung in MPI_Finalize, UCX
            # issue 8738, was killed: rc None)
            assert gone(cluster, source, [job.dir.name, daemon]), source
        hosts_after = set(dict(re.findall(r"rank (\d+) of \d+ registered \(pid \d+ on (\S+)\)",
                                          err)).values())
        assert source not in hosts_after and spare in hosts_after, (hosts_after, err)
        # every rank from a node-local copy (the migrated one from the copy
        # that came); into a spare, only the migrated one restarts
        assert len(re.findall(rf"reads its node-local copy \S+/{name}/rank-", err)) == \
            (1 if into else n), err
        # the node agents' directory of this user may stay, empty: not the job's
        left = {p for p in local_files(cluster, source) - before
                if not re.search(r"/stasis-node\.\d+$", p)}
        assert left == set(), left
    finally:
        job.kill()


@pytest.mark.parametrize("prog,checks,moved,pml", [
    ("comm_held", f"checks={2 * ITERS}", True, "ob1"),
    # over UCX (here on TCP and shared memory), whose MPI_Finalize has a
    # fence of its own: the old process stays, unmapped, to the job's end
    ("comm_held", f"checks={2 * ITERS}", True, "ucx"),
    # it frees communicators every iteration: refused, relaunched
    ("comms", f"checks={2 * ITERS * 22 + ITERS}", False, "ob1"),
])
def test_a_rank_moves_into_a_waiting_spare_without_a_relaunch(cluster, progs, prog, checks, moved,
                                                              pml, tmp_path):
    """--spares 1 (docs/coordinator.md, "Moving a rank into a spare"): rank
    1's image goes to n3, where the spare restores it and becomes rank 1;
    rank 0 keeps its process and makes its communicator (comm_held.c's
    duplicate of MPI_COMM_WORLD, whose collectives go on) again over the
    new world, nothing is relaunched, and the output is an uninterrupted
    run's; a checkpoint after it works. A program holding a communicator
    that it freed and another member still holds (comms.c) is refused in
    one log line and takes the relaunch. Into the spare, rank 0 writes no
    image: only the moving rank does, straight to n3 (nothing of it on
    n2's disk, refused or not). Open MPI (MPICH's case, p2p.c
    with its pending receives: the first test's). About 15 s each. With
    node.no_rank armed, a node agent that no rank reached yet gives up at
    once, as it does after 300 s: n3's, whose node holds the spare only,
    must not (it did: a move 5 minutes into a job failed). Over pml/ucx
    the old process stays, and the job ends (it hung in every process's
    MPI_Finalize: UCX's own fence waited for the process that left)."""
    job = ClusterJob(cluster, tmp_path)
    staged(job, {"STASIS_FAULT": "node.no_rank:1:fail",
                 "OMPI_MCA_mca_base_env_list": "STASIS_FAULT", "OMPI_MCA_pml": pml})
    if pml == "ucx":
        job.env.update({"OMPI_MCA_pml_ucx_devices": "any", "OMPI_MCA_pml_ucx_tls": "any"})
    before_files, before_n1 = local_files(cluster, "n2"), local_files(cluster, "n1")
    try:
        # the spare on n3; n4 keeps a slot for it when a relaunch puts n3 in
        # n2's place (docs/coordinator.md, "Spare ranks")
        job.start(launcher("openmpi", "n1:1,n2:1,n3:1,n4:1", 2), progs[(prog, "openmpi")], ITERS,
                  SLEEP_MS, opts="--spares 1")
        job.lines_until(r"rank 0 iteration 3")
        before = re.findall(r"(?:=|,)0:(\d+)@n1", job.stasis("status", "--dir", job.ck).stdout)
        # rank 1's image streams to n3 as it is written: nothing of it is
        # created in n2's directory of the job (a checkpoint made it). That
        # checkpoint in the global tier first: a move into a spare waits for
        # that, and the job is relaunched before (docs/coordinator.md), every
        # rank writing its image on its node (it did under load)
        first = job.stasis("checkpoint", "--dir", job.ck, "--wait", "global").stdout.strip()
        assert re.fullmatch(r"ckpt-\d+", first), first
        stage = next(pathlib.Path(p).parents[1] for p in local_files(cluster, "n2")
                     if p.endswith(f"/{first}/rank-00001.img"))
        fd = watch(stage)
        r = job.stasis("migrate", "--dir", job.ck, "--node", "n2", timeout=120)
        assert created(fd) == [], stage
        assert re.fullmatch(r"migration: ranks 1 from n2 to n3, \d+\.\d MiB node to node in "
                            rf"\d+\.\d\d s; from ckpt-\d+{'; into spares' if moved else ''}\n",
                            r.stdout), r.stdout + r.stderr
        name = re.search(r"from (ckpt-\d+)", r.stdout).group(1)
        end, status = time.time() + 30, ""
        while time.time() < end and not re.search(r"(?:=|,)1:\d+@n3", status):
            status = job.stasis("status", "--dir", job.ck).stdout   # (relaunch: coming)
        assert re.search(r"(?:=|,)1:\d+@n3", status) and "@n2" not in status, status
        # rank 0 is the same process: nothing was relaunched
        assert before and bool(re.search(rf"(?:=|,)0:{before[0]}@n1", status)) == moved, \
            (before, status)
        # no file of the job on n2, and no process: rank 1's old one ended
        # (Open MPI over ob1, told orte_allowed_exit_without_sync; over UCX
        # it stays); mpirun's daemon stays while the job runs, moved
        # (relaunched, n2 is not in the job)
        left = {p for p in local_files(cluster, "n2") - before_files
                if not re.search(r"/stasis-node\.\d+$", p)}
        assert left == set(), left
        left = node_procs(cluster, "n2", job.dir.name), node_procs(cluster, "n2", "orted")
        assert bool(left[0]) == (pml == "ucx") and bool(left[1]) == moved, left
        # relaunched, n3 keeps rank 1's copy of the checkpoint; into the
        # spare, the cut's image went once restored
        n3 = [p for p in local_files(cluster, "n3") if p.endswith(f"/{name}/rank-00001.img")]
        assert bool(n3) != moved, n3
        # into the spare only the moving rank wrote its image: rank 0 only
        # drained, and the cut is no checkpoint (relaunched: both wrote)
        n1 = local_files(cluster, "n1") - before_n1
        assert any(p.endswith(f"/{name}/rank-00000.img") for p in n1) != moved, n1
        listed = job.stasis("ls", "--dir", job.ck).stdout
        assert bool(re.search(rf"^ +{name} +FAILED .*only the moved ranks' images", listed,
                              re.M)) == moved, listed
        # the checkpoint protocol over the communicators made again
        assert job.checkpoint() != name
        rc, out, err = job.finish()
        assert rc == 0, out + err
        uninterrupted(out, 2, checks)
        assert "stasis: recovery" not in err, err
        if moved:
            assert "relaunched" not in err, err
            assert re.search(r"stasis: migration: ranks 1 from n2 to n3, .*; into spares; "
                             r"\d+\.\d s\n", err), err
        else:
            assert re.search(r"info: migration: not into a spare \(rank \d freed a communicator "
                             r"some member still holds\): the job is relaunched\n", err), err
    finally:
        job.kill()


def test_a_fault_mid_migration_hands_over_to_automatic_recovery(cluster, progs, tmp_path):
    job = ClusterJob(cluster, tmp_path)
    staged(job, {"STASIS_FAULT": "node.migrate:1:fail",
                 "OMPI_MCA_mca_base_env_list": "STASIS_FAULT"})
    try:
        job.start(launcher("openmpi", "n1:1,n2:1,n3:1", 2), progs[("p2p", "openmpi")], ITERS,
                  SLEEP_MS, opts="--recover auto")
        job.lines_until(r"rank 0 iteration 3")
        r = job.stasis("migrate", "--dir", job.ck, "--node", "n2", check=False, timeout=120)
        assert r.returncode == 1 and re.fullmatch(
            r"stasis: migrate: migration of ranks 1 from n2 to n3 failed: .*fault point "
            r"node\.migrate.*; automatic recovery from (ckpt-\d+) takes over\n", r.stderr), \
            r.stdout + r.stderr
        name = re.search(r"from (ckpt-\d+) takes over", r.stderr).group(1)
        rc, out, err = job.finish()
        assert rc == 0, out + err
        uninterrupted(out, 2)
        lines = [ln for ln in err.splitlines() if ln.startswith("stasis: recovery")]
        assert len(lines) == 1 and re.fullmatch(
            rf"stasis: recovery 1 of 3: migration of ranks 1 from n2 to n3 failed: .*; from "
            rf"{name}; \d+\.\d s", lines[0]), err
    finally:
        job.kill()


def test_without_recovery_a_failed_migration_lets_the_job_go_on(cluster, progs, tmp_path):
    """--recover none: a migration whose checkpoint fails (the ranks cannot
    write their images) is refused, and the receiver started on the target
    meanwhile is gone; then the source agent killed mid-transfer: the
    others resume at the checkpoint, the source's rank runs on without its
    agent"""
    job = ClusterJob(cluster, tmp_path)
    staged(job, {"STASIS_FAULT": "split.rank.write:1:fail,node.migrate:1:kill",
                 "OMPI_MCA_mca_base_env_list": "STASIS_FAULT"})
    try:
        job.start(launcher("openmpi", "n1:1,n2:1,n3:1", 2), progs[("p2p", "openmpi")], ITERS,
                  SLEEP_MS, job.no_sleep)
        job.lines_until(r"rank 0 iteration 3")
        r = job.stasis("migrate", "--dir", job.ck, "--node", "n2", check=False, timeout=120)
        assert r.returncode == 1 and re.fullmatch(
            r"stasis: migrate: migration: the checkpoint failed: .*split\.rank\.write.*\n",
            r.stderr), r.stdout + r.stderr
        left = cluster.exec("n3", "pgrep -af '[s]tasis-node --receive' || true").stdout.strip()
        assert left == "", left
        r = job.stasis("migrate", "--dir", job.ck, "--node", "n2", check=False, timeout=120)
        assert r.returncode == 1 and re.fullmatch(
            r"stasis: migrate: migration of ranks 1 from n2 to n3 failed: the node agent on n2 "
            r".*; the job goes on where it was\n", r.stderr), r.stdout + r.stderr
        job.events_over()
        rc, out, err = job.finish()
        assert rc == 0, out + err
        uninterrupted(out, 2)
        assert "stasis: recovery" not in err, err
        # the job's log says it, not only the client
        assert re.search(r"^stasis: migration of ranks 1 from n2 to n3 failed: the checkpoint "
                         r"failed: .*split\.rank\.write", err, re.M), err[-4000:]
    finally:
        job.kill()


def test_a_prediction_too_short_to_migrate_checkpoints_then_recovers(cluster, progs, tmp_path):
    job = ClusterJob(cluster, tmp_path)
    staged(job)
    try:
        job.start(launcher("openmpi", "n1:1,n2:1,n3:1", 2), progs[("p2p", "openmpi")], ITERS,
                  SLEEP_MS, job.no_sleep, opts="--recover auto")
        job.lines_until(r"rank 0 iteration 3")
        bad = job.stasis("migrate", "--dir", job.ck, "--node", "n4", check=False)
        assert bad.returncode == 1 and re.fullmatch(
            r"stasis: migrate: node n4 runs no rank of the job \(its ranks run on n[12], n[12]\)\n",
            bad.stderr), bad.stderr
        r = job.stasis("predict", "--dir", job.ck, "--node", "n2", "--within", "1s")
        assert re.fullmatch(r"checkpoint ckpt-\d+ \(migrating n2's ranks would take about "
                            r"\d+\.\d s, more than the 1\.0 s predicted: checkpoint now\)\n",
                            r.stdout), r.stdout + r.stderr
        name = r.stdout.split()[1]
        # the fault comes once the staged checkpoint reached the global tier
        end = time.time() + 60
        while time.time() < end and not any(
                k["name"] == name and k["level"] == "global"
                for j in json.loads(job.stasis("ls", "--dir", job.ck, "--json").stdout)["jobs"]
                for k in j["checkpoints"]):
            time.sleep(0.5)
        sh("kill-node", "n2")
        job.events_over()   # rank 0 waits for rank 1's messages
        rc, out, err = job.finish()
        assert rc == 0, out + err
        assert f"PASS ranks=2 iterations={ITERS} messages=" in out, out + err
        lines = [ln for ln in err.splitlines() if ln.startswith("stasis: recovery")]
        assert len(lines) == 1 and re.fullmatch(
            rf"stasis: recovery 1 of 3: .*; from {name}; n2 replaced by n3; \d+\.\d s",
            lines[0]), err
    finally:
        job.kill()


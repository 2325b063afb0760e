#!/usr/bin/env python3
"""bench/recovery: automatic recovery of a transparent MPI job on the
simulated cluster (docs/coordinator.md, "Events and recovery policies").
Not a timed test.

4 ranks of bench/mpi/ckptmem.c under Open MPI on n1..n4, n5 the spare
(`mpirun --host n1:1,...,n5:1 -np 4`), MIB MiB of incompressible data a
rank, staging on, `stasis run --recover auto` with heartbeat_timeout
--heartbeat ms. Once a checkpoint reached level global, n2 is killed
(scripts/cluster.sh kill-node: its processes at once, its cable
unplugged): the coordinator stops the job and relaunches it with n5 in
n2's place, the survivors reading their node-local copies, n5 the global
copy of n2's rank.

  detect_ms    kill-node until the coordinator's first failure event
               (its STASIS_LOG=info line "event: node lost|rank lost|
               launcher ended", timed as it arrives)
  recovery_s   kill-node until every rank computes again (its "RESUMED
               rank K"), detection included, 64 MiB a rank
  recovery_s_<MIB>  the same for each size given
  first_event_<MIB> which event came first (node lost: the heartbeats)
  migrate_vs_copy  `stasis migrate --node n2 --to n5` (64 MiB a rank, or
               the first size), from its start on head, until the migrated
               rank computes again ("RESUMED rank 1"), over a plain TCP copy
               of its image from n2's local directory to n5's (python,
               sendfile, timed inside the sender)
  migrate_client_start_s  the simulated cluster's remote shell (scripts/
               cluster.sh exec: bash, nsenter, bash) until the client
               starts on head; not in the figures above
  migration_downtime_s  the same request until every rank computes again:
               the others park at the migration's checkpoint and are
               resumed once rank 1 is in n5's spare (the coordinator's
               "migration: the ranks that stay resumed"), or relaunched
               with it (docs/coordinator.md, "Migration")
  migrate_path "spare": `stasis run --spares 1` keeps a spare rank waiting
               on n5 and rank 1 moves into it; the same figures with the
               suffix _relaunch come from a second job without spares
               (migrate_path_relaunch "relaunch")
  migrate_moved_s  (spare path) from the checkpoint established until
               every rank computes again: the transfer, the spare's
               restore, the communicators made again
  migrate_copy_s, migrated_s  the two times of the ratio
  migrate_transfer_s  the images' transfer alone, agent to receiver (the
               coordinator's "node to node in" figure)
  migrate_checkpoint_s  the request until the migration's checkpoint is
               established (its "event: checkpoint established"): every
               rank's image written on its node; into a spare, until every
               rank parked and the moving rank's image written ("migration:
               the moving ranks parked and written")
  migrate_stopped_s  (relaunch path) from there until the relaunch is made ("migration:
               relaunched"): the receiver started, the transfer, the
               source's directory removed, every rank stopped
  migrate_relaunch_s  (relaunch path) from there until every rank computes again: the
               launcher, MPI_Init, the images read, the restore
  migrate_phases_ms  (spare path) the coordinator's phases, ms from the
               request's arrival (its info lines): asked, parked, port,
               written, receiver_done, moved, source_done, resumed (see
               phases())

Figures of one run per size (--sizes, 64 and 256 by default). Needs root;
brings a 5-node cluster up under the cluster lock and down at its end.

usage: bench/recovery/run.py [--build DIR] [--sizes 64,256] [--heartbeat MS]
The last line of output is one JSON object."""
import argparse
import fcntl
import json
import os
import pathlib
import re
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "cluster"))
from run import BASE, CLUSTER, OK, TCP_COPY, Job, on  # noqa: E402  bench/cluster's helpers

HOSTS = "n1:1,n2:1,n3:1,n4:1,n5:1"
VICTIM = "n2"


def start(stasis, prog, ck, mib, heartbeat, spares=0):
    """the job under `stasis run --recover auto`, staged: (job, env)"""
    env = (f"STASIS_STAGING=on STASIS_LOCAL_DIR={BASE}/local STASIS_LOG=info STASIS_CACHE_KEEP=1 "
           f"STASIS_HEARTBEAT_TIMEOUT={heartbeat} ")
    return Job(f"cd {ck.parent}; {OK}{env}exec {stasis} run --dir {ck} --recover auto "
               f"--spares {spares} -- mpirun.openmpi --host {HOSTS} -np 4 {prog} {mib}"), env


def one(stasis, prog, work, mib, heartbeat):
    ck = work / f"ck{mib}"
    job, env = start(stasis, prog, ck, mib, heartbeat)
    try:
        job.wait_for(r"^READY")
        on("head", f"{OK}{env}{stasis} checkpoint --dir {ck} --wait global")
        t0 = time.perf_counter()
        subprocess.run([str(CLUSTER), "kill-node", VICTIM], check=True, capture_output=True)
        detect = job.wait_for(r"event: (node lost|rank lost|launcher ended)", stream="err") - t0
        back = job.wait_for(r"^RESUMED rank", count=4) - t0
        job.wait_for(r"^stasis: recovery 1 of", stream="err")
        (work / "stop").touch()
        job.wait_for(rf"^PASS ranks=4 mib={mib}")
        text = job.text()
        if f"{VICTIM} replaced by n5" not in text:
            raise SystemExit(f"bench/recovery: n5 did not replace {VICTIM}: {text[-2000:]}")
        (work / "stop").unlink()
        first = re.search(r"event: (node lost|rank lost|launcher ended)", text).group(1)
        return detect, back, first
    finally:
        job.kill(str(prog))


def plain_copy(work, name):
    """rank 1's image of checkpoint name, n2's local directory to n5's, over
    plain TCP: seconds"""
    script = work / "tcpcopy.py"
    script.write_text(TCP_COPY)
    recv = subprocess.Popen([str(CLUSTER), "exec", "n5", f"/usr/bin/python3 {script} recv 47012 "
                             f"{BASE}/local/tcpcopy.out"], stdout=subprocess.PIPE, text=True)
    recv.stdout.readline()   # LISTENING
    sent = on(VICTIM, f"/usr/bin/python3 {script} send n5 47012 "
                      f"$(ls -td {BASE}/local/*/{name}/rank-00001.img | head -1)").stdout
    recv.wait(60)
    on("n5", f"rm -f {BASE}/local/tcpcopy.out")
    return float(sent)


def migration(stasis, prog, work, mib, heartbeat, spares):
    ck = work / f"mig{mib}-{spares}"
    job, env = start(stasis, prog, ck, mib, heartbeat, spares)
    try:
        job.wait_for(r"^READY")
        # in the global tier first: a move into a spare waits for that, and
        # before it the job is relaunched, which the host list's slots
        # (one a node, the spare's taken) cannot hold ("not enough slots")
        name = on("head", f"{OK}{env}{stasis} checkpoint --dir {ck} --wait global").stdout.strip()
        copy = plain_copy(work, name)
        # from the client's start on head, not from the simulated cluster's
        # remote shell that gets it there (bash, nsenter, bash: 30-110 ms,
        # reported as migrate_client_start_s); one clock on every node
        off = time.time() - time.perf_counter()
        asked = time.perf_counter()
        r = on("head", f"{OK}{env}echo CLIENT $EPOCHREALTIME >&2; exec {stasis} migrate --dir {ck} "
                       f"--node {VICTIM} --to n5", check=False)
        if r.returncode:
            raise SystemExit(f"bench/recovery: {r.stderr.strip()}\n{job.text()[-3000:]}")
        t0 = float(re.search(r"^CLIENT (\S+)$", r.stderr, re.M).group(1)) - off
        said = r.stdout
        transfer = float(re.search(r"node to node in (\d+\.\d+) s", said).group(1))
        path = "spare" if "; into spares" in said else "relaunch"
        moved = job.wait_for(r"^RESUMED rank 1$") - t0
        # where it went: the coordinator's lines as they came (STASIS_LOG=info);
        # into a spare only the moving rank writes, and the cut is no
        # checkpoint established
        ckpt = job.wait_for(r"event: checkpoint established" if path == "relaunch" else
                            r"info: migration: the moving ranks parked and written",
                            count=2 if path == "relaunch" else 1, stream="err") - t0
        if path == "spare":
            # the others keep their processes (no RESUMED): stopped until
            # the coordinator resumed them
            every = max(moved, job.wait_for(r"info: migration: the ranks that stay resumed",
                                            stream="err") - t0)
            relaunched = ckpt
        else:
            every = job.wait_for(r"^RESUMED rank", count=4) - t0
            relaunched = job.wait_for(r"info: migration: relaunched", stream="err") - t0
        (work / "stop").touch()
        job.wait_for(rf"^PASS ranks=4 mib={mib}")
        (work / "stop").unlink()
        return (copy, moved, every, transfer, ckpt, relaunched, path, phases(job.text()),
                t0 - asked)
    finally:
        job.kill(str(prog))


PHASES = [("asked", r"phases: asked (\d+)"), ("parked", r"phases: .*parked (\d+)"),
          ("port", r"phases: .*port (\d+)"), ("written", r"phases: .*written (\d+)"),
          ("receiver_done", r"migration: the receiver ended, (\d+) ms"),
          ("moved", r"every rank moved or relinked (\d+) ms"),
          ("source_done", r"the source's directory removed (\d+) ms"),
          ("resumed", r"the ranks that stay resumed .*\((\d+) ms\)")]


def phases(text):
    """a move into a spare's phases, ms from the request's arrival at the
    coordinator, from its STASIS_LOG=info lines: the cut asked of the
    ranks (CHECKPOINT sent), every rank parked, the receiver's port known
    (WRITE sent), the moving rank's image streamed and checked, the
    receiver ended, every rank moved or relinked (MOVED), the source's
    directory removed, the ranks that stay resumed"""
    out = {}
    for key, rx in PHASES:
        m = re.search(rx, text)
        if m:
            out[key] = int(m.group(1))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--sizes", default="64,256")
    ap.add_argument("--heartbeat", type=int, default=400)
    a = ap.parse_args()
    stasis = pathlib.Path(a.build) / "src" / "cli" / "stasis"
    sizes = [int(s) for s in a.sizes.split(",")]
    lock = open(os.environ.get("STS_CLUSTER_LOCK", "/var/tmp/stasis-cluster.lock"), "w")
    fcntl.flock(lock, fcntl.LOCK_EX)   # one simulated cluster at a time
    out = {"ranks": 4, "nodes": 4,
           "spares": 1, "heartbeat_timeout_ms": a.heartbeat}
    try:
        # one found up under the lock was left by a holder killed before its down
        subprocess.run([str(CLUSTER), "down"], capture_output=True, timeout=300)
        subprocess.run([str(CLUSTER), "up", "5"], check=True, capture_output=True, timeout=300)
        work = BASE / "global" / f"bench-recovery-{os.getpid()}"
        work.mkdir(parents=True)
        prog = work / "ckptmem"
        subprocess.run(["mpicc.openmpi", "-O2", "-o", str(prog),
                        str(ROOT / "bench/mpi/ckptmem.c")], check=True)
        for mib in sizes:
            detect, back, first = one(stasis, prog, work, mib, a.heartbeat)
            out[f"first_event_{mib}"] = first
            out[f"detect_ms_{mib}"] = round(detect * 1000)
            out[f"recovery_s_{mib}"] = round(back, 3)
            # the next size on whole nodes again
            subprocess.run([str(CLUSTER), "start-node", VICTIM], check=True, capture_output=True,
                           timeout=300)
            subprocess.run([str(CLUSTER), "wait-state", VICTIM, "^idle", "60"], check=True,
                           capture_output=True, timeout=120)
        first = 64 if 64 in sizes else sizes[0]
        out["detect_ms"] = out[f"detect_ms_{first}"]
        out["recovery_s"] = out[f"recovery_s_{first}"]
        # into the spare waiting on n5 first (the figures without suffix),
        # then today's relaunch without spares (suffix _relaunch)
        for spares, sfx in ((1, ""), (0, "_relaunch")):
            copy, moved, every, transfer, ckpt, relaunched, path, ph, shell = migration(
                stasis, prog, work, first, a.heartbeat, spares)
            out[f"migrate_client_start_s{sfx}"] = round(shell, 3)
            if ph:
                out[f"migrate_phases_ms{sfx}"] = ph
            out[f"migrate_path{sfx}"] = path
            out[f"migrate_checkpoint_s{sfx}"] = round(ckpt, 3)
            out[f"migrate_transfer_s{sfx}"] = transfer
            if path == "relaunch":
                out[f"migrate_stopped_s{sfx}"] = round(relaunched - ckpt, 3)
                out[f"migrate_relaunch_s{sfx}"] = round(every - relaunched, 3)
            else:
                out[f"migrate_moved_s{sfx}"] = round(every - ckpt, 3)
            out[f"migrate_copy_s{sfx}"] = round(copy, 3)
            out[f"migrated_s{sfx}"] = round(moved, 3)
            out[f"migrate_vs_copy{sfx}"] = round(moved / copy, 1)
            out[f"migration_downtime_s{sfx}"] = round(every, 3)
        subprocess.run(["rm", "-rf", str(work)], check=False)
    finally:
        subprocess.run([str(CLUSTER), "down"], capture_output=True, timeout=300)
    print(json.dumps(out))


if __name__ == "__main__":
    main()

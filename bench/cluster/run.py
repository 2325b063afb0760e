#!/usr/bin/env python3
"""bench/cluster: a transparent MPI job on the simulated cluster
(scripts/cluster.sh, docs/cluster.md) with node-local staging, each
figure against its floor measured in the same run. Not a timed test.

4 nodes x 1 rank (bench/mpi/ckptmem.c under Open MPI, n1..n4), MIB MiB
of incompressible data a rank (256 by default), staging on: each node's
local directory is its tmpfs, the global tier a directory on this
machine's disk shared by the nodes.

  ckpt_block_vs_memcpy     the time the program is stopped by a staged
                           checkpoint (the coordinator's "established
                           after" at STASIS_LOG=info: from the request to
                           the ranks to the verdict that lets them resume)
                           / the 4 ranks' memcpy of the same bytes into
                           fresh memory, at once, one a node (numpy's
                           copy; the slowest one's own time)
  global_established_vs_dd `stasis checkpoint --wait global` from the
                           request until level global / `dd conv=fsync`
                           of the same bytes into the global directory
  restart_local_vs_read    `stasis restart` (from the node-local copies)
                           until every rank printed RESUMED / reading
                           those copies (cat to /dev/null, the 4 nodes at
                           once)
                           (the lazy restore, the default: the ranks run
                           before their pages are in; beside it, in the
                           same run, restart_all_in_s until every rank
                           said its pages are all in, restart_eager_s the
                           same restart with STASIS_RESTORE_LAZY=0 until
                           RESUMED, and launch_s a plain `mpirun` of the
                           same 4 ranks until each printed a line after
                           MPI_Init: a restart launches, so launch_s /
                           read_s bounds the ratio from below;
                           restart_vs_launch = restart_s / launch_s)
  restart_standby_vs_read  `stasis restart --standby` into a stand-by
                           (`stasis standby`, started beforehand, its 4
                           ranks past MPI_Init: docs/cluster.md, "Stand-by
                           ranks"), from the command until every rank
                           printed RESUMED / the same read; no launch on
                           that path. restart_standby_mpich_vs_read: the
                           stand-by under MPICH's launcher (as below)
  restart_mpich_vs_read    the same restart under MPICH's launcher
                           (`--launcher "mpiexec.mpich -hosts n1,...,n4
                           -n 4"`, the job ran under Open MPI) until every
                           rank printed RESUMED / the same read
  launch_overhead_s        `stasis run -- srun --mpi=pmix -n4 prog` against
                           plain `srun ...`, both steps of one allocation
                           (a batch job holding the 4 nodes): time to the
                           first line of the program's output, difference
                           of medians
  coord_ms                 the coordinator's "coordination X ms": from the
                           request until every rank stopped its program

With --levels, a job at level partner, then one at rs (docs/levels.md):

  partner_vs_copy          `stasis checkpoint --wait partner` from the
                           request until level partner / each node sending
                           its rank's image to the next node over plain TCP
                           (Python's socket.sendfile into the receiver's
                           tmpfs, the 4 pairs at once; the slowest pair)
  rs_vs_copy               the same for level rs (group of 4, 1 parity)
                           (beside them, partner_established_s and
                           rs_established_s: the coordinator's request
                           until the checkpoint's seal, the staged write
                           with the copy or encode streaming beside it,
                           to compare with block_s; partner_after_seal_ms
                           and rs_after_seal_ms: the seal until the level,
                           the slowest node agent's; partner_member_ms
                           and partner_member_cpu_ms, likewise for rs: the
                           longest a member took, from its start on STREAM
                           until the level, and the most CPU one used)
                           (timed from the client's start on head; the
                           simulated cluster's remote shell before it,
                           bash, nsenter, bash, is levels_client_start_s)
  partner_steady_vs_copy   the same for the job's third checkpoint at the
  rs_steady_vs_copy        level (cache_keep 1: the first one's files were
                           retired into spares, written over by the third)
  restart_node_lost_vs_local  n2 killed with its local directory wiped and
                           booted again, `stasis restart` on n1..n4 until
                           every rank printed RESUMED, rank 1's image
                           fetched from n3's partner copy / the restart
                           from the local copies above

Medians of --rounds rounds. Needs root; brings the cluster up if it is
not, and leaves it up.

usage: bench/cluster/run.py [--build DIR] [--mib N] [--rounds N] [--levels]
The last line of output is one JSON object."""
import argparse
import fcntl
import json
import os
import pathlib
import re
import select
import statistics
import subprocess
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "scripts" / "cluster.sh"
BASE = pathlib.Path(os.environ.get("STS_CLUSTER", "/var/tmp/stasis-cluster"))
NODES = ["n1", "n2", "n3", "n4"]
OK = "export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; "


def on(node, cmd, check=True, timeout=600):
    r = subprocess.run([str(CLUSTER), "exec", node, cmd], capture_output=True, text=True,
                       timeout=timeout)
    if check and r.returncode != 0:
        raise SystemExit(f"bench/cluster: on {node}: {cmd}: {r.stdout[-500:]} {r.stderr[-500:]}")
    return r


def parallel(cmds):
    """every (node, cmd) at once; the wall time until the last ends"""
    t = time.perf_counter()
    ps = [subprocess.Popen([str(CLUSTER), "exec", n, c], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL) for n, c in cmds]
    for p in ps:
        p.wait(600)
    return time.perf_counter() - t


class Job:
    """a command on head; its output lines collected by two reader threads"""

    def __init__(self, cmd):
        import threading
        self.proc = subprocess.Popen([str(CLUSTER), "exec", "head", cmd], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.out, self.err = [], []
        for f, seen in ((self.proc.stdout, self.out), (self.proc.stderr, self.err)):
            threading.Thread(target=self._read, args=(f, seen), daemon=True).start()

    @staticmethod
    def _read(f, seen):
        for line in f:
            seen.append((time.perf_counter(), line))

    def wait_for(self, pattern, count=1, stream="out", timeout=120):
        """until count lines like pattern came; the time the last came"""
        seen = self.out if stream == "out" else self.err
        end = time.time() + timeout
        while time.time() < end:
            hits = [t for t, ln in list(seen) if re.search(pattern, ln)]
            if len(hits) >= count:
                return hits[count - 1]
            time.sleep(0.01)
        raise SystemExit(f"bench/cluster: no {pattern!r}: {[ln for _, ln in self.out[-5:]]} "
                         f"{[ln for _, ln in self.err[-25:]]}")

    def text(self, stream="err"):
        return "".join(ln for _, ln in (self.out if stream == "out" else self.err))

    def kill(self, tag):
        subprocess.run(["pkill", "-9", "-f", tag], capture_output=True)
        try:
            os.killpg(self.proc.pid, 9)
        except ProcessLookupError:
            pass
        self.proc.wait(30)
        subprocess.run(["pkill", "-9", "-f", tag], capture_output=True)


HELLO = r"""
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv)
{
	int rank;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	printf("HELLO rank %d\n", rank);
	fflush(stdout);
	MPI_Finalize();
	return 0;
}
"""


TCP_COPY = r"""
import socket, sys, time
if sys.argv[1] == "recv":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", int(sys.argv[2]))); s.listen(1); print("LISTENING", flush=True)
    c, _ = s.accept()
    with open(sys.argv[3], "wb") as f:
        while b := c.recv(1 << 20):
            f.write(b)
    c.sendall(b"k")
else:
    for i in range(600):
        try:
            c = socket.create_connection((sys.argv[2], int(sys.argv[3]))); break
        except OSError:
            time.sleep(0.05)
    t = time.perf_counter()
    with open(sys.argv[4], "rb") as f:
        c.sendfile(f)
    c.shutdown(socket.SHUT_WR); c.recv(1)
    print(time.perf_counter() - t)
"""


def tcp_copy(work, local, name):
    """each node's image of checkpoint name (in its local directory's job
    local) to the next node, plain TCP, the 4 pairs at once: the slowest
    pair's time"""
    script = work / "tcpcopy.py"
    script.write_text(TCP_COPY)
    recv = [subprocess.Popen([str(CLUSTER), "exec", n, f"/usr/bin/python3 {script} recv 47011 "
                              f"{BASE}/local/tcpcopy.out"], stdout=subprocess.PIPE, text=True)
            for n in NODES]
    for p in recv:
        p.stdout.readline()   # LISTENING
    send = [subprocess.Popen([str(CLUSTER), "exec", n, f"/usr/bin/python3 {script} send "
                              f"{NODES[(i + 1) % 4]} 47011 $(ls {BASE}/local/{local}/{name}/"
                              f"rank-*.img)"], stdout=subprocess.PIPE, text=True)
            for i, n in enumerate(NODES)]
    t = max(float(p.communicate(timeout=600)[0]) for p in send)
    for p in recv:
        p.wait(60)
    parallel([(n, f"rm -f {BASE}/local/tcpcopy.out") for n in NODES])
    return t


def standby_restart(stasis, work, ck, env, launch, tag):
    """a stand-by of the job's ranks started and ready (not timed), then
    `stasis restart --standby` until every rank printed RESUMED"""
    job = Job(f"cd {work}; {OK}{env}exec {stasis} standby --dir {ck}{launch}")
    ready = ck / "ckptmem" / "standby.ready"
    for i in range(1200):
        if ready.exists():
            break
        if job.proc.poll() is not None:
            raise SystemExit(f"bench/cluster: the stand-by ended: {job.text()[-2000:]}")
        time.sleep(0.05)
    t0 = time.perf_counter()
    r = subprocess.Popen([str(CLUSTER), "exec", "head", f"{OK}{env}exec {stasis} restart --dir {ck} "
                          "--standby"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t = job.wait_for(r"^RESUMED rank", count=4) - t0
    out, err = r.communicate(timeout=120)
    if r.returncode != 0:
        raise SystemExit(f"bench/cluster: restart --standby: {out} {err}")
    job.kill(tag)
    return t


def levels(a, stasis, work, prog, env, hosts, fig):
    """partner and rs, and a restart after n2's loss (docs/levels.md)"""
    for key in ("partner_s", "rs_s", "tcp_copy_s", "restart_lost_s", "partner_established_s",
                "rs_established_s", "partner_after_seal_ms", "rs_after_seal_ms",
                "partner_steady_s", "rs_steady_s", "partner_steady_established_s",
                "rs_steady_established_s", "levels_client_start_s", "partner_member_ms",
                "rs_member_ms", "partner_member_cpu_ms", "rs_member_cpu_ms"):
        fig[key] = []
    # room in the nodes' local directories: images, partner copies, floor
    parallel([(n, f"rm -rf {BASE}/local/ckptmem.*") for n in NODES])
    for rnd in range(a.rounds):
        for level in ("partner", "rs"):
            ck = work / f"ck-{level}{rnd}"
            # the logs of agents killed with an earlier job (below) name the
            # same checkpoints
            subprocess.run(f"rm -f {BASE}/nodes/*/local/stasis-node.*/ckptmem.*.log", shell=True)
            job = Job(f"cd {work}; {OK}{env}STASIS_GROUP_SIZE=4 exec {stasis} run --dir {ck} "
                      f"--level {level} -- mpirun.openmpi --host {hosts} -np 4 {prog} {a.mib}")
            job.wait_for(r"^READY")

            def leveled(key):
                """a checkpoint at the level, timed (fig[key]), its seal's
                time (the coordinator's), then its global copies done:
                nothing else runs during what comes next"""
                # from the client's start on head, not from the simulated
                # cluster's remote shell that gets it there (bash, nsenter,
                # bash; levels_client_start_s): the floor is timed inside
                # its sender too. One clock on every node
                off = time.time() - time.perf_counter()
                asked = time.perf_counter()
                r = on("head", f"{OK}{env}echo CLIENT $EPOCHREALTIME >&2; exec {stasis} "
                       f"checkpoint --dir {ck} --wait {level}")
                t1 = time.perf_counter()
                t0 = float(re.search(r"^CLIENT (\S+)$", r.stderr, re.M).group(1)) - off
                name = r.stdout.strip()
                fig[f"{key}_s"].append(t1 - t0)
                fig["levels_client_start_s"].append(t0 - asked)
                # where it went: the coordinator's request until the seal
                # (the staged checkpoint, the stream beside it), then the
                # slowest member's seal until its level (the agents' lines)
                job.wait_for(rf"checkpoint {name}: .* established after", stream="err")
                m = re.search(rf"checkpoint {name}: .* established after (\d+) ms", job.text())
                fig[f"{key}_established_s"].append(int(m.group(1)) / 1000)
                for i in range(3000):
                    if re.search(rf"{name} .*level {level}\+global",
                                 on("head", f"{stasis} ls --dir {ck}").stdout):
                        break
                    time.sleep(0.1)
                return name

            name = leveled(level)
            # every member's line is there by now
            logs = subprocess.run(f"cat {BASE}/nodes/n*/local/stasis-node.*/*.log", shell=True,
                                  capture_output=True, text=True).stdout
            tails = re.findall(rf"rank \d+: {name} at level {level} reached after \d+ ms "
                               r"\(streamed while written: \d+ ms, then (\d+) ms after the seal", logs)
            if len(tails) != 4:
                raise SystemExit(f"bench/cluster: {level}: {len(tails)} agents' level lines: "
                                 f"{logs[-2000:]}")
            fig[f"{level}_after_seal_ms"].append(max(int(x) for x in tails))
            # the members' own CPU beside their wall time: computing or waiting
            cpus = re.findall(rf"rank \d+: {name} at level {level} reached after (\d+) ms .*; CPU "
                              r"(\d+) ms", logs)
            fig[f"{level}_member_ms"].append(max(int(x[0]) for x in cpus))
            fig[f"{level}_member_cpu_ms"].append(max(int(x[1]) for x in cpus))
            # steady: with cache_keep 1 the second checkpoint's end retires
            # the first's files into spares, and the third is written over
            # them (docs/levels.md, "Spare files"); the first is a job's
            # only checkpoint written into fresh memory
            leveled(level)
            name = leveled(f"{level}_steady")
            job.kill(str(prog))
            local = f"ckptmem.{(ck / 'ckptmem' / 'stage.id').read_text()[:16]}"
            # the killed job's spares: room for the floor's copy
            parallel([(n, f"rm -rf {BASE}/local/{local}/.spare") for n in NODES])
            if level == "rs":
                parallel([(n, f"rm -rf {BASE}/local/{local}") for n in NODES])
                continue
            fig["tcp_copy_s"].append(tcp_copy(work, local, name))
            subprocess.run([str(CLUSTER), "kill-node", "n2", "--wipe"], check=True,
                           capture_output=True)
            subprocess.run([str(CLUSTER), "start-node", "n2"], check=True, capture_output=True)
            job = Job(f"cd {work}; {OK}{env}exec {stasis} restart --dir {ck} {name}")
            t0 = time.perf_counter()
            t1 = job.wait_for(r"^RESUMED rank", count=4)
            fig["restart_lost_s"].append(t1 - t0)
            if not re.search(r"rank 1 reads \S+/\.fetched-00001\.img", job.text()):
                raise SystemExit(f"bench/cluster: rank 1 was not rebuilt: {job.text()[-2000:]}")
            job.kill(str(prog))
            # room in the nodes' 1 GiB for the next job
            parallel([(n, f"rm -rf {BASE}/local/{local}") for n in NODES])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--levels", action="store_true")
    a = ap.parse_args()
    stasis = pathlib.Path(a.build) / "src" / "cli" / "stasis"
    lock = open(os.environ.get("STS_CLUSTER_LOCK", "/var/tmp/stasis-cluster.lock"), "w")
    fcntl.flock(lock, fcntl.LOCK_EX)   # one simulated cluster at a time (tests/cluster too)
    # one found up under the lock was left by a holder killed before its down
    subprocess.run([str(CLUSTER), "down"], capture_output=True, timeout=300)
    # node-local tmpfs of 2 GiB: --levels' steady checkpoints hold two
    # checkpoints' images and partner copies at once (the last one
    # established stays until the next one is: 4 x 256.3 MiB, over 1 GiB)
    subprocess.run([str(CLUSTER), "up", str(len(NODES))], check=True, capture_output=True,
                   env={**os.environ, "STS_CLUSTER_LOCAL": "2g"})
    try:
        work = BASE / "global" / f"bench-{os.getpid()}"
        work.mkdir(parents=True)
        prog = work / "ckptmem"
        subprocess.run(["mpicc.openmpi", "-O2", "-o", str(prog), str(ROOT / "bench/mpi/ckptmem.c")],
                       check=True)
        (work / "hello.c").write_text(HELLO)
        subprocess.run(["mpicc.openmpi", "-O2", "-o", str(work / "hello"), str(work / "hello.c")],
                       check=True)
        total = 4 * a.mib << 20
        env = (f"STASIS_STAGING=on STASIS_LOCAL_DIR={BASE}/local STASIS_LOG=info "
               f"STASIS_CACHE_KEEP=1 ")
        hosts = ",".join(f"{n}:1" for n in NODES)
        fig = {k: [] for k in ("memcpy_s", "block_s", "dd_s", "global_s", "read_s", "restart_s",
                               "coord_ms", "srun_s", "stasis_srun_s", "restart_all_in_s",
                               "restart_eager_s", "launch_s", "restart_mpich_s",
                               "restart_standby_s", "restart_standby_mpich_s")}
        py = ("import numpy, time; a = numpy.ones({n}, dtype=numpy.uint8); t = time.perf_counter(); "
              "b = a.copy(); print(time.perf_counter() - t)")
        for rnd in range(a.rounds):
            ck = work / f"ck{rnd}"
            job = Job(f"cd {work}; {OK}{env}exec {stasis} run --dir {ck} -- mpirun.openmpi "
                      f"--host {hosts} -np 4 {prog} {a.mib}")
            job.wait_for(r"^READY")
            # floor: 4 memcpys at once, one a node (the nodes share this
            # machine's CPUs); each times its own copy, the slowest counts
            ps = [subprocess.Popen([str(CLUSTER), "exec", n,
                                    f"/usr/bin/python3 -c '{py.format(n=a.mib << 20)}'"],
                                   stdout=subprocess.PIPE, text=True) for n in NODES]
            fig["memcpy_s"].append(max(float(p.communicate(timeout=300)[0]) for p in ps))
            t0 = time.perf_counter()
            r = on("head", f"{OK}{env}{stasis} checkpoint --dir {ck} --wait global")
            fig["global_s"].append(time.perf_counter() - t0)
            name = r.stdout.strip()
            job.wait_for(rf"checkpoint {name}: .* established after", stream="err")
            m = re.search(rf"checkpoint {name}: .*coordination ([\d.]+) ms, established after (\d+) ms",
                          job.text())
            fig["coord_ms"].append(float(m.group(1)))
            fig["block_s"].append(int(m.group(2)) / 1000)
            # floor: the same bytes (incompressible, from memory) into the global
            # directory with dd conv=fsync (bs=1M: 4M ran 0.97-2.4 s against
            # 0.71-0.76 s for the same GiB here, 2026-11-27)
            dd = work / "dd.out"
            on("head", f"head -c {total} /dev/urandom > /dev/shm/bench-dd.src")
            t = time.perf_counter()
            on("head", f"dd if=/dev/shm/bench-dd.src of={dd} bs=1M conv=fsync status=none")
            fig["dd_s"].append(time.perf_counter() - t)
            on("head", "rm -f /dev/shm/bench-dd.src")
            dd.unlink()
            job.kill(str(prog))
            # floor: the 4 nodes read their local copies at once
            fig["read_s"].append(parallel([(n, f"cat {BASE}/local/ckptmem.*/{name}/rank-*.img > /dev/null")
                                           for n in NODES]))
            job = Job(f"cd {work}; {OK}{env}exec {stasis} restart --dir {ck}")
            t0 = time.perf_counter()
            t1 = job.wait_for(r"^RESUMED rank", count=4)
            fig["restart_s"].append(t1 - t0)
            fig["restart_all_in_s"].append(job.wait_for(r"lazy restore done", count=4,
                                                        stream="err") - t0)
            job.kill(str(prog))
            job = Job(f"cd {work}; {OK}{env}STASIS_RESTORE_LAZY=0 exec {stasis} restart --dir {ck}")
            t0 = time.perf_counter()
            fig["restart_eager_s"].append(job.wait_for(r"^RESUMED rank", count=4) - t0)
            job.kill(str(prog))
            mpich = f"mpiexec.mpich -hosts {hosts.replace(':1', '')} -n 4"
            for key, launch in (("restart_standby_s", ""),
                                ("restart_standby_mpich_s", f" --launcher '{mpich}'")):
                fig[key].append(standby_restart(stasis, work, ck, env, launch, str(prog)))
            job = Job(f"cd {work}; {OK}{env}exec {stasis} restart --dir {ck} --launcher "
                      f"'{mpich}'")
            t0 = time.perf_counter()
            fig["restart_mpich_s"].append(job.wait_for(r"^RESUMED rank", count=4) - t0)
            job.kill(str(prog))
            # the launch alone: the same 4 ranks, natively, to a line after MPI_Init
            job = Job(f"cd {work}; {OK}exec mpirun.openmpi --host {hosts} -np 4 {work}/hello")
            t0 = time.perf_counter()
            fig["launch_s"].append(job.wait_for(r"^HELLO rank", count=4) - t0)
            job.proc.wait(60)
            # launch through srun, with and without stasis, as steps of one
            # allocation (a batch job holding the nodes): until the first line
            jid = on("head", f"cd {work}; sbatch --parsable -N4 -n4 -J bench-alloc -o /dev/null "
                     f"--wrap 'sleep 600'").stdout.strip()
            for i in range(200):
                if on("head", f"squeue -h -j {jid} -o %T").stdout.strip() == "RUNNING":
                    break
                time.sleep(0.1)
            for key, pre in (("srun_s", ""), ("stasis_srun_s", f"{stasis} run --dir {ck}s -- ")):
                job = Job(f"cd {work}; {OK}exec {pre}srun --jobid={jid} --overlap --mpi=pmix -n 4 "
                          f"{prog} 16")
                t0 = time.perf_counter()
                fig[key].append(job.wait_for(r"^READY") - t0)
                job.kill(str(prog))
            on("head", f"scancel {jid}", check=False)
        if a.levels:
            levels(a, stasis, work, prog, env, hosts, fig)
        med = {k: statistics.median(v) for k, v in fig.items()}
        out = {
            "ckpt_block_vs_memcpy": round(med["block_s"] / med["memcpy_s"], 3),
            "global_established_vs_dd": round(med["global_s"] / med["dd_s"], 3),
            "restart_local_vs_read": round(med["restart_s"] / med["read_s"], 3),
            "restart_vs_launch": round(med["restart_s"] / med["launch_s"], 3),
            "restart_mpich_vs_read": round(med["restart_mpich_s"] / med["read_s"], 3),
            "restart_standby_vs_read": round(med["restart_standby_s"] / med["read_s"], 3),
            "restart_standby_mpich_vs_read": round(med["restart_standby_mpich_s"] / med["read_s"],
                                                   3),
            "launch_overhead_s": round(med["stasis_srun_s"] - med["srun_s"], 3),
            "coord_ms": round(med["coord_ms"], 2),
            "mib_per_rank": a.mib, "ranks": 4, "nodes": 4, "rounds": a.rounds,
        }
        if a.levels:
            out["partner_vs_copy"] = round(med["partner_s"] / med["tcp_copy_s"], 3)
            out["rs_vs_copy"] = round(med["rs_s"] / med["tcp_copy_s"], 3)
            out["partner_steady_vs_copy"] = round(med["partner_steady_s"] / med["tcp_copy_s"], 3)
            out["rs_steady_vs_copy"] = round(med["rs_steady_s"] / med["tcp_copy_s"], 3)
            out["restart_node_lost_vs_local"] = round(med["restart_lost_s"] / med["restart_s"], 3)
        out.update({k: round(v, 3) for k, v in med.items()})
        subprocess.run(["rm", "-rf", str(work)] + [str(p) for n in NODES
                                                   for p in (BASE / "nodes" / n / "local").glob("ckptmem.*")])
    finally:
        # down before the lock goes: a cluster left up stops the next user's
        # `up` with another node count (bench/recovery brings up 5)
        subprocess.run([str(CLUSTER), "down"], capture_output=True, timeout=300)
    print(json.dumps(out))


if __name__ == "__main__":
    main()

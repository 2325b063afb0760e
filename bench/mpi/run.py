#!/usr/bin/env python3
"""bench/mpi: MPI programs natively and as the split process's upper half,
side by side in one run (issue 6), then checkpoint and restart of a whole
job under `stasis run`. Not a timed test: it reports ratios.
The split side runs with one thread pointer (split_onetls, on by default);
STASIS_SPLIT_ONETLS=off in the caller's environment runs it with two
(docs/split.md; "split_onetls" in the output says which).

  latency_overhead  8-byte ping-pong latency (200000 round trips), split / native - 1
  bw_overhead       1 MiB ping-pong bandwidth, native / split - 1
  mt_latency_overhead  8-byte ping-pong (100000 round trips) between a
                    thread of rank 0 and one of rank 1, neither the main
                    one, under MPI_THREAD_MULTIPLE (pingpong.c's thread; the split
                    process at STASIS_MPI_THREAD_LEVEL=multiple, each
                    thread on a lower-half TLS of its own), split / native - 1
  rma_put_overhead  an 8-byte MPI_Put + MPI_Win_flush to the other rank in a
                    lock_all epoch (20000 of them; rmaput.c, a window of
                    MPI_Win_create as the split process makes every one),
                    split / native - 1. With Open MPI the native run uses
                    the one-sided component the lower half chooses
                    (OMPI_MCA_osc=^rdma,ucx: osc/pt2pt, docs/split.md
                    "Windows")
  *_fs_floor_overhead  for latency, mt_latency and rma_put: the same
                    program natively, each MPI call of its measured loop
                    between two writes of the FS base (fsfloor.h), / native
                    - 1: the part of the split process's overhead that its
                    crossing into the lower half cannot avoid (two
                    wrfsbase a call, about 12 ns each on this machine; a
                    one-way message has two on its path, the receive's way
                    out and the next send's way in). Each round runs it
                    between the native and the split runs
  percall_*_ns      the CPU time of single calls of one rank to itself
                    (percall.c: the calling thread's CPU time, median of
                    200 batches of 1000, so other load and the machine's
                    message speeds hardly move it), natively, as the floor
                    (fsfloor.h) and split, medians of the rounds:
                    MPI_Comm_rank (rank), Irecv + Isend + two Waits
                    (isend: the requests' records in the ledger), and with
                    Open MPI Send + Recv (sendrecv; on a duplicate of
                    MPI_COMM_WORLD: sendrecv_dup), Put + Win_flush (put).
                    percall_*_above_floor_ns
                    is split - floor: what the split process adds beyond
                    its crossing's writes of the FS base
  app_overhead      4-rank stencil (halo exchange + Allreduce every
                    iteration, 1500 iterations of a 1024x1024 grid),
                    runtime split / native - 1. 4 ranks share this machine's
                    2 CPUs, so the figure depends on how waiting ranks give
                    their CPU away (MPICH's own waits never do; the split
                    process's do, see docs/split.md)
  app2_overhead     the same stencil on 2 ranks, one per CPU: what the split
                    process costs the computation itself
  ckpt_vs_dd        4 ranks of ckptmem.c holding 256 MiB each of data no
                    page elision can shrink (1 GiB in all): the whole
                    `stasis checkpoint` command, until it prints the name /
                    `dd if=/dev/zero bs=1M count=1024 conv=fsync` of 1 GiB into
                    the same directory (medians of --ckpts alternating pairs).
                    The ranks write their images with O_DIRECT, in parallel:
                    ckpt_vs_dd_direct divides by the same dd with
                    oflag=direct too, which skips the page cache's writeback
  restart_vs_read   after `stasis checkpoint --stop` of that job and a drop of
                    the page cache: `stasis restart` from its start until all
                    4 ranks registered with the coordinator and printed
                    "RESUMED" (each rank sees its pid change within 10 ms of
                    running again) / `dd if=IMAGE of=/dev/null bs=4M` of the 4
                    images one after the other, from a cold cache too
                    (medians of --ckpts alternating pairs, all from the same
                    checkpoint); each restarted job then verifies its data
                    and must print PASS. The restart is lazy (docs/split.md,
                    "Lazy restore"): the ranks run before their pages are
                    all in
  restart_full_s    the same restarts until the 4th rank's lower half said
                    "lazy restore done" (every page in memory);
                    restart_full_vs_read divides it by the same dd
  restart_eager_s   a restart with STASIS_RESTORE_LAZY=0 after each lazy one
                    (every page read before the ranks run), and
                    restart_eager_vs_read
  coord_ms          4 ranks of 4 MiB each: the coordinator's "coordination X
                    ms" (STASIS_LOG=info; the slowest rank's own time from
                    the checkpoint request to its program stopped, 0.1 ms
                    resolution), median of 5 checkpoints

The latencies (latency, mt_latency, rma_put, and the bandwidth) are each
run's median of 1000 batches of its measured loop (pingpong.c and rmaput.c,
batches.h; the bandwidth's 200 round trips are 200 batches of one): a
batch's mean time per operation, the median batch. The
whole loop's mean was the figure before, and it swung: 20000 puts of
0.8 us take 16 ms, 100000 threads' round trips 50 ms, less than or about
what one other process's turn on a CPU takes (the scheduler's slices are
a few ms), so one preemption of either rank in a round moved that round
by 0.2-1 us, and a median of 5 rounds could not hide it when it came in
most rounds (Open MPI's rma_put_overhead 0.038 in one quiet run, 0.64 in
the next; 2026-11-27 06:35 at load 6-8, the means of single rounds went
from 4 to 300 us while the batch medians stayed within 1.5-1.9 us). A
preemption now spoils a few batches of 1000, which the median leaves
out. The whole loops' means are still reported, as *_mean_overhead.

This machine's two CPUs also pass messages at one of two speeds, for
seconds at a time, natively and under the split process alike (the
virtual CPUs' placement on the host, out of our hands): under SCHED_RR,
with no preemption at all (2026-11-27 06:55), rmaput's put + flush took
1.46-1.49 us natively and 1.58-1.77 us split in four rounds, then 0.73
and 0.66-0.68 us in the next two, and the threads' ping-pong 0.16-0.20 us
natively in one minute, 0.39-0.43 us the next. A ratio of the medians of
native and split rounds mixes the two speeds whenever more of one mode's
rounds fell on one side; each *_overhead is therefore the median of the
rounds' own ratios, and a round runs each program natively and then
split, one right after the other (a second or two apart, mostly at one
speed; before, a round ran every native program, then every split one).

Each time is the median of its rounds. The raw seconds behind the
checkpoint ratios are reported too (ckpt_s, dd_write_s, restart_s,
dd_read_s). Checkpoints and dd's file go to
a temporary directory under /var/tmp (or the build tree) that is not a
tmpfs, removed at the end. Dropping the page cache needs root: without it
restart_vs_read is measured warm and "cold_cache" is false.

usage: bench/mpi/run.py [--build DIR] [--mpi openmpi|mpich] [--rounds N] [--ckpts N]
The last line of output is one JSON object."""
import argparse
import json
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
HERE = pathlib.Path(__file__).resolve().parent
CKPT_MIB = 256      # per rank: 4 ranks hold 1 GiB
COORD_MIB = 4
COORD_CKPTS = 5


def drop_caches():
    """Write dirty pages back and evict the page cache; False without root."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def disk_dir(build):
    """A new directory on a disk file system (not tmpfs): under /var/tmp,
    else under the build tree."""
    for base in ("/var/tmp", build):
        fs = subprocess.run(["stat", "-f", "-c", "%T", base], capture_output=True, text=True)
        if fs.returncode == 0 and fs.stdout.strip() not in ("tmpfs", "ramfs"):
            return pathlib.Path(tempfile.mkdtemp(prefix="stasis-bench-mpi-ck-", dir=base))
    raise SystemExit("no directory on a disk file system for the checkpoints (/var/tmp and "
                     f"{build} are tmpfs)")


def timed(cmd, **kw):
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)
    return time.perf_counter() - t


def descendants(pid):
    out = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                for c in f.read().split():
                    out += [int(c)] + descendants(int(c))
    except OSError:
        pass
    return out


class Job:
    """`stasis run` or `stasis restart` of an MPI job in the background; its
    stdout and stderr lines are collected with their arrival times."""
    started = []

    def __init__(self, args, env, cwd):
        self.proc = subprocess.Popen(args, env=env, cwd=cwd, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, errors="replace")
        Job.started.append(self)
        self.lines = {"out": [], "err": []}
        self.cond = threading.Condition()
        self.readers = [threading.Thread(target=self._read, args=(k, f), daemon=True)
                        for k, f in (("out", self.proc.stdout), ("err", self.proc.stderr))]
        for r in self.readers:
            r.start()

    def _read(self, key, f):
        for line in f:
            with self.cond:
                self.lines[key].append((time.perf_counter(), line.rstrip("\n")))
                self.cond.notify_all()
        with self.cond:
            self.lines[key].append((time.perf_counter(), None))
            self.cond.notify_all()

    def matching(self, key, pattern):
        return [(t, m) for t, line in self.lines[key] if line is not None
                for m in [re.search(pattern, line)] if m]

    def wait(self, key, pattern, count=1, timeout=180):
        """The arrival time of the count-th line matching pattern."""
        end = time.perf_counter() + timeout
        with self.cond:
            while True:
                got = self.matching(key, pattern)
                if len(got) >= count:
                    return got[count - 1][0]
                left = end - time.perf_counter()
                if left <= 0 or any(line is None for _, line in self.lines[key]):
                    self.fail(f"{count} line(s) like {pattern!r} on std{key}")
                self.cond.wait(min(left, 1.0))

    def text(self, key):
        return "\n".join(line for _, line in self.lines[key] if line is not None)

    def kill(self):
        """The job's process and every process below it (launcher, ranks)."""
        if self.proc.poll() is None:
            for pid in [self.proc.pid] + descendants(self.proc.pid):
                try:
                    os.kill(pid, 9)
                except OSError:
                    pass
            self.proc.wait()

    def fail(self, what):
        self.kill()
        raise SystemExit(f"{' '.join(self.proc.args)}: no {what}\nstdout:\n{self.text('out')}"
                         f"\nstderr:\n{self.text('err')}")

    def finish(self, timeout=180):
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.fail(f"end within {timeout} s")
        for r in self.readers:
            r.join()
        return self.proc.returncode


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--mpi", default="openmpi", choices=["openmpi", "mpich"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ckpts", type=int, default=3,
                    help="checkpoint / dd write pairs, and restart / dd read pairs")
    a = ap.parse_args()
    lh = pathlib.Path(a.build) / "src" / "split" / f"stasis-lh-{a.mpi}"
    # the caller's STASIS_* left out but split_onetls (docs/config.md): the
    # split runs with two thread pointers when it is off
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("STASIS_") or k == "STASIS_SPLIT_ONETLS"}
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="stasis-bench-mpi-"))
    cc = f"mpicc.{a.mpi}"
    for prog in ("pingpong", "stencil", "ckptmem", "rmaput", "percall"):
        subprocess.run([cc, "-O2", "-pthread", "-o", str(tmp / prog), str(HERE / f"{prog}.c")],
                       check=True)
    for prog in ("pingpong", "rmaput", "percall"):   # fsfloor.h
        subprocess.run([cc, "-O2", "-pthread", "-DFS_FLOOR", "-o", str(tmp / f"{prog}-floor"),
                        str(HERE / f"{prog}.c")], check=True)

    def launch(n):
        if a.mpi == "openmpi":
            return ["mpirun.openmpi", "--oversubscribe", "--bind-to", "none", "-np", str(n)]
        return ["mpiexec.mpich", "-n", str(n)]

    def run(n, args, split, extra=None):
        cmd = launch(n) + ([str(lh)] if split else []) + args
        r = subprocess.run(cmd, env=dict(env, **(extra or {})), capture_output=True, text=True,
                           timeout=600, cwd=tmp)
        if r.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed: {r.stderr}")
        return r.stdout

    calls = ("rank", "isend") + (("sendrecv", "sendrecv_dup", "put")   # percall.c
                                 if a.mpi == "openmpi" else ())
    res = {m: {"lat": [], "bw": [], "app": [], "app2": [], "mt": [], "put": [],
               "lat_mean": [], "mt_mean": [], "put_mean": [], **{f"cpu_{c}": [] for c in calls}}
           for m in ("native", "floor", "split")}
    mean = lambda out: float(re.search(r"mean_us (\S+)", out).group(1))
    osc = {"OMPI_MCA_osc": "^rdma,ucx"} if a.mpi == "openmpi" else {}
    residual = {}
    def lat(key, pattern, mean_key=None):
        def parse(mode, out):
            res[mode][key].append(float(re.search(pattern, out).group(1)))
            if mean_key:
                res[mode][mean_key].append(mean(out))
        return parse

    def percall(mode, out):
        for c in calls:
            res[mode][f"cpu_{c}"].append(float(re.search(rf"^{c}_ns (\S+)", out, re.M).group(1)))

    def stencil(key, n):
        def parse(mode, out):
            m = re.search(r"residual (\S+) seconds (\S+)", out)
            residual.setdefault((mode, n), m.group(1))
            res[mode][key].append(float(m.group(2)))
        return parse

    mt_env = {"STASIS_MPI_THREAD_LEVEL": "multiple"}
    # (ranks, arguments, native's environment, split's, what to take from the
    # output, whether the program's floor build runs too: fsfloor.h)
    steps = [(2, ["pingpong", "8", "200000"], None, None,
              lat("lat", r"latency_us (\S+)", "lat_mean"), True),
             (2, ["pingpong", str(1 << 20), "200"], None, None, lat("bw", r"bw_mibs (\S+)"),
              False),
             (2, ["pingpong", "8", "100000", "thread"], None, mt_env,
              lat("mt", r"mt_latency_us (\S+)", "mt_mean"), True),
             (2, ["rmaput", "20000"], osc, None, lat("put", r"put_flush_us (\S+)", "put_mean"),
              True),
             (1, ["percall"], osc, None, percall, True),
             (4, ["stencil", "1024", "1500"], None, None, stencil("app", 4), False),
             (2, ["stencil", "1024", "1500"], None, None, stencil("app2", 2), False)]
    for rnd in range(a.rounds):
        for n, args, native_env, split_env, parse, floor in steps:
            # one after the other: see above
            for mode in ("native", "floor", "split") if floor else ("native", "split"):
                split = mode == "split"
                prog = args[0] + ("-floor" if mode == "floor" else "")
                parse(mode, run(n, [str(tmp / prog), *args[1:]], split,
                                split_env if split else native_env))
        print(f"round {rnd + 1}: " + "  ".join(
            f"{mode} lat={res[mode]['lat'][-1]:.3f}us bw={res[mode]['bw'][-1]:.0f}MiB/s "
            f"mt={res[mode]['mt'][-1]:.3f}us put={res[mode]['put'][-1]:.3f}us "
            f"app={res[mode]['app'][-1]:.3f}s app2={res[mode]['app2'][-1]:.3f}s"
            for mode in ("native", "split")) +
            f"  floor lat={res['floor']['lat'][-1]:.3f}us mt={res['floor']['mt'][-1]:.3f}us "
            f"put={res['floor']['put'][-1]:.3f}us  isend cpu native/floor/split "
            f"{'/'.join(str(res[m]['cpu_isend'][-1]) for m in ('native', 'floor', 'split'))}ns",
            flush=True)
    for n in (4, 2):
        if residual[("native", n)] != residual[("split", n)]:
            raise SystemExit(f"the {n}-rank stencil's residual differs: {residual}")
    med = {m: {k: statistics.median(v) for k, v in d.items() if v} for m, d in res.items()}
    ck = checkpoint_figures(a, tmp, env, launch)
    shutil.rmtree(tmp, ignore_errors=True)
    def figures(name, key, unit, digits=4, inverse=False):
        """name_native_unit, name_split_unit (medians of the rounds) and
        name_overhead: the median of the rounds' split / native - 1
        (inverse: native / split - 1, for a bandwidth)"""
        n, sp = med["native"][key], med["split"][key]
        ratios = [(x / y if inverse else y / x) - 1
                  for x, y in zip(res["native"][key], res["split"][key])]
        out = {f"{name}_native_{unit}": round(n, digits),
               f"{name}_split_{unit}": round(sp, digits),
               f"{name}_overhead": round(statistics.median(ratios), 4)}
        if res["floor"][key]:   # fsfloor.h: the FS-base writes alone
            out[f"{name}_fs_floor_{unit}"] = round(med["floor"][key], digits)
            out[f"{name}_fs_floor_overhead"] = round(statistics.median(
                [y / x - 1 for x, y in zip(res["native"][key], res["floor"][key])]), 4)
        return out

    out = {"mpi": a.mpi, "split_onetls": env.get("STASIS_SPLIT_ONETLS", "on"), "rounds": a.rounds,
           **figures("latency", "lat", "us"),
           **figures("bw", "bw", "mibs", 1, inverse=True), **figures("mt_latency", "mt", "us"),
           **figures("rma_put", "put", "us"), **figures("app", "app", "s"),
           **{f"{k}_mean_overhead": figures(k, key, "us")[f"{k}_overhead"]
              for k, key in (("latency", "lat_mean"), ("mt_latency", "mt_mean"),
                             ("rma_put", "put_mean"))},
           **figures("app2", "app2", "s"), **percall_figures(res, med, calls), **ck}
    print(json.dumps(out))


def percall_figures(res, med, calls):
    """percall.c's CPU times: native, floor and split medians of the rounds,
    and the median of the rounds' split - floor"""
    out = {}
    for c in calls:
        k = f"cpu_{c}"
        out.update({f"percall_{c}_{m}_ns": round(med[m][k], 1)
                    for m in ("native", "floor", "split")})
        out[f"percall_{c}_above_floor_ns"] = round(statistics.median(
            [y - x for x, y in zip(res["floor"][k], res["split"][k])]), 1)
    return out


def checkpoint_figures(a, tmp, env, launch):
    stasis = str(pathlib.Path(a.build) / "src" / "cli" / "stasis")
    env = dict(env, STASIS_CONFIG="/dev/null", STASIS_LOG="info")
    disk = disk_dir(a.build)
    try:
        return measure_checkpoints(a, tmp, env, launch, stasis, disk)
    finally:
        for job in Job.started:     # left running only when a step failed
            job.kill()
        shutil.rmtree(disk, ignore_errors=True)


def measure_checkpoints(a, tmp, env, launch, stasis, disk):
    ckptmem = str(tmp / "ckptmem")
    nbytes = 4 * CKPT_MIB << 20

    def checkpoint(ck, *extra):
        t = time.perf_counter()
        r = subprocess.run([stasis, "checkpoint", "--dir", str(ck), *extra], env=env,
                           capture_output=True, text=True, timeout=300)
        dt = time.perf_counter() - t
        if r.returncode != 0 or not r.stdout.strip().startswith("ckpt-"):
            raise SystemExit(f"stasis checkpoint --dir {ck} {' '.join(extra)}: rc={r.returncode}"
                             f"\n{r.stdout}{r.stderr}")
        return r.stdout.strip(), dt

    def stop_and_pass(job, mib, what):
        (job.work / "stop").touch()
        rc = job.finish()
        if rc != 0 or f"PASS ranks=4 mib={mib}" not in job.text("out"):
            raise SystemExit(f"{what}: the job did not verify its data (rc={rc}):\n"
                             f"{job.text('out')}\n{job.text('err')}")

    def start(ck, work, mib):
        work.mkdir()
        job = Job([stasis, "run", "--dir", str(ck), "--", *launch(4), ckptmem, str(mib)], env, work)
        job.work = work
        job.wait("out", r"^READY$")
        return job

    established = r"checkpoint (ckpt-\d+): 4 ranks on \d+ nodes?, (\d+) pages, coordination (\S+) ms, " \
                  r"established after (\d+) ms"

    # coordination of small ranks
    job = start(disk / "ck-small", disk / "work-small", COORD_MIB)
    for i in range(COORD_CKPTS):
        checkpoint(disk / "ck-small")
        job.wait("err", established, i + 1)
    coord = [float(m.group(3)) for _, m in job.matching("err", established)]
    stop_and_pass(job, COORD_MIB, "ckptmem 4 MiB")

    # 1 GiB: checkpoints against dd conv=fsync, alternating
    ck = disk / "ck"
    job = start(ck, disk / "work", CKPT_MIB)
    ckpt_s, dd_write_s, dd_direct_s = [], [], []
    ddfile = disk / "dd.out"
    for i in range(a.ckpts):
        os.sync()
        # bs=1M: buffered 4M writes ran 0.97-2.4 s against 0.71-0.76 s for
        # the same GiB here (2026-11-27)
        dd_write_s.append(timed(["dd", "if=/dev/zero", f"of={ddfile}", "bs=1M",
                                 f"count={nbytes >> 20}", "conv=fsync"]))
        ddfile.unlink()
        os.sync()
        dd_direct_s.append(timed(["dd", "if=/dev/zero", f"of={ddfile}", "bs=4M",
                                  f"count={nbytes >> 22}", "oflag=direct", "conv=fsync"]))
        ddfile.unlink()
        os.sync()
        ckpt_s.append(checkpoint(ck)[1])
        print(f"checkpoint {i + 1}: {ckpt_s[-1]:.3f} s, dd conv=fsync {dd_write_s[-1]:.3f} s, "
              f"dd oflag=direct {dd_direct_s[-1]:.3f} s", flush=True)
    os.sync()
    name, stop_s = checkpoint(ck, "--stop")
    rc = job.finish()
    if rc != 0 or "PASS" in job.text("out"):
        raise SystemExit(f"stasis checkpoint --stop: the job ended with {rc}:\n{job.text('out')}"
                         f"\n{job.text('err')}")
    big = [m for _, m in job.matching("err", established)]   # the --stop one last
    images = sorted(ck.glob(f"*/{name}/rank-*.img"))
    if len(images) != 4:
        raise SystemExit(f"expected 4 rank images of {name} in {ck}: {images}")
    image_bytes = sum(p.stat().st_size for p in images)

    # restarts against reading the images, alternating, each from a cold
    # cache; every restarted job verifies its data. Each lazy restart (the
    # default) is followed by an eager one (STASIS_RESTORE_LAZY=0)
    restart_s, full_s, eager_s, dd_read_s, cold = [], [], [], [], True
    lazy_lines = r"lazy restore done|no lazy restore"

    def restart(extra_env):
        (disk / "work" / "stop").unlink(missing_ok=True)
        drop_caches()
        t = time.perf_counter()
        job = Job([stasis, "restart", "--dir", str(ck)], dict(env, **extra_env), disk / "work")
        job.work = disk / "work"
        registered = job.wait("err", r"rank \d+ of 4 registered", 4)
        resumed = job.wait("out", r"^RESUMED rank \d+$", 4)
        running = max(registered, resumed) - t
        full = job.wait("err", lazy_lines, 4) - t if not extra_env else running
        if not extra_env and job.matching("err", "no lazy restore"):
            raise SystemExit("no lazy restore:\n" + job.text("err"))
        stop_and_pass(job, CKPT_MIB, "the restarted ckptmem 256 MiB")
        return running, registered - t, full

    for i in range(a.ckpts):
        cold = drop_caches() and cold
        t = time.perf_counter()
        for img in images:
            subprocess.run(["dd", f"if={img}", "of=/dev/null", "bs=4M"], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        dd_read_s.append(time.perf_counter() - t)
        running, registered, full = restart({})
        restart_s.append(running)
        full_s.append(full)
        eager_s.append(restart({"STASIS_RESTORE_LAZY": "0"})[0])
        print(f"restart {i + 1}: {running:.3f} s (last rank registered after "
              f"{registered:.3f} s, every page in after {full:.3f} s), eager {eager_s[-1]:.3f} s, "
              f"dd read {dd_read_s[-1]:.3f} s, PASS", flush=True)
    return {
        "ckpt_vs_dd": round(statistics.median(ckpt_s) / statistics.median(dd_write_s), 4),
        "restart_vs_read": round(statistics.median(restart_s) / statistics.median(dd_read_s), 4),
        "coord_ms": statistics.median(coord),
        "ckpt_s": round(statistics.median(ckpt_s), 4),
        "dd_write_s": round(statistics.median(dd_write_s), 4),
        "ckpt_vs_dd_direct": round(statistics.median(ckpt_s) / statistics.median(dd_direct_s), 4),
        "dd_direct_s": round(statistics.median(dd_direct_s), 4),
        "restart_s": round(statistics.median(restart_s), 4),
        "restart_full_s": round(statistics.median(full_s), 4),
        "restart_full_vs_read": round(statistics.median(full_s) / statistics.median(dd_read_s), 4),
        "restart_eager_s": round(statistics.median(eager_s), 4),
        "restart_eager_vs_read": round(statistics.median(eager_s) / statistics.median(dd_read_s), 4),
        "dd_read_s": round(statistics.median(dd_read_s), 4),
        "ckpt_runs_s": [round(x, 4) for x in ckpt_s],
        "dd_write_runs_s": [round(x, 4) for x in dd_write_s],
        "dd_direct_runs_s": [round(x, 4) for x in dd_direct_s],
        "restart_runs_s": [round(x, 4) for x in restart_s],
        "restart_full_runs_s": [round(x, 4) for x in full_s],
        "restart_eager_runs_s": [round(x, 4) for x in eager_s],
        "dd_read_runs_s": [round(x, 4) for x in dd_read_s],
        "ckpt_established_ms": [int(m.group(4)) for m in big],
        "ckpt_coord_ms": [float(m.group(3)) for m in big],
        "ckpt_stop_s": round(stop_s, 4),
        "image_bytes": image_bytes,
        "coord_runs_ms": coord,
        "cold_cache": cold,
        "ckpt_fs": subprocess.run(["stat", "-f", "-c", "%T", str(disk)], capture_output=True,
                                  text=True).stdout.strip(),
    }


if __name__ == "__main__":
    main()

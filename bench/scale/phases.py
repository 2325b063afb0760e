#!/usr/bin/python3
"""bench/scale/phases.py: where one checkpoint's time goes at scale, per
phase and per kind of process (docs/scale.md, "Where the 65K checkpoint's
time goes"). Not a timed test.

One job of the scale harness (tests/scale, 65,536 simulated ranks on
1,024 node agents by default) takes a warm-up checkpoint, then one under
`perf record -a` (cpu-clock on every CPU, CLOCK_MONOTONIC time stamps,
the clock of the harness's events; its events turned on, and
acknowledged, before the request). The second checkpoint of a job is
measured: the first one's begin reads a fresh index. Each sample is put in a phase:

  stop     CHECKPOINT sent until the last simulated rank said PARKED
  write    ... until the last rank's image was committed (its DONE)
  seal     ... until the coordinator answered OK (established)

and counted for the process it interrupted: the coordinator (`stasis`),
the node agents (`stasis-node`), the simulated ranks (`mpirun.sim`, their
image writes and commits included), idle, other (other users of the
machine, perf itself). A sample is 1/--freq s of one CPU. The N
(--symbols) hottest functions of the coordinator, the agents and the
ranks in each phase follow.

usage: bench/scale/phases.py [--build DIR] [--size 65536] [--ppn 64]
                             [--freq 1000] [--symbols 8] [--store DIR]
The last line of output is one JSON object."""
import argparse
import collections
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PHASES = ("stop", "write", "seal")
KINDS = ("coordinator", "agents", "ranks", "idle", "other")


def kind_of(comm, pid, coord_pid):
    if pid == coord_pid:
        return "coordinator"
    if comm == "stasis-node":
        return "agents"
    if comm == "mpirun.sim":
        return "ranks"
    if pid == 0:
        return "idle"
    return "other"


def measure(h, a):
    d = pathlib.Path(tempfile.mkdtemp(prefix=f"phases-{a.size}-", dir=a.store))
    job = h.SimJob(d, a.size // a.ppn, a.ppn)
    data = d / "perf.data"
    try:
        job.start()
        job.wait_registered(0)
        ok, name, _, _ = job.checkpoint()
        assert ok, name
        # every rank had its RESUME: the next CHECKPOINT overtakes none
        # (a worker takes a checkpoint's name from its first CHECKPOINT)
        job.ckpt_events(name, a.size)
        # perf starts with its events off and says "ack" once they are on:
        # the checkpoint's first sample is its first millisecond's
        ctl, ack = d / "perf.ctl", d / "perf.ack"
        os.mkfifo(ctl)
        os.mkfifo(ack)
        perf = subprocess.Popen(["perf", "record", "-q", "-a", "-e", "cpu-clock", "-F",
                                 str(a.freq), "-k", "CLOCK_MONOTONIC", "-D", "-1", "--control",
                                 f"fifo:{ctl},{ack}", "-o", str(data)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(ctl, "w") as c, open(ack) as k:
            c.write("enable\n")
            c.flush()
            assert k.readline().strip() == "ack", "perf did not enable its events"
        ok, name, t0, t1 = job.checkpoint()
        perf.send_signal(2)
        perf.wait()
        assert ok, name
        ev = job.ckpt_events(name, a.size)
        ends = [max(e["parked_us"] for e in ev), max(e["done_us"] for e in ev), t1]
        coord = job.coord_pid()
        out = subprocess.run(["perf", "script", "-i", str(data), "-F", "comm,pid,time,ip,sym"],
                             capture_output=True, text=True).stdout
    finally:
        job.kill()
        shutil.rmtree(d, ignore_errors=True)
    cpu = {p: collections.Counter() for p in PHASES}
    syms = {p: collections.Counter() for p in PHASES}
    for line in out.splitlines():
        # "<comm> <pid> <sec.usec>: <sym>": comm may hold spaces
        head, _, sym = line.partition(": ")
        w = head.split()
        if len(w) < 3:
            continue
        try:
            pid, us = int(w[-2]), float(w[-1].rstrip(":")) * 1e6
        except ValueError:
            continue
        if us < t0 or us >= t1:
            continue
        p = PHASES[0] if us < ends[0] else PHASES[1] if us < ends[1] else PHASES[2]
        k = kind_of(" ".join(w[:-2]), pid, coord)
        cpu[p][k] += 1
        if k in ("coordinator", "agents", "ranks"):
            # "<ip> <function>+<offset>": the function
            f = sym.split()
            syms[p][k, f[1].split("+")[0] if len(f) > 1 else "?"] += 1
    ms = 1000.0 / a.freq
    bounds = [t0, *ends]
    rows = []
    for i, p in enumerate(PHASES):
        r = {"phase": p, "wall_ms": round((bounds[i + 1] - bounds[i]) / 1e3, 1)}
        r.update({k + "_cpu_ms": round(cpu[p][k] * ms, 1) for k in KINDS})
        for k in ("coordinator", "agents", "ranks"):
            top = [(s, n) for (kk, s), n in syms[p].most_common() if kk == k][:a.symbols]
            r[k + "_top"] = [[s, round(n * ms, 1)] for s, n in top]
        rows.append(r)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--size", type=int, default=65536)
    ap.add_argument("--ppn", type=int, default=64)
    ap.add_argument("--freq", type=int, default=1000)
    ap.add_argument("--symbols", type=int, default=8)
    ap.add_argument("--store", default="/dev/shm")
    a = ap.parse_args()
    if not shutil.which("perf"):
        sys.exit("bench/scale/phases.py: needs perf (linux-perf)")
    os.environ["STASIS_BUILD"] = str(pathlib.Path(a.build).resolve())
    sys.path.insert(0, str(ROOT / "tests/scale"))
    import scale_harness as h

    rows = measure(h, a)
    print(f"{'phase':6} {'wall ms':>8} " + " ".join(f"{k:>11}" for k in KINDS) + "   (CPU ms)")
    for r in rows:
        print(f"{r['phase']:6} {r['wall_ms']:8.0f} " +
              " ".join(f"{r[k + '_cpu_ms']:11.0f}" for k in KINDS))
    for r in rows:
        for k in ("coordinator", "agents", "ranks"):
            print(f"{k}, {r['phase']}: " + ", ".join(f"{s} {v:.0f}" for s, v in r[k + "_top"]))
    print(json.dumps({"ranks": a.size, "ppn": a.ppn, "phases": rows}))


if __name__ == "__main__":
    main()

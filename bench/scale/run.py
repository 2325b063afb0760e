#!/usr/bin/python3
"""bench/scale: the coordinator and its node agents at 1K to 65,536 ranks,
simulated (docs/scale.md: tests/scale/mpirun_sim.c drives the real
`stasis run` coordinator and one real stasis-node per simulated node, the
ranks simulated in event loops with tiny images). Not a timed test.

For each size (--ppn ranks a node, 64 by default):
  register_s      the first rank's RANK line to the last rank's OK (the
                  node agents already up; agents_s is their start)
  coord_ms        CHECKPOINT sent to the coordinator until the last
                  simulated rank said PARKED (every program stopped)
  written_ms      ... until the last rank's image was committed (DONE)
  established_ms  ... until the coordinator answered OK (COMPLETE in the
                  index)
  resumed_ms      ... until the last rank had its RESUME
  restart_register_s  `stasis restart` of the stopped job until every rank
                  registered again (node agents started anew included)
  coord_rss, coord_fds  the coordinator's VmRSS and open descriptors
                  with every rank registered
  coord_cpu_register_ms, coord_cpu_ckpt_ms  the coordinator's CPU time
                  (user + system) from its start until every rank
                  registered, and for one checkpoint; agent_cpu_ckpt_ms
                  a node agent's for one checkpoint (the mean). On 2
                  cores the simulation serializes what real nodes do at
                  once: the wall times above are upper bounds, these the
                  coordinator's own share (bench/scale/phases.py splits a
                  65K checkpoint's CPU by phase and process; docs/scale.md,
                  "Where the 65K checkpoint's time goes")
Medians of --rounds checkpoints. The store is on tmpfs (--store, /dev/shm
by default): the figures are the coordination's, not a disk's. Every
simulated rank joins the checkpoint before writing its image, as lower
halves do (store_ckpt_join_begun), and links one tiny image a
checkpoint under its name (--write store: each rank makes and commits
its own through image/ and store/, as a lower half does; SCALE_WRITE in
docs/scale.md); --join-sizes adds one checkpoint at those sizes with
--write store and a join per worker instead (SCALE_JOIN=worker), for
comparison.

The summary: register_20k_s (measured at 20,480 ranks), coord_ms_65k,
established_ms_65k, coord_bytes_per_rank (slope of the coordinator's RSS
from the smallest size to the largest), and the growth exponents
k = log(t65K/t4K) / log(16) of coord_ms and established_ms (1: linear,
0: constant). It writes bench/scale/scale.png (matplotlib; drawn by
/usr/bin/python3, Debian's, when this interpreter has none).

usage: bench/scale/run.py [--build DIR] [--sizes 1024,4096,...] [--ppn 64]
                          [--rounds 3] [--store DIR] [--plot FILE]
                          [--write batch|store]
The last line of output is one JSON object."""
import argparse
import json
import math
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def point(h, size, ppn, rounds, store, join="rank", restart=True, write="batch"):
    nodes = size // ppn
    d = pathlib.Path(tempfile.mkdtemp(prefix=f"scale-{size}-", dir=store))
    job = h.SimJob(d, nodes, ppn, env={"SCALE_JOIN": join, "SCALE_WRITE": write})
    r = {"ranks": size, "nodes": nodes}
    try:
        job.start()
        a0, a1, g0, g1 = job.wait_registered(0)
        r["agents_s"] = (a1 - a0) / 1e6
        r["agent_retries"] = job.events("agents")[-1].get("retries", 0)
        r["register_s"] = (g1 - g0) / 1e6
        r["launch_s"] = (g1 - job.started_us) / 1e6
        pid = job.coord_pid()
        agents = list(job.agent_pids().values())
        r["coord_cpu_register_ms"] = h.cpu_ms(pid)
        r["coord_rss"] = h.rss_bytes(pid)
        r["coord_fds"] = h.fds(pid)
        st = job.status()
        assert st["registered"] == f"{size}/{size}", st
        rows = []
        for i in range(rounds + 1):
            c0 = h.cpu_ms(pid)
            a0 = sum(h.cpu_ms(p) for p in agents)
            ok, name, t0, t1 = job.checkpoint(stop=i == rounds)
            c1 = h.cpu_ms(pid)
            a1 = sum(h.cpu_ms(p) for p in agents) if i < rounds else a0
            assert ok, name
            ev = job.ckpt_events(name, size)
            assert sum(e["ranks"] for e in ev) == size and all(e["done"] == e["ranks"] for e in ev), ev
            rows.append({"coord_ms": (max(e["parked_us"] for e in ev) - t0) / 1e3,
                         "written_ms": (max(e["done_us"] for e in ev) - t0) / 1e3,
                         "established_ms": (t1 - t0) / 1e3,
                         "resumed_ms": (max(e["verdict_us"] for e in ev) - t0) / 1e3,
                         "coord_cpu_ckpt_ms": c1 - c0,
                         "agent_cpu_ckpt_ms": (a1 - a0) / nodes})
        # the last one was --stop: the job ends, its ranks saying BYE
        assert job.wait() == 0, job.stderr()[-2000:]
        for k in rows[0]:
            r[k] = statistics.median(x[k] for x in rows[:rounds])
        if restart:
            job.restart()
            a0, a1, g0, g1 = job.wait_registered(1)
            r["restart_register_s"] = (g1 - job.started_us) / 1e6
            r["restart_rank_register_s"] = (g1 - g0) / 1e6
        job.kill()
    finally:
        job.kill()
        shutil.rmtree(d, ignore_errors=True)
    return r


def plot(rows, joins, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = [r["ranks"] for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    for key, label in (("coord_ms", "request → every rank stopped"),
                       ("written_ms", "→ every image written"),
                       ("established_ms", "→ established"),
                       ("coord_cpu_ckpt_ms", "the coordinator's CPU time in a checkpoint"),
                       ("register_s", "registration of every rank"),
                       ("restart_register_s", "restart until every rank registered")):
        scale = 1000 if key.endswith("_s") else 1
        a.plot(n, [r[key] * scale for r in rows], marker="o", label=label)
    if joins:
        a.plot([r["ranks"] for r in joins], [r["written_ms"] for r in joins], marker="x",
               linestyle="--", label="→ every image written, a join a worker")
    a.set_xscale("log", base=2)
    a.set_yscale("log")
    a.set_xlabel("simulated ranks (64 a node)")
    a.set_ylabel("ms")
    a.set_title("Stasis coordinator + node agents")
    a.legend(fontsize=8)
    a.grid(True, which="both", alpha=0.3)
    b.plot(n, [r["coord_rss"] / 2**20 for r in rows], marker="o", label="coordinator RSS (MiB)")
    b.plot(n, [r["coord_fds"] for r in rows], marker="s", label="coordinator descriptors")
    b.set_xscale("log", base=2)
    b.set_yscale("log")
    b.set_xlabel("simulated ranks")
    b.legend(fontsize=8)
    b.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--sizes", default="1024,4096,16384,20480,65536")
    ap.add_argument("--ppn", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--join-sizes", default="")
    ap.add_argument("--write", choices=("batch", "store"), default="batch")
    ap.add_argument("--store", default="/dev/shm")
    ap.add_argument("--plot", default=str(HERE / "scale.png"))
    ap.add_argument("--replot", metavar="FILE", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.replot:
        return replot(a.replot)
    os.environ["STASIS_BUILD"] = str(pathlib.Path(a.build).resolve())
    sys.path.insert(0, str(ROOT / "tests/scale"))
    import scale_harness as h

    rows = []
    for size in [int(x) for x in a.sizes.split(",")]:
        r = point(h, size, a.ppn, a.rounds, a.store, write=a.write)
        print(json.dumps(r), flush=True)
        rows.append(r)
    # each worker joining a checkpoint once for all its ranks (what the
    # harness did while a join read the whole index): the images' time
    joins = []
    for size in [int(x) for x in a.join_sizes.split(",") if x]:
        r = point(h, size, a.ppn, 1, a.store, join="worker", restart=False, write="store")
        print(json.dumps({"join": "worker", **r}), flush=True)
        joins.append(r)
    by = {r["ranks"]: r for r in rows}

    def k(key, lo=4096, hi=65536):
        if lo in by and hi in by and by[lo][key] > 0:
            return round(math.log(by[hi][key] / by[lo][key]) / math.log(hi / lo), 3)
        return None

    first, last = rows[0], rows[-1]
    out = {
        "register_20k_s": by.get(20480, {}).get("register_s"),
        "coord_ms_65k": by.get(65536, {}).get("coord_ms"),
        "established_ms_65k": by.get(65536, {}).get("established_ms"),
        "written_ms_65k": by.get(65536, {}).get("written_ms"),
        "register_65k_s": by.get(65536, {}).get("register_s"),
        "restart_register_65k_s": by.get(65536, {}).get("restart_register_s"),
        "coord_bytes_per_rank": round((last["coord_rss"] - first["coord_rss"]) /
                                      max(1, last["ranks"] - first["ranks"]), 1),
        "coord_fds_65k": by.get(65536, {}).get("coord_fds"),
        "write": a.write,
        "growth_exponent_coord_4k_65k": k("coord_ms"),
        "growth_exponent_established_4k_65k": k("established_ms"),
        "growth_exponent_register_4k_65k": k("register_s"),
    }
    if len(joins) > 1:
        lo, hi = joins[0], joins[-1]
        out["written_ms_worker_join"] = {r["ranks"]: round(r["written_ms"]) for r in joins}
        out["growth_exponent_written_worker_join"] = round(
            math.log(hi["written_ms"] / lo["written_ms"]) / math.log(hi["ranks"] / lo["ranks"]), 3)
    if draw(rows, joins, a.plot):
        out["plot"] = a.plot
    print(json.dumps(out))


# Debian's python3-matplotlib is installed for /usr/bin/python3 (scripts/
# deps.sh); the `python3` on PATH may be another interpreter without it
# (pyenv): the plot is then drawn by /usr/bin/python3, from the rows.
SYSTEM_PYTHON = "/usr/bin/python3"


def draw(rows, joins, path):
    try:
        plot(rows, joins, path)
        return True
    except ImportError:
        pass
    if os.path.realpath(sys.executable) != os.path.realpath(SYSTEM_PYTHON) and \
            os.access(SYSTEM_PYTHON, os.X_OK):
        r = subprocess.run([SYSTEM_PYTHON, __file__, "--replot", path],
                           input=json.dumps({"rows": rows, "joins": joins}), text=True)
        if r.returncode == 0:
            return True
    print("bench/scale: no matplotlib (python3-matplotlib): no plot", file=sys.stderr)
    return False


def replot(path):
    """--replot FILE: the plot of the rows on stdin ({"rows": [...], "joins":
    [...]}, as main has them), with this interpreter's matplotlib"""
    d = json.load(sys.stdin)
    plot(d["rows"], d["joins"], path)


if __name__ == "__main__":
    main()

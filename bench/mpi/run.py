#!/usr/bin/env python3
"""bench/mpi: MPI programs natively and as the split process's upper half,
side by side in one run (issue 6). Not a timed test: it reports ratios.

  latency_overhead  8-byte ping-pong latency, split / native - 1
  bw_overhead       1 MiB ping-pong bandwidth, native / split - 1
  app_overhead      4-rank stencil (halo exchange + Allreduce every
                    iteration), runtime split / native - 1

Rounds alternate native and split runs; each figure is the median of its
rounds. The checkpoint figures of the issue (ckpt_vs_dd, restart_vs_read,
coord_ms) need the split process's checkpoint, which does not exist yet:
they are reported as null.

usage: bench/mpi/run.py [--build DIR] [--mpi openmpi|mpich] [--rounds N]
The last line of output is one JSON object."""
import argparse
import json
import os
import pathlib
import re
import statistics
import subprocess
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
HERE = pathlib.Path(__file__).resolve().parent


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--mpi", default="openmpi", choices=["openmpi", "mpich"])
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    lh = pathlib.Path(a.build) / "src" / "split" / f"stasis-lh-{a.mpi}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("STASIS_")}
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="stasis-bench-mpi-"))
    cc = f"mpicc.{a.mpi}"
    for prog in ("pingpong", "stencil"):
        subprocess.run([cc, "-O2", "-o", str(tmp / prog), str(HERE / f"{prog}.c")], check=True)

    def launch(n):
        if a.mpi == "openmpi":
            return ["mpirun.openmpi", "--oversubscribe", "--bind-to", "none", "-np", str(n)]
        return ["mpiexec.mpich", "-n", str(n)]

    def run(n, args, split):
        cmd = launch(n) + ([str(lh)] if split else []) + args
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=tmp)
        if r.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed: {r.stderr}")
        return r.stdout

    res = {"native": {"lat": [], "bw": [], "app": []}, "split": {"lat": [], "bw": [], "app": []}}
    residual = {}
    for rnd in range(a.rounds):
        for mode in ("native", "split"):
            out = run(2, [str(tmp / "pingpong"), "8", "20000"], mode == "split")
            res[mode]["lat"].append(float(re.search(r"latency_us (\S+)", out).group(1)))
            out = run(2, [str(tmp / "pingpong"), str(1 << 20), "200"], mode == "split")
            res[mode]["bw"].append(float(re.search(r"bw_mibs (\S+)", out).group(1)))
            out = run(4, [str(tmp / "stencil"), "1024", "300"], mode == "split")
            m = re.search(r"residual (\S+) seconds (\S+)", out)
            residual.setdefault(mode, m.group(1))
            res[mode]["app"].append(float(m.group(2)))
        print(f"round {rnd + 1}: " + "  ".join(
            f"{mode} lat={res[mode]['lat'][-1]:.3f}us bw={res[mode]['bw'][-1]:.0f}MiB/s "
            f"app={res[mode]['app'][-1]:.3f}s" for mode in ("native", "split")), flush=True)
    if residual["native"] != residual["split"]:
        raise SystemExit(f"the stencil's residual differs: {residual}")
    med = {m: {k: statistics.median(v) for k, v in d.items()} for m, d in res.items()}
    out = {
        "mpi": a.mpi,
        "rounds": a.rounds,
        "latency_native_us": round(med["native"]["lat"], 4),
        "latency_split_us": round(med["split"]["lat"], 4),
        "latency_overhead": round(med["split"]["lat"] / med["native"]["lat"] - 1, 4),
        "bw_native_mibs": round(med["native"]["bw"], 1),
        "bw_split_mibs": round(med["split"]["bw"], 1),
        "bw_overhead": round(med["native"]["bw"] / med["split"]["bw"] - 1, 4),
        "app_native_s": round(med["native"]["app"], 4),
        "app_split_s": round(med["split"]["app"], 4),
        "app_overhead": round(med["split"]["app"] / med["native"]["app"] - 1, 4),
        "ckpt_vs_dd": None,
        "restart_vs_read": None,
        "coord_ms": None,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()

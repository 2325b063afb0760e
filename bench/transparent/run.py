#!/usr/bin/env python3
"""bench/transparent: the transparent checkpointer against this machine's floors,
measured in one run (issue 5). Not a timed test: it reports ratios.

  ckpt_vs_dd      `stasis checkpoint` of a process with 1 GiB of random data
                  resident, until established / `dd bs=1M conv=fsync` of 1 GiB
  image_vs_rss    image bytes / resident bytes of the process
  restart_vs_read `stasis restart` with a cold page cache until the program
                  runs again / `dd` reading the image cold
  overhead        a compute-bound loop under `stasis run` / native - 1
  lazy_first_output_vs_eager  the same checkpoint restarted with a cold page
                  cache, lazily (STASIS_RESTORE_LAZY=1) / eagerly: seconds
                  from `stasis restart` to the program's first line after it
                  (it prints one when it sees it was stopped)
  lazy_all_in_vs_eager  the same until the program, told to, read one byte
                  of every page of its 1 GiB and ended
  tree_ckpt_vs_dd a tree of 8 processes holding 128 MiB of random data each:
                  `stasis checkpoint` until established / `dd bs=1M
                  conv=fsync` of the same bytes (1 GiB)
  tree_restart_vs_read  its `stasis restart` with a cold page cache until
                  the program runs again, every process and every page in
                  (a process restarts eagerly) / `dd` reading its 8 images
                  cold, one after the other
                  (the tree's figures are medians of --rounds rounds)

usage: bench/transparent/run.py [--build DIR] [--dir SCRATCH] [--mib N]
                                [--tree-procs N] [--tree-mib N] [--rounds N]
                                [--only single|tree]
The last line of output is one JSON object."""
import argparse
import json
import os
import pathlib
import signal
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]

HOLDER = r"""
import os, sys, time
data = bytearray(os.urandom(%d << 20))
print("READY", flush=True)
last = time.monotonic()
while not os.path.exists("stop"):
    time.sleep(0.01)
    now = time.monotonic()
    if now - last > 0.5:
        print("BACK", flush=True)   # restarted (or stopped that long)
    last = now
print(sum(data[::4096]) & 0xff)
"""

# The tree: the first process forks the others; each fills its own memory
# (after the fork: nothing shared copy-on-write) and says so on a pipe.
TREE = r"""
import os, sys, time
n, mib = %d, %d
r, w = os.pipe()
kids = []
for i in range(n - 1):
    pid = os.fork()
    if pid == 0:
        os.close(r)
        data = bytearray(os.urandom(mib << 20))
        os.write(w, b"x")
        os.close(w)
        while not os.path.exists("stop"):
            time.sleep(0.01)
        os._exit(sum(data[::4096]) & 0x7f)
    kids.append(pid)
os.close(w)
data = bytearray(os.urandom(mib << 20))
got = 0
while got < n - 1:
    got += len(os.read(r, n))
os.close(r)
print("READY", flush=True)
print(sum(os.waitstatus_to_exitcode(os.waitpid(k, 0)[1]) for k in kids) + (sum(data[::4096]) & 0x7f))
"""

LOOP = r"""
import sys
x = 0
for i in range(%d):
    x = (x * 1103515245 + 12345 + i) & 0xffffffff
print(x)
"""


def drop_caches():
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def timed(cmd, **kw):
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, **kw)
    return time.perf_counter() - t


def timed_restart(stasis, ck, work, env):
    """`stasis restart` until `stasis status` says the program runs: the
    seconds and the restart's process."""
    t = time.perf_counter()
    rs = subprocess.Popen([stasis, "restart", "--dir", str(ck)], cwd=work, env=env,
                          stdout=subprocess.PIPE, text=True)
    while True:
        r = subprocess.run([stasis, "status", "--dir", str(ck)], env=env, capture_output=True,
                           text=True)
        if "  running  " in r.stdout:
            break
        if rs.poll() is not None:
            sys.exit("restart failed")
        time.sleep(0.005)
    return time.perf_counter() - t, rs


def first_output(stasis, ck, work, env):
    """`stasis restart` with a cold page cache: the seconds until the
    program's first line after it, and until it ended after reading a byte
    of each page."""
    (work / "stop").unlink(missing_ok=True)
    drop_caches()
    t = time.perf_counter()
    rs = subprocess.Popen([stasis, "restart", "--dir", str(ck)], cwd=work, env=env,
                          stdout=subprocess.PIPE, text=True)
    line = rs.stdout.readline()
    first = time.perf_counter() - t
    if line.strip() != "BACK":
        sys.exit(f"the restarted program said {line!r}, not BACK")
    (work / "stop").touch()
    rs.communicate(timeout=300)
    if rs.returncode != 0:
        sys.exit(f"the restarted program failed: rc {rs.returncode}")
    return first, time.perf_counter() - t


def tree_round(stasis, py, scratch, env, procs, mib):
    """One round of tree_ckpt_vs_dd and tree_restart_vs_read, in directories
    of its own."""
    work = scratch / "tree-work"
    ck = scratch / "tree-ck"
    subprocess.run(["rm", "-rf", str(work), str(ck)], check=True)
    work.mkdir()
    (work / "tree.py").write_text(TREE % (procs, mib))
    total = procs * mib
    dd_write = timed(["dd", "if=/dev/zero", f"of={scratch}/dd-tree.out", "bs=1M",
                      f"count={total}", "conv=fsync"], stderr=subprocess.DEVNULL)
    os.unlink(scratch / "dd-tree.out")
    run = subprocess.Popen([stasis, "run", "--dir", str(ck), "--", py, "tree.py"], cwd=work,
                           env=env, stdout=subprocess.PIPE, text=True)
    assert run.stdout.readline().strip() == "READY"
    ckpt = timed([stasis, "checkpoint", "--dir", str(ck)], env=env, cwd=work)
    images = sorted(next(ck.glob("*/ckpt-000001")).glob("process*.img"))
    assert len(images) == procs, images
    image_bytes = sum(i.stat().st_size for i in images)
    stopped = [run.pid] + descendants(run.pid)
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)
    for pid in stopped:
        os.kill(pid, signal.SIGKILL)
    run.wait()

    drop_caches()
    dd_read = sum(timed(["dd", f"if={i}", "of=/dev/null", "bs=1M"], stderr=subprocess.DEVNULL)
                  for i in images)
    drop_caches()
    restart, rs = timed_restart(stasis, ck, work, env)
    (work / "stop").touch()
    out, _ = rs.communicate(timeout=120)
    if rs.returncode != 0:
        sys.exit(f"the restarted tree failed: rc {rs.returncode}")
    return {
        "tree_procs": procs, "tree_mib": mib,
        "tree_ckpt_s": round(ckpt, 3), "tree_dd_write_s": round(dd_write, 3),
        "tree_ckpt_vs_dd": round(ckpt / dd_write, 3), "tree_image_bytes": image_bytes,
        "tree_restart_s": round(restart, 3), "tree_dd_read_s": round(dd_read, 3),
        "tree_restart_vs_read": round(restart / dd_read, 3),
    }


def tree_figures(stasis, py, scratch, env, procs, mib, rounds):
    """Each of the tree's figures, the median of rounds rounds (the lower
    one of an even number: a figure one round measured)."""
    got = [tree_round(stasis, py, scratch, env, procs, mib) for _ in range(rounds)]
    out = {k: statistics.median_low(r[k] for r in got) for k in got[0]}
    out["tree_rounds"] = rounds
    return out


def descendants(pid):
    out = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            for c in f.read().split():
                out += [int(c)] + descendants(int(c))
    return out


def single_figures(stasis, py, scratch, env, mib):
    """The figures of one process holding mib MiB, and the overhead."""
    work = scratch / "work"
    work.mkdir(parents=True)
    ck = scratch / "ck"
    (work / "holder.py").write_text(HOLDER % mib)

    # floor: dd write + fsync of the same amount, in the same directory
    dd_write = timed(["dd", "if=/dev/zero", f"of={scratch}/dd.out", "bs=1M",
                      f"count={mib}", "conv=fsync"], stderr=subprocess.DEVNULL)

    run = subprocess.Popen([stasis, "run", "--dir", str(ck), "--", py, "holder.py"], cwd=work,
                           env=env, stdout=subprocess.PIPE, text=True)
    assert run.stdout.readline().strip() == "READY"
    pid = int(subprocess.run(["pgrep", "-P", str(run.pid)], capture_output=True, text=True)
              .stdout.split()[0])
    with open(f"/proc/{pid}/status") as f:
        rss = [int(l.split()[1]) * 1024 for l in f if l.startswith("VmRSS:")][0]
    ckpt = timed([stasis, "checkpoint", "--dir", str(ck)], env=env, cwd=work)
    image = next(ck.glob("*/ckpt-000001/process.img"))
    image_bytes = image.stat().st_size
    os.kill(run.pid, signal.SIGKILL)
    os.kill(pid, signal.SIGKILL)
    run.wait()

    cold = drop_caches()
    dd_read = timed(["dd", f"if={image}", "of=/dev/null", "bs=1M"], stderr=subprocess.DEVNULL)
    drop_caches()
    restart, rs = timed_restart(stasis, ck, work, env)
    (work / "stop").touch()
    rs.communicate(timeout=120)
    first_eager, all_eager = first_output(stasis, ck, work, env)
    first_lazy, all_lazy = first_output(stasis, ck, work, {**env, "STASIS_RESTORE_LAZY": "1"})

    n = 10_000_000
    (work / "loop.py").write_text(LOOP % n)
    native = min(timed([py, "loop.py"], cwd=work) for _ in range(3))
    under = min(timed([stasis, "run", "--dir", str(ck), "--job", "loop", "--", py, "loop.py"],
                      cwd=work, env=env) for _ in range(3))
    result = {
        "mib": mib,
        "ckpt_s": round(ckpt, 3), "dd_write_s": round(dd_write, 3),
        "ckpt_vs_dd": round(ckpt / dd_write, 3),
        "image_bytes": image_bytes, "rss_bytes": rss,
        "image_vs_rss": round(image_bytes / rss, 4),
        "restart_s": round(restart, 3), "dd_read_s": round(dd_read, 3), "cold_cache": cold,
        "restart_vs_read": round(restart / dd_read, 3),
        "first_output_eager_s": round(first_eager, 3), "first_output_lazy_s": round(first_lazy, 3),
        "lazy_first_output_vs_eager": round(first_lazy / first_eager, 3),
        "all_in_eager_s": round(all_eager, 3), "all_in_lazy_s": round(all_lazy, 3),
        "lazy_all_in_vs_eager": round(all_lazy / all_eager, 3),
        "native_s": round(native, 3), "under_stasis_s": round(under, 3),
        "overhead": round(under / native - 1, 4),
    }
    return result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--dir", default="/tmp/stasis-bench-transparent")
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--tree-procs", type=int, default=8)
    ap.add_argument("--tree-mib", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", choices=("single", "tree"))
    a = ap.parse_args()
    stasis = str(pathlib.Path(a.build).resolve() / "src" / "cli" / "stasis")
    py = "/usr/bin/python3"
    scratch = pathlib.Path(a.dir)
    subprocess.run(["rm", "-rf", str(scratch)], check=True)
    scratch.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("STASIS_")}
    env["STASIS_CONFIG"] = "/dev/null"
    result = {}
    if a.only != "tree":
        result.update(single_figures(stasis, py, scratch, env, a.mib))
    if a.only != "single":
        result.update(tree_figures(stasis, py, scratch, env, a.tree_procs, a.tree_mib,
                                   a.rounds))
    subprocess.run(["rm", "-rf", str(scratch)])
    print(json.dumps(result))


if __name__ == "__main__":
    main()

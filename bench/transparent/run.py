#!/usr/bin/env python3
"""bench/transparent: the transparent checkpointer against this machine's floors,
measured in one run (issue 5). Not a timed test: it reports ratios.

  ckpt_vs_dd      `stasis checkpoint` of a process with 1 GiB of random data
                  resident, until established / `dd bs=1M conv=fsync` of 1 GiB
  image_vs_rss    image bytes / resident bytes of the process
  restart_vs_read `stasis restart` with a cold page cache until the program
                  runs again / `dd` reading the image cold
  overhead        a compute-bound loop under `stasis run` / native - 1

usage: bench/transparent/run.py [--build DIR] [--dir SCRATCH] [--mib N]
The last line of output is one JSON object."""
import argparse
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]

HOLDER = r"""
import os, sys, time
data = bytearray(os.urandom(%d << 20))
print("READY", flush=True)
while not os.path.exists("stop"):
    time.sleep(0.01)
print(sum(data[::4096]) & 0xff)
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--dir", default="/tmp/stasis-bench-transparent")
    ap.add_argument("--mib", type=int, default=1024)
    a = ap.parse_args()
    stasis = str(pathlib.Path(a.build).resolve() / "src" / "cli" / "stasis")
    py = "/usr/bin/python3"
    scratch = pathlib.Path(a.dir)
    subprocess.run(["rm", "-rf", str(scratch)], check=True)
    work = scratch / "work"
    work.mkdir(parents=True)
    ck = scratch / "ck"
    env = {k: v for k, v in os.environ.items() if not k.startswith("STASIS_")}
    env["STASIS_CONFIG"] = "/dev/null"
    (work / "holder.py").write_text(HOLDER % a.mib)

    # floor: dd write + fsync of the same amount, in the same directory
    dd_write = timed(["dd", "if=/dev/zero", f"of={scratch}/dd.out", "bs=1M",
                      f"count={a.mib}", "conv=fsync"], stderr=subprocess.DEVNULL)

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
    restart = time.perf_counter() - t
    (work / "stop").touch()
    rs.communicate(timeout=120)

    n = 10_000_000
    (work / "loop.py").write_text(LOOP % n)
    native = min(timed([py, "loop.py"], cwd=work) for _ in range(3))
    under = min(timed([stasis, "run", "--dir", str(ck), "--job", "loop", "--", py, "loop.py"],
                      cwd=work, env=env) for _ in range(3))
    result = {
        "mib": a.mib,
        "ckpt_s": round(ckpt, 3), "dd_write_s": round(dd_write, 3),
        "ckpt_vs_dd": round(ckpt / dd_write, 3),
        "image_bytes": image_bytes, "rss_bytes": rss,
        "image_vs_rss": round(image_bytes / rss, 4),
        "restart_s": round(restart, 3), "dd_read_s": round(dd_read, 3), "cold_cache": cold,
        "restart_vs_read": round(restart / dd_read, 3),
        "native_s": round(native, 3), "under_stasis_s": round(under, 3),
        "overhead": round(under / native - 1, 4),
    }
    subprocess.run(["rm", "-rf", str(scratch)])
    print(json.dumps(result))


if __name__ == "__main__":
    main()

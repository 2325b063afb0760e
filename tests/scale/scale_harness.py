"""The scale harness from Python (docs/scale.md): a job of simulated ranks
and nodes (tests/scale/mpirun_sim.c) under the real `stasis run`, its
events, and the coordinator's protocol (docs/coordinator.md) spoken
directly, so that a request's time is taken next to the socket.

Used by tests/scale/test_scale.py and bench/scale/run.py."""
import json
import os
import pathlib
import re
import socket
import subprocess
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("STASIS_BUILD", str(ROOT / "build"))).resolve()
STASIS = os.environ.get("STASIS_BIN", str(BUILD / "src/cli/stasis"))
SIM = str(BUILD / "tests/scale/mpirun.sim")
JOB = "true"   # the job's name: the program operand's (/bin/true, never run)
# the coordinator's protocol version, from its one definition
PROTOCOL = int(re.search(r"#define COORD_PROTOCOL_VERSION (\d+)",
                         (ROOT / "src/coord/coord.h").read_text()).group(1))


def now_us():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000


class SimJob:
    """`stasis run --dir <dir>/ck -- mpirun.sim --nodes N --ppn P /bin/true`,
    the harness's files under dir (the agents' sockets in dir/tmp)."""

    def __init__(self, dir, nodes, ppn, env=None):
        self.dir = pathlib.Path(dir)
        self.ck = self.dir / "ck"
        self.stats = self.dir / "stats"
        self.nodes, self.ppn, self.size = nodes, ppn, nodes * ppn
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("STASIS_", "SCALE_"))}
        self.env.update(SCALE_DIR=str(self.dir / "tmp"), SCALE_STATS=str(self.stats))
        self.env.update(env or {})
        self.proc = None
        self.started_us = 0

    def _spawn(self, args):
        self.started_us = now_us()
        self.err = open(self.dir / "stderr", "ab")
        self.proc = subprocess.Popen([STASIS, *args], env=self.env, stdout=self.err,
                                     stderr=self.err, stdin=subprocess.DEVNULL)

    def start(self):
        self.dir.mkdir(parents=True, exist_ok=True)
        self._spawn(["run", "--dir", str(self.ck), "--", SIM, "--nodes", str(self.nodes),
                     "--ppn", str(self.ppn), "/bin/true"])

    def restart(self):
        self._spawn(["restart", "--dir", str(self.ck)])

    def events(self, kind=None):
        try:
            lines = self.stats.read_text().splitlines()
        except FileNotFoundError:
            return []
        ev = [json.loads(x) for x in lines if x.strip()]
        return [e for e in ev if kind is None or e["event"] == kind]

    def stderr(self):
        self.err.flush()
        return (self.dir / "stderr").read_text(errors="replace")

    def wait_registered(self, restarts=0, timeout=600):
        """Every worker's ranks registered (this run: restarts); returns
        (agents start..ready us, registration start..end us)"""
        workers = (self.size + 16383) // 16384
        end = time.time() + timeout
        while time.time() < end:
            regs = [e for e in self.events("registered") if e["restarts"] == restarts]
            if len(regs) == workers:
                ag = [e for e in self.events("agents")][-1]
                return (ag["start_us"], ag["ready_us"], min(e["start_us"] for e in regs),
                        max(e["done_us"] for e in regs))
            if self.proc.poll() is not None:
                raise AssertionError(f"stasis ended ({self.proc.returncode}): {self.stderr()}")
            time.sleep(0.05)
        raise AssertionError(f"not every rank registered in {timeout} s: {self.stderr()[-2000:]}")

    def request(self, line, timeout=600):
        """One request to the coordinator: (ok, reply, us when sent, us when
        answered)"""
        jdir = self.ck / JOB
        secret = (jdir / "coord.secret").read_text().strip()
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        s.connect(str(jdir / "coord.sock"))
        f = s.makefile("rwb", buffering=0)
        f.readline()
        f.write(f"HELLO {PROTOCOL} {secret}\n".encode())
        assert f.readline().strip() == b"OK"
        t0 = now_us()
        f.write((line + "\n").encode())
        reply = f.readline().decode().strip()
        t1 = now_us()
        s.close()
        ok = reply.startswith("OK")
        return ok, reply[3:] if ok else reply[4:], t0, t1

    def checkpoint(self, stop=False):
        return self.request("CHECKPOINT stop" if stop else "CHECKPOINT")

    def status(self):
        ok, reply, _, _ = self.request("STATUS", timeout=60)
        assert ok, reply
        fields = {}
        for w in reply.split():
            k, _, v = w.partition("=")
            if k == "ranks" and "registered" not in fields:
                k = "registered"   # ranks=<registered>/<size>, then the list
            fields[k] = v
        return fields

    def ckpt_events(self, name, ranks=None, timeout=120):
        """The workers' lines about checkpoint name (each writes its own
        once its ranks have the verdict): until they cover ranks ranks"""
        end = time.time() + timeout
        while True:
            ev = [e for e in self.events("checkpoint") if e["name"] == name]
            if ranks is None or sum(e["ranks"] for e in ev) >= ranks or time.time() > end:
                return ev
            time.sleep(0.02)

    def agent_pids(self):
        """host -> pid of every node agent the launcher started"""
        lines = (self.dir / "tmp/agents").read_text().split("\n")
        return {w[0]: int(w[1]) for w in (x.split() for x in lines) if w}

    def coord_pid(self):
        return self.proc.pid

    def kill(self):
        """SIGKILL the coordinator: its node agents see it close and end,
        and the simulated ranks with them"""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.proc:
            self.err.close()
        self.proc = None

    def wait(self, timeout=600):
        rc = self.proc.wait(timeout)
        self.err.close()
        self.proc = None
        return rc


def rss_bytes(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def cpu_ms(pid):
    """CPU time of pid's main thread so far, in ms (schedstat: ns, where
    /proc/PID/stat counts 10 ms ticks)"""
    return int(open(f"/proc/{pid}/schedstat").read().split()[0]) / 1e6


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def sim_processes():
    """pids of stasis-node and mpirun.sim processes still running"""
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                comm = open(f"/proc/{p}/comm").read().strip()
            except OSError:
                continue
            if comm in ("stasis-node", "mpirun.sim"):
                out.append(int(p))
    return out

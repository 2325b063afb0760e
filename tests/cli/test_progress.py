"""The progress line (docs/cli.md, "Progress"): on a terminal (a pty here),
a command that runs for more than a second shows one line on stderr,
redrawn after a carriage return and cleared at the end; a shorter one shows
nothing, and with stderr not a terminal nothing is ever written (and
`stasis checkpoint` does not even ask the coordinator for its STATUS)."""
import fcntl
import json
import os
import pathlib
import pty
import re
import struct
import subprocess
import sys
import termios
import threading
import time

import pytest

from fakecoord import FakeCoordinator

# (not from conftest: in a session with tests/mpi, "conftest" may be theirs)
ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = os.environ.get("STASIS_BIN", str(ROOT / "build" / "src" / "cli" / "stasis"))
CRASH_MARKERS = ("AddressSanitizer", "runtime error:", "LeakSanitizer", "Segmentation fault",
                 "Traceback", "core dumped", "Aborted")

RATE = r"(-|\d+(\.\d)? (B|KiB|MiB|GiB)/s)"


def on_pty(stasis, *args, cols=200, env=None):
    """Run stasis with stderr on a terminal (stdout a pipe); (stderr bytes
    as text, stdout, exit status, seconds)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, cols, 0, 0))
    e = dict(stasis.env)
    e.update(env or {})
    t0 = time.monotonic()
    p = subprocess.Popen([BIN, *map(str, args)], cwd=stasis.tmp, env=e, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    err = b""
    while True:
        try:
            d = os.read(master, 65536)
        except OSError:   # EIO: every writer of the terminal closed it
            break
        if not d:
            break
        err += d
    os.close(master)
    out = p.stdout.read().decode()
    p.wait()
    text = err.decode()
    for m in CRASH_MARKERS:
        assert m not in text, text
    return text, out, p.returncode, time.monotonic() - t0


def lines_of(err):
    """The texts drawn (trailing padding dropped), after checking the frame:
    every draw starts with \\r, and the last one is cleared with spaces over
    exactly the longest tail left on the terminal, then \\r."""
    assert err.startswith("\r"), repr(err)
    assert err.endswith("\r"), repr(err)
    parts = err[1:-1].split("\r")
    *drawn, clear = parts
    assert drawn, repr(err)
    assert clear == " " * len(drawn[-1].rstrip(" ")), repr(err)
    return [d.rstrip(" ") for d in drawn]


# ---- stasis checkpoint, against a stand-in coordinator ----

STEP = 0.6


def writing_coordinator(job_dir):
    """Answers STATUS for a 2-rank MPI job; on CHECKPOINT does nothing for
    1.6 s (the ranks stop), then writes ckpt-000002/rank-00000.img (1 MiB)
    and rank-00001.img (2 MiB) as the ranks would, and answers."""
    def handler(req):
        if req == "STATUS":
            return "OK job=sim launcher=9 ranks=2/2 checkpoints=0 last=- ranks=0:10@n1,1:11@n1"
        time.sleep(1.6)
        # each step appears at once (renames), so every sample sees a whole one
        d = job_dir / "ckpt-000002"
        (job_dir / "new").mkdir()
        (job_dir / "new/rank-00000.img.tmp").write_bytes(b"x" * (1 << 20))
        os.rename(job_dir / "new", d)
        time.sleep(STEP)
        os.rename(d / "rank-00000.img.tmp", d / "rank-00000.img")
        (d / "part").write_bytes(b"y" * (2 << 20))
        os.rename(d / "part", d / "rank-00001.img.tmp")
        time.sleep(STEP)
        os.rename(d / "rank-00001.img.tmp", d / "rank-00001.img")
        time.sleep(STEP)
        return "OK ckpt-000002"
    return FakeCoordinator(job_dir, handler)


@pytest.fixture
def sim(stasis, tmp_path):
    (tmp_path / "a.txt").write_text("a\n")
    stasis.ok("save", "--dir", "store", "--job", "sim", "a.txt")   # ckpt-000001
    return tmp_path / "store/sim"


def test_checkpoint_progress_on_a_terminal(stasis, sim):
    fake = writing_coordinator(sim)
    try:
        err, out, rc, _ = on_pty(stasis, "checkpoint", "--dir", "store", "sim")
    finally:
        fake.close()
    assert (rc, out) == (0, "ckpt-000002\n"), err
    assert fake.requests == ["STATUS", "CHECKPOINT"]
    states = []
    for line in lines_of(err):
        m = re.fullmatch(r"(stasis: checkpoint sim: stopping 2 ranks|"
                         r"stasis: checkpoint ckpt-000002: \d/2 ranks done, [\d.]+ \S+), " + RATE,
                         line) or re.fullmatch(r"stasis: checkpoint sim: stopping 2 ranks", line)
        assert m, line
        state = m.group(1) if m.lastindex else line
        if not states or states[-1] != state:
            states.append(state)
    assert states[0] == "stasis: checkpoint sim: stopping 2 ranks", err
    # each state the job was in for 0.6 s, in order; a sample may also fall
    # between two renames (1/2 done, 1.0 MiB), never backwards
    seen = [re.search(r"(\d)/2 ranks done, ([\d.]+) MiB", st).groups() for st in states[1:]]
    assert seen == sorted(seen), err
    assert [x for x in seen if x in (("0", "1.0"), ("1", "3.0"), ("2", "3.0"))] == \
        [("0", "1.0"), ("1", "3.0"), ("2", "3.0")], err


def test_checkpoint_nothing_without_a_terminal(stasis, sim):
    fake = writing_coordinator(sim)
    try:
        r = stasis.ok("checkpoint", "--dir", "store", "sim")
    finally:
        fake.close()
    assert (r.out, r.err) == ("ckpt-000002\n", "")
    assert fake.requests == ["CHECKPOINT"]


def test_checkpoint_error_after_the_line(stasis, sim):
    """A failed checkpoint's one line comes after the progress line is
    cleared, on a line of its own."""
    def handler(req):
        if req == "CHECKPOINT":
            time.sleep(1.5)
            return "ERR checkpoint failed: rank 1: cannot save a socket"
        return "OK job=sim pid=5 agent=yes checkpoints=0 last=-"
    fake = FakeCoordinator(sim, handler)
    try:
        err, out, rc, _ = on_pty(stasis, "checkpoint", "--dir", "store", "sim")
    finally:
        fake.close()
    assert (rc, out) == (1, "")
    # (the terminal turns \n into \r\n)
    tail = "stasis: checkpoint: checkpoint failed: rank 1: cannot save a socket\r\n"
    assert err.endswith("\r" + tail), repr(err)
    # a process: no ranks to count
    assert set(lines_of(err[:-len(tail)])) == {"stasis: checkpoint sim: stopping the program"}


def test_line_never_wider_than_the_terminal(stasis, sim):
    fake = writing_coordinator(sim)
    try:
        err, out, rc, _ = on_pty(stasis, "checkpoint", "--dir", "store", "sim", cols=30)
    finally:
        fake.close()
    assert rc == 0
    drawn = lines_of(err)
    assert max(len(d) for d in drawn) == 29
    assert drawn[0] == "stasis: checkpoint sim: stopp"


# ---- extract, save, verify: the CLI's own work ----

def slow_reader(fifo, size, chunk=256 << 10, pause=0.1):
    got = bytearray()

    def run():
        with open(fifo, "rb") as f:
            while True:
                d = f.read(chunk)
                if not d:
                    break
                got.extend(d)
                time.sleep(pause)
    t = threading.Thread(target=run)
    t.start()
    return t, got


def test_extract_progress(stasis):
    data = os.urandom(4 << 20)
    (stasis.tmp / "grid").write_bytes(data)
    stasis.ok("save", "--dir", "store", "--job", "x", "grid")
    img = "store/x/ckpt-000001/files.img"
    fifo = stasis.tmp / "fifo"
    os.mkfifo(fifo)
    t, got = slow_reader(fifo, len(data))
    err, out, rc, took = on_pty(stasis, "extract", img, "grid", fifo)
    t.join()
    assert (rc, out, bytes(got) == data) == (0, "", True)
    assert took > 1.2
    pcts = []
    for line in lines_of(err):
        m = re.fullmatch(r"stasis: extract grid: ([\d.]+) MiB of 4\.0 MiB \((\d+)%\), " + RATE,
                         line)
        assert m, line
        pcts.append(int(m.group(2)))
    assert pcts == sorted(pcts) and pcts[-1] < 100

    # the same without a terminal: not a byte on stderr
    os.unlink(fifo)
    os.mkfifo(fifo)
    t, got = slow_reader(fifo, len(data))
    r = stasis.ok("extract", img, "grid", fifo)
    t.join()
    assert (r.out, r.err, bytes(got) == data) == ("", "", True)


def test_quick_commands_draw_nothing(stasis, dataset):
    """Under a second: nothing but the command's own output."""
    err, out, rc, _ = on_pty(stasis, "save", "--dir", "store", "--job", "d", "notes.txt")
    assert (rc, err) == (0, "")
    assert re.fullmatch(r"saved 1 file\(s\) as d/ckpt-000001 \([\d.]+ KiB image\) in store\n", out)
    err, out, rc, _ = on_pty(stasis, "verify", "store/d")
    assert (rc, err, out) == (0, "", "ckpt-000001: OK\njob d: 1 complete checkpoint(s) verified\n")
    err, out, rc, _ = on_pty(stasis, "extract", "store/d/ckpt-000001/files.img", "notes.txt",
                             "out.txt")
    assert (rc, err, out) == (0, "", "")


# ---- a real job: checkpoint and restart of a program under stasis run ----

PROGRAM = r"""
import os, sys, time
data = [os.urandom(1 << 20) for _ in range(int(sys.argv[1]))]
print("READY", flush=True)
while not os.path.exists("stop"):
    time.sleep(0.05)
print("PASS", sum(len(d) for d in data), flush=True)
"""


def check_drawn(err, took, pattern):
    """A line if the command ran long enough to have one, well-formed and
    cleared whenever there is one."""
    if took > 1.6:
        assert err, f"no progress line after {took:.1f} s"
    if err:
        for line in lines_of(err):
            assert re.fullmatch(pattern, line), line


@pytest.mark.skipif(not os.path.exists("/proc/self/task/%d/children" % os.getpid()),
                    reason="needs /proc/<pid>/task/<tid>/children")
def test_real_job_checkpoint_and_restart(stasis):
    mib = 512
    (stasis.tmp / "prog.py").write_text(PROGRAM)
    work = stasis.tmp / "work"
    work.mkdir()
    job = subprocess.Popen([BIN, "run", "--dir", "../ck", "--job", "big", "--",
                            sys.executable, "../prog.py", str(mib)], cwd=work, env=stasis.env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert job.stdout.readline() == "READY\n", job.stderr.read()
        doc = json.loads(stasis.ok("status", "--json", "--dir", "ck").out)
        c = doc["jobs"][0]["coordinator"]
        assert (doc["jobs"][0]["state"], c["kind"], c["agent"], c["checkpoints"]) == \
            ("running", "process", True, 0)
        # the program: stasis run's child
        children = (pathlib.Path(f"/proc/{job.pid}/task/{job.pid}/children").read_text().split())
        assert str(c["pid"]) in children
        err, out, rc, took = on_pty(stasis, "checkpoint", "--dir", "ck", "--stop")
        assert (rc, out) == (0, "ckpt-000001\n"), err
        check_drawn(err, took, r"stasis: checkpoint (big: stopping the program|"
                    r"ckpt-000001: [\d.]+ \S+, " + RATE + ")")
        job.communicate(timeout=60)
        assert job.returncode == 0
    finally:
        if job.poll() is None:
            job.kill()
            job.communicate()
    (work / "stop").touch()
    err, out, rc, took = on_pty(stasis, "restart", "--dir", "ck")
    assert (rc, out) == (0, f"PASS {mib << 20}\n"), err
    check_drawn(err, took - 0.5, r"stasis: restart ckpt-000001: [\d.]+ \S+ read, " + RATE)

"""Harness for the transparent checkpointer's test programs (tests/proc/*.c).
(Not a conftest.py: tests/cli and tests/mpi run in the same pytest session and
`from conftest import ...` there must find their own conftest. Test modules
here import the `job` fixture from this module.)

Each program sets up its state, prints READY and waits for a file named
"stop" in its working directory; the harness checkpoints it, kills it (and
its coordinator) with SIGKILL and restarts it, three times; then it creates
"stop" and the program verifies itself and prints PASS or FAIL.
Environment: STASIS_BIN (the stasis binary), STASIS_BUILD (the build tree
holding tests/proc/<program>)."""
import os
import pathlib
import select
import signal
import subprocess
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("STASIS_BUILD", str(ROOT / "build")))
BIN = os.environ.get("STASIS_BIN", str(BUILD / "src" / "cli" / "stasis"))
CRASH_MARKERS = ("AddressSanitizer", "runtime error:", "LeakSanitizer", "Segmentation fault",
                 "core dumped", "Aborted")


def program(name):
    path = BUILD / "tests" / "proc" / name
    assert path.exists(), f"{path} is not built"
    return str(path)


def raw_page_chunks(img):
    """(section, payload offset, length) of every raw (stored as is) chunk of
    page data ("mem." sections) of a process image, in file order."""
    import json
    import struct
    data = img.read_bytes()
    manifest_offset, manifest_len = struct.unpack_from("<QQ", data, len(data) - 48 + 8)
    manifest = json.loads(data[manifest_offset:manifest_offset + manifest_len])
    out = []
    for sec in manifest["sections"]:
        if not sec["name"].startswith("mem."):
            continue
        pos = sec["offset"]
        for _ in range(sec["chunks"]):
            flags, _, _, _, raw_len, stored_len = struct.unpack_from("<IIIQII", data, pos + 4)
            if flags == 0:
                out.append((sec["name"], pos + 48, raw_len))
            pos += 48 + stored_len
    return out


def flip_bit(path, at):
    """Flip the lowest bit of the byte at offset at of file path."""
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x01]))


def descendants(pid):
    out = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                for c in f.read().split():
                    out += descendants(int(c)) + [int(c)]
    except OSError:
        pass
    return out


class Job:
    """One program under stasis run / restart, in its own directory."""

    def __init__(self, tmp):
        self.work = tmp / "work"
        self.work.mkdir()
        self.ck = tmp / "ck"
        # but STASIS_SPLIT_ONETLS: tests/split in full with one thread pointer
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith("STASIS_") or k == "STASIS_SPLIT_ONETLS"}
        self.env.update(STASIS_CONFIG="/dev/null", HOME=str(tmp))
        self.proc = None
        self.logs = []

    def stasis(self, *args, check=True, timeout=120, env=None, raw=False):
        """stasis ARGS; with raw=True, ARGS is the whole command (a wrapper
        that runs stasis)."""
        e = dict(self.env)
        e.update(env or {})
        r = subprocess.run([*([] if raw else [BIN]), *map(str, args)], cwd=self.work, env=e, text=True,
                           capture_output=True, timeout=timeout, errors="replace")
        for m in CRASH_MARKERS:
            assert m not in r.stderr, r.stderr
        if check:
            assert r.returncode == 0, f"stasis {args}: rc={r.returncode}\n{r.stdout}\n{r.stderr}"
        return r

    def _start(self, args, env=None):
        e = dict(self.env)
        e.update(env or {})
        self.proc = subprocess.Popen([BIN, *map(str, args)], cwd=self.work, env=e,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     errors="replace")
        self._pending = b""
        return self.proc

    def read_line(self, timeout):
        """The job's next line of output, "" at its end, None when none came
        within timeout seconds. Read from the descriptor, never through
        self.proc.stdout: communicate() reads the descriptor too, so lines
        the file object had read ahead were lost to it (a line a restarted
        rank printed right after rank 0's went missing so)."""
        fd = self.proc.stdout.fileno()
        end = time.time() + timeout
        while b"\n" not in self._pending:
            left = end - time.time()
            if left <= 0:
                return None
            r, _, _ = select.select([fd], [], [], min(left, 0.2))
            if not r:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                line, self._pending = self._pending, b""
                return line.decode(errors="replace")
            self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return line.decode(errors="replace") + "\n"

    def _unread(self, out):
        """out after what read_line took from the descriptor but did not
        return yet."""
        pending, self._pending = self._pending.decode(errors="replace"), b""
        return pending + (out or "")

    def run(self, *prog, extra=(), env=None):
        self._start(["run", "--dir", self.ck, *extra, "--", *prog], env)
        self.wait_line("READY")

    def restart(self, *extra, env=None, wait=True):
        self._start(["restart", "--dir", self.ck, *extra], env)
        if wait:
            self.wait_running()

    def wait_running(self, timeout=60):
        """Until the coordinator answers: the program runs again."""
        end = time.time() + timeout
        while time.time() < end:
            r = self.stasis("status", "--dir", self.ck, check=False)
            if "  running  " in r.stdout:
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        out, err = self.kill() or ("", "")
        raise AssertionError(f"the restarted program does not run: {out}\n{err}")

    def wait_line(self, text, timeout=60):
        end = time.time() + timeout
        got = []
        while time.time() < end:
            line = self.read_line(end - time.time())
            if line is None:
                continue
            if not line:
                break
            got.append(line)
            if line.strip() == text:
                return
        self.kill()
        raise AssertionError(f"no {text!r} from the program: {got} {self.proc.stderr.read()}")

    def program_pid(self):
        """The pid of the program `stasis run` started (its child), before
        any restart."""
        (pid,) = open(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read().split()
        return int(pid)

    def checkpoint(self, *extra):
        r = self.stasis("checkpoint", "--dir", self.ck, *extra)
        name = r.stdout.strip()
        assert name.startswith("ckpt-"), r.stdout
        return name

    def kill(self):
        """SIGKILL the program and everything stasis started, then stasis."""
        if not self.proc:
            return
        # stopped first, until no new one appears: a process tree forks all
        # the time, and a child forked after the listing would run on
        stopped = set()
        while True:
            found = set(descendants(self.proc.pid) + [self.proc.pid]) - stopped
            if not found:
                break
            for pid in found:
                try:
                    os.kill(pid, signal.SIGSTOP)
                except ProcessLookupError:
                    pass
            stopped |= found
        for pid in stopped:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        out, err = self.proc.communicate(timeout=30)
        self.logs.append(err)
        self.proc = None
        return self._unread(out), err

    def communicate(self, timeout):
        """The job's (out, err) once it ends. Past timeout it is killed with
        all it started (a hung job left running would spin on the CPUs the
        next tests need) and the test fails saying so."""
        try:
            out, err = self.proc.communicate(timeout=timeout)
            return self._unread(out), err
        except subprocess.TimeoutExpired:
            out, err = self.kill() or ("", "")
            raise AssertionError(f"the job did not end within {timeout} s: {out}\n{err}") \
                from None

    def finish(self, timeout=120):
        (self.work / "stop").touch()
        out, err = self.communicate(timeout)
        rc = self.proc.returncode
        self.proc = None
        for m in CRASH_MARKERS:
            assert m not in err, err
        return rc, out, err


@pytest.fixture
def job(tmp_path):
    j = Job(tmp_path)
    yield j
    if j.proc:
        j.kill()

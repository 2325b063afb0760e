"""Descriptors from outside the job (docs/transparent.md, "Descriptors from
outside the job"): a pipe, socket or terminal the program inherited at launch, whose
other end a process outside the job holds, is saved as external; a restart
puts the descriptor of the same number that `stasis restart` inherited in
its place, or /dev/null with one line of warning. tests/proc/external.c
writes "start" to fd 251 before the checkpoints and "end" after them."""
import contextlib
import os
import select
import socket
import subprocess
import tty
from unittest import mock

import proc_harness
from proc_harness import job, program  # noqa: F401 (job is a fixture)

FD = 251
CYCLES = 3


def read_until_eof(fd, timeout=30):
    """Everything the other end writes until every writer is gone."""
    got = b""
    while True:
        r, _, _ = select.select([fd], [], [], timeout)
        assert r, f"fd {fd}: nothing after {got!r} within {timeout} s"
        try:
            chunk = os.read(fd, 4096)
        except OSError:      # a terminal's master once the last slave closed: EIO
            chunk = b""
        if not chunk:
            return got
        got += chunk


class Outside:
    """What a parent outside the job holds: the program's end goes to the
    job at fd 251 (for one start of stasis), this end stays here."""

    def __init__(self, kind):
        if kind == "pipe":
            self.mine, theirs = os.pipe()
        elif kind == "tty":
            self.mine, theirs = os.openpty()
            tty.setraw(theirs)       # no "\r\n" for "\n"
        else:
            a, b = socket.socketpair()
            self.mine, theirs = a.detach(), b.detach()
        os.dup2(theirs, FD)
        os.close(theirs)

    def started(self):
        """stasis has its copy of fd 251: ours goes."""
        os.close(FD)

    def output(self):
        data = read_until_eof(self.mine)
        os.close(self.mine)
        return data


@contextlib.contextmanager
def passing_fd():
    """stasis started meanwhile inherits fd 251 (the harness's Popen closes
    every descriptor but 0, 1, 2)."""
    real = subprocess.Popen

    def popen(*args, **kw):
        return real(*args, pass_fds=(FD,), **kw)

    with mock.patch.object(proc_harness.subprocess, "Popen", popen):
        yield


def start(job, kind, *args, restart=False, argv=None):
    out = Outside(kind)
    try:
        with passing_fd():
            if restart:
                job.restart()
            else:
                job.run(*(argv or [program("external"), str(FD), *args]))
    finally:
        out.started()
    return out


def cycles(job, kind):
    first = start(job, kind)
    assert os.read(first.mine, 6) == b"start\n"
    for _ in range(CYCLES):
        job.checkpoint()
        job.kill()
        last = start(job, kind, restart=True)
    assert first.output() == b"", "the first end outlived the program"
    rc, out, err = job.finish()
    assert rc == 0 and out.split()[-3:] == ["FD", kind, "PASS"], f"{out}\n{err}"
    assert "warn" not in err, err
    assert last.output() == b"end\n"


def test_inherited_pipe(job):
    cycles(job, "pipe")


def test_inherited_socket(job):
    cycles(job, "socket")


def test_inherited_terminal(job):
    """A pseudo-terminal whose master the test holds, as a terminal
    multiplexer would."""
    cycles(job, "tty")


def test_no_descriptor_at_restart_gives_dev_null(job):
    first = start(job, "pipe")
    job.checkpoint()
    job.kill()
    first.output()
    job.restart()
    pid = job.proc.pid
    rc, out, err = job.finish()
    assert rc == 0 and out.split()[-3:] == ["FD", "null", "PASS"], f"{out}\n{err}"
    warnings = [l for l in err.splitlines() if "warn" in l]
    assert warnings == [f"stasis[{pid}]: warn: fd {FD} is a pipe from outside the job and stasis "
                        f"restart has no fd {FD}: the program gets /dev/null there"], err


def test_a_fifo_the_program_opens_itself_is_still_refused(job, tmp_path):
    """Inherited at launch means open when the program started: a FIFO it
    opens later, whose other end another process holds, fails the
    checkpoint in one line, and the program runs on."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    out = start(job, "pipe", str(fifo))
    r = job.stasis("checkpoint", "--dir", job.ck, check=False)
    assert r.returncode == 1 and r.stderr.splitlines() == [
        f"stasis: checkpoint: checkpoint failed: cannot checkpoint: process {job.program_pid()} "
        "(external): fd 7 is a pipe or FIFO shared with another process"], r.stderr
    rc, stdout, err = job.finish()
    assert rc == 0 and stdout.split()[-3:] == ["FD", "pipe", "PASS"], f"{stdout}\n{err}"
    assert out.output() == b"start\nend\n"
    os.close(reader)

"""Sockets of a single process (docs/transparent.md, "Sockets"): a UNIX
socketpair and a TCP listener with a connection accepted from it keep
their unread bytes and addresses, UNIX datagram and seqpacket pairs their
messages, through three checkpoint / SIGKILL / restart cycles; a TCP connection to a server outside the job comes back
reset, or fails the checkpoint with sockets_outside = refuse."""
import socket
import threading

from proc_harness import job, program  # noqa: F401 (job is a fixture)
from test_proc import cycles


def test_pairs_inside_keep_unread_bytes(job):
    cycles(job, "sockets")


class Server:
    """A TCP server outside the job: accepts, says hi once the test asks."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        c, _ = self.sock.accept()
        self.conns.append(c)

    def close(self):
        for c in self.conns:
            c.close()
        self.sock.close()


def test_pairs_between_two_processes(job):
    """sockfork.c: a pair with an end in a parent and one in its child,
    bytes in flight, and a socket both hold, through three cycles."""
    cycles(job, "sockfork")


def test_a_unix_socket_outside_refused_by_configuration(job, tmp_path):
    """With sockets_outside = refuse, a UNIX stream socket connected to a
    server outside the job fails the checkpoint in one line."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(tmp_path / "srv.sock"))
    server.listen(1)
    try:
        job.run(program("unixclient"), tmp_path / "srv.sock", env={"STASIS_SOCKETS_OUTSIDE": "refuse"})
        r = job.stasis("checkpoint", "--dir", job.ck, check=False)
        assert r.returncode == 1 and r.stderr.splitlines() == [
            f"stasis: checkpoint: checkpoint failed: cannot checkpoint: process {job.program_pid()}: "
            "fd 3 is a UNIX socket connected outside the job (sockets_outside = refuse)"], r.stderr
        rc, out, err = job.finish()
        assert rc == 0 and out.strip().endswith("PASS"), f"{out}\n{err}"
    finally:
        server.close()


def test_connection_outside_comes_back_reset(job, tmp_path):
    """...and a datagram socket connected to a named one outside (as
    syslog's to /dev/log) is connected to it again: what it sends after the
    restarts arrives."""
    srv = Server()
    log = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    log.bind(str(tmp_path / "log.sock"))
    try:
        cycles(job, "sockets", srv.port, "closed", tmp_path / "log.sock")
        log.settimeout(10)
        assert log.recv(16) == b"after"
    finally:
        srv.close()
        log.close()


def test_connection_outside_refused_by_configuration(job):
    srv = Server()
    try:
        job.run(program("sockets"), srv.port, "live", env={"STASIS_SOCKETS_OUTSIDE": "refuse"})
        r = job.stasis("checkpoint", "--dir", job.ck, check=False)
        assert r.returncode == 1 and r.stderr.splitlines() == [
            f"stasis: checkpoint: checkpoint failed: cannot checkpoint: process {job.program_pid()} "
            f"(sockets): fd 10 is a connection to 127.0.0.1:{srv.port}, outside the job "
            "(sockets_outside = refuse)"], r.stderr
        srv.thread.join(10)
        srv.conns[0].sendall(b"hi")
        rc, out, err = job.finish()
        assert rc == 0 and out.strip().endswith("PASS"), f"{out}\n{err}"
    finally:
        srv.close()

"""A stand-in for a job's coordinator (docs/coordinator.md): a Unix socket
coord.sock and a secret coord.secret in the job's directory, the greeting,
HELLO, one request per connection. The tests choose each answer, so the
CLI's side of the protocol (status --json, the progress of checkpoint) is
checked against exact replies without running a job. (Not a conftest.py
fixture: imported by the tests that need it.)"""
import os
import pathlib
import re
import secrets
import socket
import threading

# the coordinator's protocol version, from its one definition
PROTOCOL = int(re.search(r"#define COORD_PROTOCOL_VERSION (\d+)", (
    pathlib.Path(__file__).resolve().parents[2] / "src/coord/coord.h").read_text()).group(1))


class FakeCoordinator:
    """handler(request) -> reply line (without "\\n"), called in the
    coordinator's thread; requests seen are kept in .requests. With
    greet=False it accepts nothing: a coordinator busy with a checkpoint.
    With stale=S, coord.secret holds S (a killed coordinator's) until the
    first connection is accepted, then its own before the greeting: the
    order a client may see while a coordinator starts where a killed one
    left its files."""

    def __init__(self, job_dir, handler, greet=True, stale=None):
        self.job_dir = job_dir
        self.handler = handler
        self.requests = []
        self.secret = secrets.token_hex(16)
        self.stale = stale
        self._write_secret(stale or self.secret)
        self.path = str(job_dir / "coord.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(16)
        self.stop = False
        self.greet = greet
        self.thread = threading.Thread(target=self._serve, daemon=True)
        if greet:
            self.thread.start()

    def _write_secret(self, text):
        tmp = self.job_dir / "coord.secret.tmp"
        tmp.write_text(text)
        os.chmod(tmp, 0o600)
        os.rename(tmp, self.job_dir / "coord.secret")

    def _serve(self):
        self.sock.settimeout(0.1)
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except (socket.timeout, OSError):
                continue
            if self.stale:
                self._write_secret(self.secret)
                self.stale = None
            with conn:
                conn.settimeout(10)
                f = conn.makefile("rw", newline="\n")
                try:
                    f.write(f"STASIS-COORD {PROTOCOL}\n")
                    f.flush()
                    hello = f.readline().strip()
                    if hello != f"HELLO {PROTOCOL} {self.secret}":
                        f.write("ERR wrong secret\n")
                        f.flush()
                        continue
                    f.write("OK\n")
                    f.flush()
                    req = f.readline().strip()
                    if not req:
                        continue
                    self.requests.append(req)
                    f.write(self.handler(req) + "\n")
                    f.flush()
                except OSError:
                    pass

    def close(self):
        self.stop = True
        if self.greet:
            self.thread.join()
        self.sock.close()
        os.unlink(self.path)
        os.unlink(self.job_dir / "coord.secret")

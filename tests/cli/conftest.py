"""Fixtures for the CLI and integration tests: run the real `stasis` binary
(STASIS_BIN, default build/src/cli/stasis) on real files in a temporary
directory, with no configuration file and no STASIS_* variables leaking in."""
import os
import pathlib
import random
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = os.environ.get("STASIS_BIN", str(ROOT / "build" / "src" / "cli" / "stasis"))

# Signs of a crash or a sanitizer report: never acceptable, whatever the input.
CRASH_MARKERS = ("AddressSanitizer", "runtime error:", "LeakSanitizer", "Segmentation fault",
                 "Traceback", "core dumped", "Aborted")


class Result:
    def __init__(self, proc):
        self.rc = proc.returncode
        self.out = proc.stdout
        self.err = proc.stderr

    def __repr__(self):
        return f"rc={self.rc}\nstdout:\n{self.out}\nstderr:\n{self.err}"


class Stasis:
    def __init__(self, tmp):
        self.tmp = tmp
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("STASIS_")}
        self.env["STASIS_CONFIG"] = "/dev/null"
        self.env["HOME"] = str(tmp / "home")
        self.env["TZ"] = "UTC"

    def run(self, *args, env=None, check=None, timeout=300):
        e = dict(self.env)
        e.update(env or {})
        proc = subprocess.run([BIN, *map(str, args)], cwd=self.tmp, env=e, text=True,
                              capture_output=True, timeout=timeout, errors="replace")
        r = Result(proc)
        for marker in CRASH_MARKERS:
            assert marker not in r.err, f"crash marker {marker!r}: {r}"
        if check is True:
            assert r.rc == 0, r
        return r

    def ok(self, *args, **kw):
        return self.run(*args, check=True, **kw)

    def fails(self, *args, rc=None, **kw):
        """Run a command that must fail with exactly one line on stderr."""
        r = self.run(*args, **kw)
        assert r.rc != 0, r
        if rc is not None:
            assert r.rc == rc, r
        lines = [l for l in r.err.splitlines() if l.strip()]
        assert len(lines) == 1, f"expected a one-line error: {r}"
        assert lines[0].startswith("stasis: "), r
        return r


@pytest.fixture
def stasis(tmp_path):
    (tmp_path / "home").mkdir()
    return Stasis(tmp_path)


def sample_bytes(size, seed, zero_every=2):
    """Pages of random bytes with every zero_every-th 4 KiB page all zero."""
    rng = random.Random(seed)
    out = bytearray()
    page = 0
    while len(out) < size:
        n = min(4096, size - len(out))
        out += bytes(n) if zero_every and page % zero_every == 1 else rng.randbytes(n)
        page += 1
    return bytes(out)


@pytest.fixture
def dataset(tmp_path):
    """A small data set: a half-zero binary array, a text file, an empty file."""
    files = {
        "grid.bin": sample_bytes(3 * 1024 * 1024 + 1234, 1),
        "notes.txt": b"".join(b"line %d\n" % i for i in range(5000)),
        "empty.dat": b"",
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    return files

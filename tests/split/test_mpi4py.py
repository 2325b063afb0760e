"""Python ranks under the split process (docs/split.md, "Launch"): Python
links no MPI library, mpi4py's extension module loads one with dlopen once
the program imports it. libstasis-launch.so puts a rank whose program is
named by split_programs (python* by default) above a lower half all the
same, and the dlopen finds Stasis's libmpi.so.40 first on the upper half's
LD_LIBRARY_PATH: Debian's mpi4py, built for Open MPI, runs above either
MPI's lower half. evolve.py (mpi4py + numpy) checks itself and prints a
checksum every iteration; every number must equal an uninterrupted native
run's, through checkpoints, kills and restarts.

A checkpoint that finds ranks unregistered says which, and why.

Environment: STASIS_BIN, STASIS_BUILD."""
import os
import pathlib
import re
import select
import subprocess
import sys
import time

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "proc"))
from proc_harness import descendants  # noqa: E402
from split_common import ENV, LH, launcher  # noqa: E402
from test_ckpt import MpiJob  # noqa: E402

PY = "/usr/bin/python3"
PROG = str(HERE / "evolve.py")
# 0.1 s each: the checkpoint test's second cycle comes at least 10 after
# the first restart (about iteration 15 to 25 under load), the rest is
# margin and time spent waiting for the end
ITERS = 40
SLEEP_MS = 100
UPPER_LO, UPPER_HI = 0x100000000000, 0x201000000000   # sts_mpi.h
LINE = re.compile(r"rank (\d+) iteration (\d+) checksum (-?0x[0-9a-f.]+p[+-]\d+)")
PASS = re.compile(r"PASS rank (\d+) ranks=(\d+) iterations=(\d+) checksum=(-?0x[0-9a-f.]+p[+-]\d+)")


def _has_mpi4py():
    try:
        return subprocess.run([PY, "-c", "import mpi4py, numpy"], capture_output=True,
                              timeout=60).returncode == 0
    except OSError:
        return False


pytestmark = pytest.mark.skipif(not _has_mpi4py(),
                                reason=f"{PY} has no mpi4py and numpy (python3-mpi4py)")


def numbers(text):
    """{(rank, iteration): checksum} of a run's output (lines of the two
    ranks may be run together: found anywhere); a number printed twice for
    the same iteration (before a kill and after the restart) must agree."""
    out = {}
    for m in LINE.finditer(text):
        key = (int(m.group(1)), int(m.group(2)))
        assert out.setdefault(key, m.group(3)) == m.group(3), (key, out[key], m.group(3))
    return out


@pytest.fixture(scope="module")
def reference():
    """An uninterrupted native run (Open MPI, which Debian's mpi4py is built
    for): {(rank, iteration): checksum} and the final checksum."""
    r = subprocess.run(launcher("openmpi", 2) + [PY, PROG, str(ITERS), "0"], env=ENV,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    got = numbers(r.stdout)
    assert len(got) == 2 * ITERS, r.stdout
    final = {m.group(4) for m in PASS.finditer(r.stdout)}
    assert len(final) == 1 and len(PASS.findall(r.stdout)) == 2, r.stdout
    return got, final.pop()


def rank0(job):
    """The iterations rank 0 printed since the job (re)started."""
    return [int(m.group(2)) for m in LINE.finditer("".join(job.seen)) if m.group(1) == "0"]


def wait_iteration(job, at_least, timeout=90):
    """Read the job's output until rank 0 printed iteration at_least or
    later; the latest it printed. (Raw reads: what a readline read ahead
    would be lost to finish_job's communicate.)"""
    end = time.time() + timeout
    fd = job.proc.stdout.fileno()
    while time.time() < end:
        r, _, _ = select.select([fd], [], [], 0.2)
        if not r:
            continue
        data = os.read(fd, 1 << 16)
        if not data:
            break
        job.seen.append(data.decode(errors="replace"))
        done = [i for i in rank0(job) if i >= at_least]
        if done:
            return max(done)
    out, err = job.kill() or ("", "")
    raise AssertionError(f"no rank 0 iteration {at_least}: {job.seen[-5:]} {out} {err}")


def check_output(out, reference, since=0):
    """out went on to the end and printed the reference's numbers (from
    iteration since on at least) and final checksum."""
    ref, final = reference
    got = numbers(out)
    assert got, out
    for key, v in got.items():
        assert ref[key] == v, (key, v, ref[key])
    for rank in (0, 1):
        missing = [i for i in range(since, ITERS) if (rank, i) not in got]
        assert not missing, (rank, since, missing, out)
    passed = PASS.findall(out)
    assert sorted(p[0] for p in passed) == ["0", "1"], out
    assert all(p[1:] == ("2", str(ITERS), final) for p in passed), (passed, final)
    assert "FAIL" not in out


def ranks_of(job, lower):
    """The pids of the job's ranks, each above its lower half."""
    pids = []
    for pid in descendants(job.proc.pid):
        try:
            exe = os.readlink(f"/proc/{pid}/exe")
        except OSError:
            continue
        # with split_onetls's padding or without (its -nopad executable)
        if re.search(rf"/stasis-lh-{lower}(-nopad)?$", exe):
            pids.append(pid)
    return pids


def mappings(pid):
    """[(start, end, path)] of /proc/PID/maps."""
    out = []
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            fields = line.split(maxsplit=5)
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            out.append((lo, hi, fields[5].strip() if len(fields) > 5 else ""))
    return out


def inside(lo):
    return UPPER_LO <= lo < UPPER_HI


@pytest.mark.parametrize("lower", ["openmpi", "mpich"])
def test_python_rank_runs_above_a_lower_half(reference, lower, tmp_path):
    """Each rank is Python above lower's lower half: mpi4py's dlopen got
    Stasis's libmpi.so.40, in the upper half's range, and no real MPI
    library lies there (above MPICH's lower half Open MPI's is not mapped
    at all). What Python and numpy mapped before that dlopen (the upper
    libc, numpy's extension modules and BLAS) lies in the range too, the
    lower half's reservations placed it there; only python3 itself, linked
    without PIE, lies at its link address, below the range. The output is
    the native run's."""
    job = MpiJob(tmp_path)
    job.start(*launcher(lower, 2), PY, PROG, ITERS, SLEEP_MS)
    wait_iteration(job, 3)
    pids = ranks_of(job, lower)
    assert len(pids) == 2, pids
    uh = os.path.realpath(LH / "uh" / "libmpi.so.40")
    python = os.path.realpath(PY)
    for pid in pids:
        maps = mappings(pid)
        ours = [m for m in maps if m[2] == uh]
        assert ours and all(inside(lo) for lo, _, _ in ours), (pid, ours)
        for lo, _, path in maps:
            base = os.path.basename(path)
            if base.startswith(("libmpi.so", "libmpich.so", "libopen-pal", "libopen-rte")) \
                    and path != uh:
                assert not inside(lo), (pid, hex(lo), path)   # the lower half's
                assert lower == "openmpi" or not base.startswith(("libmpi.so", "libopen-")), \
                    (pid, path)
            if path.startswith(("/usr/lib/python3", "/usr/lib/x86_64-linux-gnu/blas/",
                                "/usr/lib/x86_64-linux-gnu/lapack/")):
                assert inside(lo), (pid, hex(lo), path)
            if lo < UPPER_LO and path.startswith("/"):
                assert path == python, (pid, hex(lo), path)
        assert any(inside(lo) and os.path.basename(p) == "libc.so.6" for lo, _, p in maps), pid
        assert any(inside(lo) and "/numpy/core/" in p for lo, _, p in maps), pid
    rc, out, err = job.finish_job()
    assert rc == 0, out + err
    check_output(out, reference)


# the checkpoint's refusal until the lower half saves a program linked
# without PIE (Debian's python3): docs/split.md, "Upper-half memory"


@pytest.mark.parametrize("lower", ["openmpi", "mpich"])
def test_python_checkpoint_kill_restart(reference, lower, tmp_path):
    """Two cycles of checkpoint, SIGKILL and restart of a 2-rank mpi4py job,
    mid-run: the restarted ranks go on from the checkpoint and print the
    numbers of an uninterrupted run to the end. Each rank rewrites a file
    and appends to another every iteration, closing both (Python opens
    them with libc's open, which mpi4py's MPI library, loaded later, comes
    after): killed two iterations after a checkpoint, the restart puts
    them back, so the rank reads its own number back, and they end as an
    uninterrupted run's."""
    d = tmp_path / "files"
    d.mkdir()
    job = MpiJob(tmp_path)
    job.start(*launcher(lower, 2), PY, PROG, ITERS, SLEEP_MS, str(d))
    at = 5
    for _ in range(2):
        before = wait_iteration(job, at)
        r = job.stasis("checkpoint", "--dir", job.ck, check=False)
        assert r.returncode == 0 and r.stdout.startswith("ckpt-"), r.stdout + r.stderr
        wait_iteration(job, max(rank0(job)) + 2)   # the files rewritten since, for sure
        job.kill()
        job.restart()
        wait_iteration(job, 0)
        after = min(rank0(job))
        assert after >= before, (before, after)   # from the checkpoint, not from scratch
        at = after + 10
    rc, out, err = job.finish_job()
    assert rc == 0, out + err
    check_output(out, reference, since=at - 10)
    numbers("".join(job.seen) + out)
    for rank in (0, 1):
        assert (d / f"w-{rank}.txt").read_text() == f"{ITERS - 1}\n"
        assert (d / f"a-{rank}.txt").read_text() == "".join(f"iteration {i}\n"
                                                            for i in range(ITERS))


def test_unregistered_ranks_say_why(tmp_path):
    """A checkpoint that finds ranks unregistered names each one and why it
    runs without a lower half: rank 0 is Python, but with split_programs
    emptied; rank 1 is Python started by the rank's shell, not by the
    launcher. (The checkpoint waits for registrations first: 3 s once both
    ranks said why they have no lower half, not the whole 30 s.)"""
    script = ('if [ "$OMPI_COMM_WORLD_RANK" = 0 ]; then STASIS_SPLIT_PROGRAMS= exec '
              f'{PY} -c "import time; time.sleep(60)"; '
              f'else {PY} -c "import time; time.sleep(60)"; fi; true')
    job = MpiJob(tmp_path)
    job.start(*launcher("openmpi", 2), "/bin/sh", "-c", script)
    time.sleep(1)
    r = job.stasis("checkpoint", "--dir", job.ck, check=False, timeout=90)
    job.kill()
    python = os.path.realpath(PY)
    assert r.returncode != 0, r.stdout
    msg = r.stderr
    assert "0 of 2 ranks of the job are registered; rank 0 (pid " in msg, msg
    assert f"{python} links no MPI library, and split_programs ('') does not name it" in msg, msg
    assert "; rank 1 (pid " in msg, msg
    assert f"{python} loads MPI only once it runs and was started by " in msg, msg
    assert "not by the launcher" in msg and "(exec it)" in msg, msg
    assert "no word from" not in msg, msg


def test_an_unsplit_line_of_another_version_is_not_dropped_silently(tmp_path):
    """UNSPLIT has no answer: a line of another protocol version (launch.c
    said 2 after the coordinator went to 3, 07a4bd8) was dropped without a
    word, and a checkpoint named the rank without its reason. The
    coordinator now says it in one warning. The rank, Python, sends one in
    version 1 and waits for the coordinator to close the connection."""
    send = ("import os, socket; h, p = os.environ['STASIS_COORD_ADDR'].rsplit(':', 1); "
            "s = open(os.environ['STASIS_JOB_DIR'] + '/coord.secret').read(32); "
            "c = socket.create_connection((h, int(p))); "
            "c.sendall(f'UNSPLIT 1 {s} 0 1 {os.getpid()} here nompi old\\n'.encode()); "
            "c.settimeout(30); print('closed' if c.recv(1) == b'' else 'answered')")
    job = MpiJob(tmp_path)
    job.env["STASIS_SPLIT_PROGRAMS"] = ""   # Python without a lower half
    job.start(*launcher("openmpi", 1), PY, "-c", send)
    rc, out, err = job.finish_job()
    assert rc == 0 and "closed" in out, out + err
    assert re.search(r"^stasis\[\d+\]: warn: rank 0 \(pid \d+ on here\) said UNSPLIT in protocol "
                     r"version 1, not \d+: ignored$", err, re.M), err

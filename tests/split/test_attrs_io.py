"""Attributes and keyvals, object names, MPI_Alloc_mem and MPI-IO across
checkpoints and restarts (docs/split.md, "Attributes" and "Files"):
attrs_io.c sets attributes with copy and delete callbacks on
MPI_COMM_WORLD, MPI_COMM_SELF and a datatype, names objects, exchanges
data from memory of MPI_Alloc_mem, and writes and reads a file at offsets
and with its file pointer through a view; in every iteration it checks all
of them, and at the end the whole file. It is checkpointed, killed with
SIGKILL and restarted three times under `stasis run`, under Open MPI (2
and 4 ranks) and MPICH (2), and once under the other MPI.

Environment: STASIS_BIN, STASIS_BUILD."""
import pathlib
import re
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
from split_common import ENV, TIMEOUT, build_programs, data_file, launcher  # noqa: E402
from test_ckpt import MpiJob, cycles  # noqa: E402

ITERS = 25          # about 0.1 s each (test_ckpt.ITERS)
SLEEP_MS = 100
MATRIX = [("openmpi", 2), ("openmpi", 4), ("mpich", 2)]     # (test_local.MATRIX says why)


@pytest.fixture(scope="module")
def progs(tmp_path_factory):
    return build_programs(tmp_path_factory, ("attrs_io",))


def checks(n, iters):
    """attrs_io.c's count: 15 checks per rank and iteration, 2 at the end."""
    return n * (15 * iters + 2)


def assert_passed(rc, out, err, n, iters):
    assert rc == 0, out + err
    assert f"PASS ranks={n} iterations={iters} checks={checks(n, iters)}\n" in out, out + err
    assert "FAIL" not in out
    # MPI_Finalize deleted MPI_COMM_SELF's attribute on every rank, once
    for r in range(n):
        assert out.count(f"rank {r}: self attribute deleted (at MPI_Finalize)\n") == 1, out


@pytest.mark.parametrize("abi", ["openmpi", "mpich"])
def test_attrs_io_passes_natively(progs, abi, tmp_path):
    r = subprocess.run(launcher(abi, 2) + [progs[("attrs_io", abi)], "3", "10",
                                           data_file(tmp_path)],
                       cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=TIMEOUT,
                       errors="replace")
    assert_passed(r.returncode, r.stdout, r.stderr, 2, 3)


@pytest.mark.parametrize("lower,n", MATRIX)
def test_attrs_io_three_cycles(progs, lower, n, tmp_path):
    job = MpiJob(tmp_path)
    job.start(*launcher(lower, n), progs[("attrs_io", lower)], ITERS, SLEEP_MS,
              data_file(tmp_path))
    cycles(job)
    rc, out, err = job.finish_job()
    assert_passed(rc, out, err, n, ITERS)
    ls = job.stasis("ls", "--dir", job.ck).stdout
    assert len(re.findall(r"ckpt-\d+\s+(CURRENT|COMPLETE)\s+" + str(n + 2) + " ", ls)) == 3, ls


@pytest.mark.parametrize("first,second", [("openmpi", "mpich"), ("mpich", "openmpi")])
def test_attrs_io_under_the_other_mpi(progs, first, second, tmp_path):
    """The file is opened again, with its view and file pointer, by the other
    MPI's MPI-IO (ROMIO or OMPIO); attributes live in the upper half."""
    job = MpiJob(tmp_path)
    job.start(*launcher(first, 2), progs[("attrs_io", first)], ITERS, SLEEP_MS,
              data_file(tmp_path))
    cycles(job, n=1, restart_args=["--launcher", " ".join(launcher(second, 2))])
    rc, out, err = job.finish_job()
    assert_passed(rc, out, err, 2, ITERS)


def stale_ompio_lock(path):
    """What an Open MPI rank killed inside MPI_File_open leaves: OMPIO's
    semaphore for the file's base name, taken (a glibc semaphore of value 0
    is 32 zero bytes)."""
    sem = pathlib.Path("/dev/shm") / f"sem.OMPIO_{pathlib.Path(path).name}"
    sem.write_bytes(bytes(32))
    return sem


def test_stale_open_mpi_file_lock_is_removed(progs, tmp_path):
    """A job killed while a rank held Open MPI's lock for a file name would
    hang the next open of that name for good (natively too: see the
    native run below). Under Stasis the first opener waits a second, then
    removes it and says so: at the first open of `stasis run` and at the
    reopening of `stasis restart`."""
    path = data_file(tmp_path)
    sem = stale_ompio_lock(path)
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            subprocess.run(launcher("openmpi", 2) + [progs[("attrs_io", "openmpi")], "3", "10",
                                                     path],
                           cwd=tmp_path, env=ENV, capture_output=True, timeout=6)
        subprocess.run(["pkill", "-9", "-f", progs[("attrs_io", "openmpi")]])
        said = f"stasis: lower half: rank 0: {path}: removed {sem}, Open MPI's lock for that " \
               "file name, left taken by a killed rank (opening the file would wait for good)"
        job = MpiJob(tmp_path)
        job.start(*launcher("openmpi", 2), progs[("attrs_io", "openmpi")], ITERS, SLEEP_MS, path)
        job.lines_until(r"rank 0 iteration [1-9]\d*")
        job.checkpoint()
        _, err = job.kill()
        assert said in err, err
        stale_ompio_lock(path)
        job.restart()
        rc, out, err = job.finish_job()
        assert_passed(rc, out, err, 2, ITERS)
        assert said in err, err
    finally:
        subprocess.run(["pkill", "-9", "-f", progs[("attrs_io", "openmpi")]])
        sem.unlink(missing_ok=True)

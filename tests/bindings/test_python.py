"""The Python binding: counter.py on package `stasis`, two ranks under Open
MPI with mpi4py and one process without MPI, killed mid-run and restarted,
must end exactly where an uninterrupted run ends; and the binding refuses
what it cannot protect with a clear error."""
import subprocess

import pytest

from binding_jobs import PYTHON, ROOT, Job, check_kill_and_restart, require_library

PACKAGE_DIR = ROOT / "bindings" / "python"
COUNTER = ROOT / "tests" / "bindings" / "counter.py"
LEVELS = {"single": 1, "partner": 2, "global": 4}
ITERATIONS, EVERY = 40, 5
KILL_RANK, KILL_ITERATION = 1, 23       # nodeB's rank, between the checkpoints of 20 and 25


def have(module):
    r = subprocess.run([PYTHON, "-c", f"import {module}"], capture_output=True, timeout=60)
    return r.returncode == 0


@pytest.fixture(scope="module")
def numpy_ok():
    if not have("numpy"):
        pytest.skip(f"numpy not installed for {PYTHON}")


def python_job(root, library, mpi):
    env = {"PYTHONPATH": str(PACKAGE_DIR), "STASIS_LIBRARY": str(library)}
    return Job(root, [PYTHON, COUNTER, "mpi" if mpi else "serial"], mpi=mpi, extra_env=env)


# One level a binding: it hands the level's number to libstasis, whose
# levels tests/mpi runs each (test_fortran.py takes global).
@pytest.mark.parametrize("level", ["partner"])
def test_mpi_kill_and_restart(tmp_path, numpy_ok, level):
    if not have("mpi4py.MPI"):
        pytest.skip(f"mpi4py not installed for {PYTHON}")
    lib = require_library("stasis")
    check_kill_and_restart(lambda name: python_job(tmp_path / name, lib, mpi=True),
                           [ITERATIONS, EVERY, LEVELS[level]], KILL_RANK, KILL_ITERATION, EVERY)


@pytest.mark.parametrize("level", ["single", "global"])
def test_serial_kill_and_restart(tmp_path, numpy_ok, level):
    lib = require_library("stasis_serial")
    check_kill_and_restart(lambda name: python_job(tmp_path / name, lib, mpi=False),
                           [ITERATIONS, EVERY, LEVELS[level]], 0, KILL_ITERATION, EVERY)


MISUSE = r"""
import sys
import numpy as np
import stasis

def refused(exc, what, fn, *args):
    try:
        fn(*args)
    except exc as e:
        print(f"{what}: {type(e).__name__}: {e}")
        return
    sys.exit(f"{what}: accepted")

refused(stasis.StasisError, "before init", stasis.status)
stasis.init()
grid = np.zeros((4, 6))
refused(ValueError, "strided", stasis.protect, 1, grid[:, ::2])
refused(TypeError, "list", stasis.protect, 1, [1.0, 2.0])
ro = np.zeros(3)
ro.flags.writeable = False
refused(ValueError, "read-only", stasis.protect, 1, ro)
stasis.protect(1, grid)
refused(stasis.StasisError, "element size", stasis.protect, 1, np.zeros(24, dtype=np.float32))
refused(stasis.StasisError, "init twice", stasis.init)
stasis.protect(2, grid.T)                  # Fortran order: contiguous, accepted
stasis.protect(3, np.zeros(0))             # empty: accepted
stasis.protect(4, np.zeros(2, dtype=np.dtype([("a", "i4"), ("b", "f8")])))   # 16-byte records
stasis.checkpoint(stasis.LEVEL_SINGLE)
stasis.finalize()
refused(stasis.StasisError, "after finalize", stasis.recover)
print("ok")
"""


def test_misuse_is_refused_clearly(tmp_path, numpy_ok):
    lib = require_library("stasis_serial")
    job = python_job(tmp_path / "job", lib, mpi=False)
    r = subprocess.run([PYTHON, "-c", MISUSE], cwd=job.root, env=job.env, text=True,
                       capture_output=True, timeout=60)
    assert r.returncode == 0 and r.stdout.endswith("ok\n"), f"{r.stdout}\n{r.stderr}"
    lines = dict(line.split(": ", 1) for line in r.stdout.splitlines()[:-1])
    assert "call stasis.init() first" in lines["before init"]
    assert "not contiguous" in lines["strided"] and "id 1" in lines["strided"]
    assert lines["list"].startswith("TypeError") and "numpy array" in lines["list"]
    assert "read-only" in lines["read-only"]
    # The library's own message, carried by the exception.
    assert "8-byte elements, now 4" in lines["element size"], lines
    assert "already initialized" in lines["init twice"]
    assert "after stasis_finalize" in lines["after finalize"]


def test_distributed_array_and_routed_files(tmp_path, numpy_ok):
    """protect_distributed and the routed-file calls through the Python
    binding: two MPI ranks checkpoint their halves at the GLOBAL level and
    write an output set; one process without MPI recovers the whole array
    (2 -> 1 ranks); two ranks find the set again and read their files."""
    if not have("mpi4py.MPI"):
        pytest.skip(f"mpi4py not installed for {PYTHON}")
    prog = ROOT / "tests" / "bindings" / "distributed.py"
    env = {"PYTHONPATH": str(PACKAGE_DIR)}
    mpi = Job(tmp_path / "job", [PYTHON, prog, "mpi"], mpi=True,
              extra_env={**env, "STASIS_LIBRARY": str(require_library("stasis"))})
    serial = {**mpi.env, **mpi.node_env("nodeA"),
              "STASIS_LIBRARY": str(require_library("stasis_serial"))}
    w = mpi.run("write")
    assert w.rc == 0 and "distributed: OK write (2 ranks)" in w.out, w
    r = subprocess.run([PYTHON, str(prog), "serial", "read"], cwd=mpi.root, env=serial, text=True,
                       capture_output=True, timeout=60)
    assert r.returncode == 0 and "distributed: OK read (1 rank)" in r.stdout, r
    f = mpi.run("files")
    assert f.rc == 0 and "distributed: OK files (2 ranks)" in f.out, f

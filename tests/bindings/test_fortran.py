"""The Fortran binding: counter.f90 on module `stasis`, two ranks under Open
MPI, killed mid-run and restarted, must end exactly where an uninterrupted
run ends. The program is STASIS_BUILD's stasis_fortran_test when built,
else compiled here with mpif90.openmpi against STASIS_BUILD's libstasis."""
import shutil
import subprocess

import pytest

from binding_jobs import ROOT, BUILD, Job, check_kill_and_restart, require_library

LEVELS = {"single": 1, "partner": 2, "global": 4}
ITERATIONS, EVERY = 40, 5
KILL_RANK, KILL_ITERATION = 1, 23       # nodeB's rank, between the checkpoints of 20 and 25


@pytest.fixture(scope="module")
def counter_f(tmp_path_factory):
    lib = require_library("stasis")
    built = BUILD / "bindings" / "fortran" / "stasis_fortran_test"
    if built.exists():
        return built
    for tool in ("gfortran", "mpif90.openmpi", "mpirun.openmpi"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} not installed")
    out = tmp_path_factory.mktemp("fortran")
    steps = [
        ["mpif90.openmpi", "-cpp", "-Wall", "-Wextra", "-Werror", "-std=f2018", "-J", out,
         "-c", ROOT / "bindings" / "fortran" / "stasis.f90", "-o", out / "stasis.o"],
        ["mpif90.openmpi", "-Wall", "-Wextra", "-Werror", "-std=f2018", "-I", out,
         ROOT / "tests" / "bindings" / "counter.f90", out / "stasis.o", "-o", out / "counter_f",
         "-L", lib.parent, "-lstasis", f"-Wl,-rpath,{lib.parent}"],
    ]
    for cmd in steps:
        cmd = [str(c) for c in cmd]
        r = subprocess.run(cmd, cwd=out, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"$ {' '.join(cmd)}\n{r.stdout}{r.stderr}"
    return out / "counter_f"


# One level a binding: it hands the level's number to libstasis, whose
# levels tests/mpi runs each (test_python.py takes partner).
@pytest.mark.parametrize("level", ["global"])
def test_kill_and_restart(tmp_path, counter_f, level):
    check_kill_and_restart(lambda name: Job(tmp_path / name, [counter_f], mpi=True),
                           [ITERATIONS, EVERY, LEVELS[level]], KILL_RANK, KILL_ITERATION, EVERY)


def test_killed_before_any_checkpoint_starts_fresh(tmp_path, counter_f):
    """Killed before its first checkpoint, a job has nothing to recover: the
    rerun (without the kill, which a fresh run would repeat) starts at step
    0 and ends like an uninterrupted run."""
    args = [ITERATIONS, 100, LEVELS["single"]]
    ref = Job(tmp_path / "ref", [counter_f], mpi=True)
    first = ref.ok(*args, -1, 0, "ref")
    job = Job(tmp_path / "crash", [counter_f], mpi=True)
    job.killed(*args, 0, 3, "out")
    again = job.ok(*args, -1, 0, "out")
    assert again.restarted_at is None, again
    assert job.outputs("out") == ref.outputs("ref"), again
    assert again.done == first.done, again


def test_serial_module_every_routine(tmp_path):
    """api_serial.f90 on the serial module: every routine, the binding's own
    errors with their messages, and a restart of a job without MPI."""
    lib = require_library("stasis_serial")
    if not shutil.which("gfortran"):
        pytest.skip("gfortran not installed")
    flags = ["-Wall", "-Wextra", "-Werror", "-std=f2018"]
    for cmd in (["gfortran", "-cpp", "-DSTASIS_NO_MPI", *flags, "-c",
                 ROOT / "bindings" / "fortran" / "stasis.f90"],
                ["gfortran", *flags, ROOT / "tests" / "bindings" / "api_serial.f90", "stasis.o",
                 "-o", "api_serial", "-L", lib.parent, "-lstasis_serial",
                 f"-Wl,-rpath,{lib.parent}"]):
        cmd = [str(c) for c in cmd]
        r = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"$ {' '.join(cmd)}\n{r.stdout}{r.stderr}"
    job = Job(tmp_path / "job", [tmp_path / "api_serial"], mpi=False)
    runs = [subprocess.run([str(tmp_path / "api_serial")], cwd=job.root, env=job.env, text=True,
                           capture_output=True, timeout=60) for _ in range(2)]
    for i, r in enumerate(runs):
        out = f"run {i}:\n{r.stdout}{r.stderr}"
        lines = r.stdout.splitlines()
        assert r.returncode == 1, out            # error stop 1 from the last call
        assert lines[:6] == [
            "init comm: -38 stasis_init(comm 0): this stasis module is the serial build "
            "(no MPI); call stasis_init_serial",
            "init serial: 0",
            "init again: -114 stasis_init_serial: already initialized",
            "protect: 0",
            "strided: -22 stasis_protect: id 3: the array is not contiguous (a strided "
            "section); protect a whole array",
            "element size: -22 stasis_protect: id 1 was protected with 8-byte elements, now 4",
        ], out
        assert lines[6] == ("fresh" if i == 0 else "recovered: 0 step=1 a=2.0 pair=.5"), out
        assert lines[7:] == ["invalid checkpoint refused: T", "checkpoint: 0", "finalize: 0"], out
        assert "stasis: stasis_recover: called after stasis_finalize" in r.stderr, out

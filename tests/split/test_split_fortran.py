"""Fortran MPI programs under the split process (docs/split.md, "Fortran"):
fortran.f90, built with mpif90.openmpi and mpifort.mpich (mpif.h, and the
mpi module), runs above Stasis's Fortran stand-ins (libmpi_mpifh.so.40,
libmpichfort.so.12); it is checkpointed, killed with SIGKILL and restarted
three times under `stasis run`, under Open MPI and MPICH, on 2 and 4 ranks,
and restarted once under the other MPI; it checks every message, status and
reduction itself and counts its checks. fortran_calls.f90 does the same
with the calls gen_fortran.py generates from their C prototypes
(collectives, Waitany's and Testsome's 1-based indices, derived types and
a subarray, Cartesian topology, probes, MPI-IO with a file name and names
read back as Fortran strings, persistent requests). A Fortran function the
stand-in does not implement names itself and ends the job.

Environment: STASIS_BIN, STASIS_BUILD."""
import pathlib
import shutil
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
from split_common import ENV, LH, TIMEOUT, data_file, launcher  # noqa: E402
from test_ckpt import MpiJob, cycles, iteration  # noqa: E402
from test_restart_p2p import assert_checkpoints  # noqa: E402

MPIFC = {"openmpi": "mpif90.openmpi", "mpich": "mpifort.mpich"}
FFLAGS = ["-cpp", "-O1", "-fallow-argument-mismatch", "-w"]
ITERS = 20        # SLEEP_MS each, and the collectives (test_ckpt.ITERS)
SLEEP_MS = 100
MATRIX = [("openmpi", 2), ("openmpi", 4), ("mpich", 2), ("mpich", 4)]


@pytest.fixture(scope="module")
def progs(tmp_path_factory):
    """{(variant, abi): path}: fortran.f90 with mpif.h ("mpif") and with the
    mpi module ("module"), unsupported.f90 ("unsupported")."""
    d = tmp_path_factory.mktemp("fortran-progs")
    out = {}
    for abi, fc in MPIFC.items():
        for variant, src, extra in [("mpif", "fortran.f90", []),
                                    ("module", "fortran.f90", ["-DUSE_MPI_MODULE"]),
                                    ("calls", "fortran_calls.f90", []),
                                    ("calls-module", "fortran_calls.f90", ["-DUSE_MPI_MODULE"]),
                                    ("unsupported", "unsupported.f90", [])]:
            exe = d / f"{variant}.{abi}"
            r = subprocess.run([fc, *FFLAGS, *extra, "-o", str(exe), str(HERE / src)],
                               capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
            out[(variant, abi)] = str(exe)
    return out


def checks(n, iters):
    """fortran.f90's count per rank and iteration: 4 checks of the ring, 4
    of reductions, 5 of blocking calls, MPI_Test and MPI_Wait, 1 of the
    program's own error handler."""
    return 14 * n * iters


def calls_checks(n, iters):
    """fortran_calls.f90's count: 5 before the loop, 23 per iteration, 1 at
    the end, per rank."""
    return n * (6 + 23 * iters)


def run(cmd, cwd):
    return subprocess.run(cmd, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=TIMEOUT,
                          errors="replace")


@pytest.mark.parametrize("abi", ["openmpi", "mpich"])
@pytest.mark.parametrize("variant", ["mpif", "module"])
def test_program_passes_natively(progs, variant, abi, tmp_path):
    r = run(launcher(abi, 2) + [progs[(variant, abi)], "3", "20"], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"PASS ranks=2 iterations=3 checks={checks(2, 3)}\n" in r.stdout, r.stdout + r.stderr


def test_programs_link_the_fortran_libraries(progs):
    """What the stand-ins must replace: the programs name the Fortran
    library of their MPI, and Stasis built one with that soname."""
    for abi, lib in [("openmpi", "libmpi_mpifh.so.40"), ("mpich", "libmpichfort.so.12")]:
        for variant in ("mpif", "module"):
            needed = subprocess.run(["readelf", "-d", progs[(variant, abi)]], capture_output=True,
                                    text=True, check=True).stdout
            assert f"[{lib}]" in needed, needed
        soname = subprocess.run(["readelf", "-d", str(LH / "uh" / lib)], capture_output=True,
                                text=True, check=True).stdout
        assert f"Library soname: [{lib}]" in soname, soname


@pytest.mark.parametrize("abi,lower", [("openmpi", "openmpi"), ("mpich", "mpich"),
                                       ("openmpi", "mpich"), ("mpich", "openmpi")])
@pytest.mark.parametrize("variant", ["mpif", "module"])
def test_under_the_lower_half(progs, variant, abi, lower, tmp_path):
    """Above a lower half (either MPI, without a checkpoint): the same
    result as natively."""
    r = run(launcher(lower, 2) + [str(LH / f"stasis-lh-{lower}"), progs[(variant, abi)], "3", "20"],
            tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"PASS ranks=2 iterations=3 checks={checks(2, 3)}\n" in r.stdout, r.stdout + r.stderr


# (fortran.f90's handles are converted the same whatever the ranks: MPICH's
# 4 busy-polling ranks only for its ring in flight, the drain, which
# test_restart_p2p.py's p2p.c takes there; test_calls_three_cycles keeps
# them for the mpi module's bindings)
@pytest.mark.parametrize("lower,n", MATRIX[:3])
def test_three_cycles(progs, lower, n, tmp_path):
    job = MpiJob(tmp_path)
    job.start(*launcher(lower, n), progs[("mpif", lower)], ITERS, SLEEP_MS)
    cycles(job)
    rc, out, err = job.finish_job()
    assert rc == 0, out + err
    assert f"PASS ranks={n} iterations={ITERS} checks={checks(n, ITERS)}\n" in out, out + err
    assert "FAIL" not in out
    assert_checkpoints(job, n)


@pytest.mark.parametrize("first,second", [("openmpi", "mpich"), ("mpich", "openmpi")])
def test_restart_under_the_other_mpi(progs, first, second, tmp_path):
    """Checkpointed above one MPI, restarted above the other (--launcher):
    the program's Fortran handles (predefined and created) mean the same."""
    job = MpiJob(tmp_path)
    job.start(*launcher(first, 2), progs[("module", first)], ITERS, SLEEP_MS)
    cycles(job, n=1, restart_args=["--launcher", " ".join(launcher(second, 2))])
    rc, out, err = job.finish_job()
    assert rc == 0, out + err
    assert f"PASS ranks=2 iterations={ITERS} checks={checks(2, ITERS)}\n" in out, out + err
    assert "FAIL" not in out


@pytest.mark.parametrize("lower", ["openmpi", "mpich"])
def test_unsupported_function_fails_loudly(progs, lower, tmp_path):
    natively = run(launcher(lower, 2) + [progs[("unsupported", lower)]], tmp_path)
    assert natively.returncode == 0 and "created" in natively.stdout, natively.stderr
    r = run(launcher(lower, 2) + [str(LH / f"stasis-lh-{lower}"), progs[("unsupported", lower)]],
            tmp_path)
    assert r.returncode != 0, r
    assert "created" not in r.stdout
    line = [x for x in r.stderr.splitlines() if x.startswith("stasis: MPI_Win_set_name")]
    # one line: the function, what supporting it would need (functions.list)
    assert line and line[0].startswith("stasis: MPI_Win_set_name (Fortran) is not supported "
                                       "by the split process: one-sided communication"), r.stderr
    assert line[0].endswith("(docs/split.md); aborting the job"), r.stderr


def test_closed_files_come_back_as_at_the_checkpoint(progs, tmp_path):
    """Every iteration each rank reads the previous iteration's number from
    w-R.txt, rewrites it (OPEN status='replace', CLOSE) and appends a line
    to a-R.txt: libgfortran's OPEN calls libc's open, which a Fortran
    program finds before Stasis's MPI library. Killed two iterations after
    a checkpoint and restarted, each rank reads back the checkpoint's
    number, and both files end as an uninterrupted run's. Their directory,
    removed before the restart, is made again."""
    prog = progs[("mpif", "openmpi")]
    native, run_dir = tmp_path / "native", tmp_path / "run"
    native.mkdir()
    run_dir.mkdir()
    r = run(launcher("openmpi", 2) + [prog, str(ITERS), "0", str(native)], tmp_path)
    assert r.returncode == 0 and "PASS ranks=2" in r.stdout, r.stdout + r.stderr
    job = MpiJob(tmp_path)
    job.start(*launcher("openmpi", 2), prog, ITERS, SLEEP_MS, str(run_dir))
    job.lines_until(r"rank 0 iteration 2")
    job.checkpoint()
    after = iteration(job.lines_until(r"rank 0 iteration \d+"))
    job.lines_until(rf"rank 0 iteration {after + 2}")   # rewritten since, for sure
    job.kill()
    shutil.rmtree(run_dir)
    job.restart()
    rc, out, err = job.finish_job()
    assert rc == 0 and f"PASS ranks=2 iterations={ITERS} " in out, out + err
    for name in ("w-0.txt", "w-1.txt", "a-0.txt", "a-1.txt"):
        assert (run_dir / name).read_text() == (native / name).read_text(), name


# ---- fortran_calls.f90: the generated bindings ----

@pytest.mark.parametrize("abi", ["openmpi", "mpich"])
@pytest.mark.parametrize("variant", ["calls", "calls-module"])
def test_calls_pass_natively(progs, variant, abi, tmp_path):
    """What the program expects is what each MPI's own binding does
    ("strict" but for MPICH's MPI_Waitany of no request: see the program)."""
    strict = ["strict"] if abi == "openmpi" else []
    r = run(launcher(abi, 3) + [progs[(variant, abi)], "3", "5", data_file(tmp_path), *strict],
            tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"PASS ranks=3 iterations=3 checks={calls_checks(3, 3)}\n" in r.stdout, \
        r.stdout + r.stderr


@pytest.mark.parametrize("abi,lower", [("openmpi", "openmpi"), ("mpich", "mpich"),
                                       ("openmpi", "mpich"), ("mpich", "openmpi")])
def test_calls_under_the_lower_half(progs, abi, lower, tmp_path):
    r = run(launcher(lower, 3) + [str(LH / f"stasis-lh-{lower}"), progs[("calls", abi)], "3", "5",
                                  data_file(tmp_path), "strict"], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"PASS ranks=3 iterations=3 checks={calls_checks(3, 3)}\n" in r.stdout, \
        r.stdout + r.stderr


@pytest.mark.parametrize("lower,n", MATRIX)
def test_calls_three_cycles(progs, lower, n, tmp_path):
    """Created communicators, types, requests and an open file cross three
    checkpoints, kills and restarts; every generated call keeps working."""
    job = MpiJob(tmp_path)
    variant = "calls-module" if n == 4 else "calls"
    job.start(*launcher(lower, n), progs[(variant, lower)], ITERS, SLEEP_MS,
              data_file(tmp_path), "strict")
    cycles(job)
    rc, out, err = job.finish_job()
    assert rc == 0, out + err
    assert f"PASS ranks={n} iterations={ITERS} checks={calls_checks(n, ITERS)}\n" in out, out + err
    assert "FAIL" not in out


def test_calls_restart_under_the_other_mpi(progs, tmp_path):
    job = MpiJob(tmp_path)
    job.start(*launcher("mpich", 2), progs[("calls", "mpich")], ITERS, SLEEP_MS,
              data_file(tmp_path), "strict")
    cycles(job, n=1, restart_args=["--launcher", " ".join(launcher("openmpi", 2))])
    rc, out, err = job.finish_job()
    assert rc == 0, out + err
    assert f"PASS ranks=2 iterations={ITERS} checks={calls_checks(2, ITERS)}\n" in out, out + err

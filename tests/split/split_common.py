"""What the tests of tests/split share: where the build is, the MPI
compilers and launchers, the environment MPI programs run in, and building
the test programs once per ABI. (Not a conftest.py: tests/cli and tests/mpi
run in the same pytest session with conftests of their own.)"""
import os
import pathlib
import subprocess
import uuid

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
HERE = pathlib.Path(__file__).resolve().parent
BUILD = pathlib.Path(os.environ.get("STASIS_BUILD", str(ROOT / "build"))).resolve()
LH = BUILD / "src" / "split"
TIMEOUT = 120
MPICC = {"openmpi": "mpicc.openmpi", "mpich": "mpicc.mpich"}
MPI_ENV = dict(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
# the caller's STASIS_* left out but STASIS_SPLIT_ONETLS: tests/split run
# in full with one thread pointer (docs/split.md, "One thread pointer")
KEPT = ("STASIS_SPLIT_ONETLS",)
ENV = {k: v for k, v in dict(os.environ, **MPI_ENV).items()
       if not k.startswith("STASIS_") or k in KEPT}


def data_file(tmp_path):
    """A file for a program's MPI-IO, by a name no other job uses: Open MPI's
    OMPIO names a POSIX semaphore after the file's base name, and one left
    behind by a rank killed while it held it would hang the next job that
    opens a file of that name."""
    return str(tmp_path / f"f-{uuid.uuid4().hex[:12]}.dat")


def launcher(lower, n):
    if lower == "openmpi":
        return ["mpirun.openmpi", "--oversubscribe", "-np", str(n)]
    return ["mpiexec.mpich", "-n", str(n)]


# what a program needs beyond the MPI compiler's defaults
FLAGS = {"threads": ["-fopenmp", "-pthread"], "lazy": ["-I", str(ROOT / "include")]}


def build_programs(tmp_path_factory, names):
    """Each tests/split/<name>.c built with both MPIs: {(name, abi): path}."""
    d = tmp_path_factory.mktemp("split-progs")
    out = {}
    for abi, cc in MPICC.items():
        for name in names:
            exe = d / f"{name}.{abi}"
            subprocess.run([cc, "-O1", *FLAGS.get(name, []), "-o", str(exe),
                            str(HERE / f"{name}.c")], check=True, capture_output=True)
            out[(name, abi)] = str(exe)
    return out


def build_program(tmp_path_factory, name):
    """tests/split/<name>.c built with both MPIs: {abi: path}."""
    built = build_programs(tmp_path_factory, (name,))
    return {abi: built[(name, abi)] for abi in MPICC}


def program_fixture(name):
    """A module's fixture of tests/split/<name>.c built with both MPIs
    ({abi: path}, build_program), once per module: `hello =
    program_fixture("hello")` (the fixture is named after the variable)."""
    @pytest.fixture(scope="module")
    def built(tmp_path_factory):
        return build_program(tmp_path_factory, name)
    return built


def run_on(prog, lower, n, args, cwd, env=None):
    """prog (built with either MPI) on n ranks launched by lower's launcher:
    natively when lower is None (prog's own MPI: abi_of), else above
    lower's lower half, without a checkpoint (env: variables added). The
    CompletedProcess."""
    lh = [str(LH / f"stasis-lh-{lower}")] if lower else []
    return subprocess.run(launcher(lower or abi_of(prog), n) + lh + [prog, *args], cwd=cwd,
                          env=dict(ENV, **(env or {})), capture_output=True, text=True,
                          timeout=TIMEOUT)


def abi_of(prog):
    """The MPI a program of build_programs was built with (its suffix)."""
    return pathlib.Path(prog).suffix[1:]


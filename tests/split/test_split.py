"""The split process's first layer (docs/split.md): unmodified MPI programs,
built with Open MPI's or MPICH's mpicc, run as the upper half above either
lower half (stasis-lh-openmpi, stasis-lh-mpich) and get the same results as
natively; an unsupported function names itself and ends the job.

Environment: STASIS_BUILD (the build tree)."""
import subprocess

import pytest

from split_common import ENV, LH, TIMEOUT, build_programs, launcher


@pytest.fixture(scope="module")
def progs(tmp_path_factory):
    return build_programs(tmp_path_factory, ("calls", "unsupported", "spawn"))


def run(cmd, cwd):
    r = subprocess.run(cmd, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=TIMEOUT,
                       errors="replace")
    assert "Segmentation fault" not in r.stderr, r.stderr
    return r


@pytest.mark.parametrize("abi", ["openmpi", "mpich"])
def test_calls_native(progs, abi, tmp_path):
    """The test program itself passes without Stasis."""
    r = run(launcher(abi, 2) + [progs[("calls", abi)]], tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "PASS ranks=2", r.stderr


@pytest.mark.parametrize("abi,lower,n", [
    ("openmpi", "openmpi", 2), ("openmpi", "openmpi", 4), ("mpich", "mpich", 2),
    ("mpich", "mpich", 3),
    # the upper half does not depend on the MPI below it
    ("mpich", "openmpi", 2), ("openmpi", "mpich", 2),
])
def test_calls_split(progs, abi, lower, n, tmp_path):
    r = run(launcher(lower, n) + [str(LH / f"stasis-lh-{lower}"), progs[("calls", abi)]],
            tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == f"PASS ranks={n}", r.stdout + r.stderr


def test_upper_half_runs_on_stasis_mpi(progs, tmp_path):
    """The program's libmpi is Stasis's; the real one is the lower half's only."""
    probe = tmp_path / "maps.c"
    probe.write_text(r"""
#define _GNU_SOURCE
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <dlfcn.h>
int main(int argc, char **argv) {
    Dl_info info;
    MPI_Init(&argc, &argv);
    dladdr((void *)MPI_Send, &info);
    printf("%s\n", info.dli_fname);
    MPI_Finalize();
    return 0;
}
""")
    exe = tmp_path / "maps"
    subprocess.run(["mpicc.openmpi", "-o", str(exe), str(probe)], check=True)
    r = run(launcher("openmpi", 1) + [str(LH / "stasis-lh-openmpi"), str(exe)], tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(LH / "uh" / "libmpi.so.40"), r.stdout


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
    assert line and line[0].startswith(
        "stasis: MPI_Win_set_name is not supported by the split process: "
        "one-sided communication"), r.stderr
    assert line[0].endswith("(docs/split.md); aborting the job"), r.stderr


@pytest.mark.parametrize("lower", ["openmpi", "mpich"])
def test_spawn_is_refused_at_the_call(progs, lower, tmp_path):
    """MPI_Comm_get_parent says MPI_COMM_NULL (the launcher's ranks have no
    parent); MPI_Comm_spawn ends the job at the call, saying why: the job's
    process set would change, and the coordinator knows a fixed number of
    ranks."""
    r = run(launcher(lower, 2) + [str(LH / f"stasis-lh-{lower}"), progs[("spawn", lower)]],
            tmp_path)
    assert r.returncode != 0, r
    assert "no parent" in r.stdout and "spawned" not in r.stdout, r.stdout + r.stderr
    line = [x for x in r.stderr.splitlines() if x.startswith("stasis: MPI_Comm_spawn")]
    assert line and ("dynamic processes: the job's process set would change, and the coordinator "
                     "and every checkpoint know a fixed number of ranks") in line[0], r.stderr


def test_stasis_mpi_without_lower_half(progs, tmp_path):
    """Stasis's libmpi without a lower half says so instead of crashing."""
    env = dict(ENV, LD_LIBRARY_PATH=str(LH / "uh"))
    r = subprocess.run([progs[("calls", "mpich")]], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=TIMEOUT)
    assert r.returncode == 1, r
    assert r.stderr == ("stasis: this program runs with Stasis's MPI library but without its "
                        "lower half (start it with stasis run)\n"), r.stderr


def test_lower_half_refusals(tmp_path):
    lh = str(LH / "stasis-lh-openmpi")
    static = tmp_path / "static"
    src = tmp_path / "static.c"
    src.write_text("int main(void) { return 0; }\n")
    subprocess.run(["cc", "-static", "-o", str(static), str(src)], check=True)
    for args, msg in [
        ([], "stasis: lower half: usage: "),
        (["/nonexistent/prog"], "stasis: lower half: cannot execute /nonexistent/prog: "
                                "No such file or directory"),
        (["no-such-program-anywhere"], "stasis: lower half: cannot execute "
                                       "no-such-program-anywhere: not found in PATH"),
        ([str(static)], f"stasis: lower half: {static} is statically linked: the split "
                        "process needs a dynamically linked MPI program"),
    ]:
        r = subprocess.run([lh, *args], cwd=tmp_path, env=ENV, capture_output=True, text=True,
                           timeout=TIMEOUT)
        assert r.returncode == 127, r
        lines = r.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(msg), r.stderr


def test_thread_level(progs, tmp_path):
    env = dict(ENV, STASIS_MPI_THREAD_LEVEL="bogus")
    r = subprocess.run([str(LH / "stasis-lh-openmpi"), progs[("calls", "openmpi")]], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 127
    assert r.stderr.splitlines() == ["stasis: lower half: STASIS_MPI_THREAD_LEVEL=bogus: expected "
                                     "single, funneled, serialized or multiple"], r.stderr



THREADS_C = r"""
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
static void *other(void *p) { MPI_Is_thread_main((int *)p); return NULL; }
int main(int argc, char **argv) {
    int provided = -1, query = -1, main_ = -1, in_other = -1;
    pthread_t t;
    MPI_Init_thread(&argc, &argv, atoi(argv[1]), &provided);
    MPI_Query_thread(&query);
    MPI_Is_thread_main(&main_);
    pthread_create(&t, NULL, other, &in_other);
    pthread_join(t, NULL);
    printf("provided %d query %d main %d other %d\n", provided, query, main_, in_other);
    MPI_Finalize();
    return 0;
}
"""


@pytest.mark.parametrize("lower", ["openmpi", "mpich"])
def test_thread_level_offered(lower, tmp_path):
    """At the default level (the lower half's MPI at SINGLE) a program is
    offered up to FUNNELED, and MPI_Query_thread agrees; the variable gives
    MULTIPLE to a program that asks for it (docs/split.md, "Thread level")."""
    src = tmp_path / "threads.c"
    src.write_text(THREADS_C)
    exe = tmp_path / "threads"
    subprocess.run([f"mpicc.{lower}", "-o", str(exe), str(src), "-lpthread"], check=True)
    for level_env, asked, expected in [(None, 3, 1), (None, 1, 1), (None, 0, 0),
                                       ("multiple", 3, 3), ("serialized", 3, 2)]:
        env = dict(ENV)
        if level_env:
            env["STASIS_MPI_THREAD_LEVEL"] = level_env
        r = subprocess.run(launcher(lower, 1) + [str(LH / f"stasis-lh-{lower}"), str(exe),
                                                 str(asked)],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=TIMEOUT)
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == f"provided {expected} query {expected} main 1 other 0", \
            (level_env, asked, r.stdout, r.stderr)


@pytest.mark.parametrize("lower", ["openmpi", "mpich"])
def test_wait_by_completion_word(progs, lower, tmp_path):
    """With Open MPI the lower half's waits read the request's completion word
    (src/split/virt/lh_poll.c), checked at startup: a layout that no longer checks
    out would silently fall back to MPI_Test; with MPICH they are MPI_Test."""
    env = dict(ENV, STASIS_LOG="debug")
    r = subprocess.run(launcher(lower, 2) + [str(LH / f"stasis-lh-{lower}"),
                                             progs[("calls", lower)]],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    line = "stasis: lower half: requests tested by their completion word"
    assert r.stderr.count(line) == (2 if lower == "openmpi" else 0), r.stderr


def test_spawned_by_a_native_parent(progs, tmp_path):
    """A lower half started by a native job's MPI_Comm_spawn (spawn.c with
    a PROGRAM): MPI_Comm_get_parent gives the program a communicator with
    processes outside its MPI_COMM_WORLD, over which it sends to its
    parent. Its collectives are not counted (a checkpoint is refused
    while it lives: docs/split.md). Before, the lower half's agreement on
    its key waited for the parent, which never joins it: the child hung
    in MPI_Comm_get_parent. About 1 s."""
    prog = progs[("spawn", "openmpi")]
    r = run(launcher("openmpi", 1) + [prog, str(LH / "stasis-lh-openmpi"), prog], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "parent got 42\n" in r.stdout and "child sent\n" in r.stdout, r.stdout + r.stderr

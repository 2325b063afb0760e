"""State a real application acquires after MPI_Init survives checkpoint,
SIGKILL and restart (issue 20; docs/split.md "Upper-half memory" and "The
upper half's descriptors"): appstate.c grows its heap by small allocations
before and after every restart and checks every block, calls a library it
dlopen()ed after MPI_Init and another it dlopen()ed after the first
restart, writes a log with fopen and an O_APPEND file per rank (after
three cycles the files must equal those of an uninterrupted run), keeps a
POSIX shared memory object mapped, and starts a thread after every
restart that lives on through the later ones. A memfd mapped shared is
refused in one line.

Environment: STASIS_BIN, STASIS_BUILD."""
import fcntl
import re
import struct
import subprocess

import pytest

from split_common import launcher, program_fixture, run_on
from test_ckpt import MpiJob, cycles, iteration

ITERS = 40
SLEEP_MS = 60


appstate = program_fixture("appstate")


@pytest.fixture(scope="module")
def plugins(tmp_path_factory):
    d = tmp_path_factory.mktemp("plugins")
    src = str(__import__("pathlib").Path(__file__).resolve().parent / "plugin.c")
    out = []
    for name in ("plugin_a", "plugin_b"):
        so = d / f"{name}.so"
        subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", str(so), src], check=True)
        out.append(str(so))
    return out


def files_of(d, n):
    names = ["log.txt"] + [f"append-{r}.txt" for r in range(n)]
    return {name: (d / name).read_text() for name in names}


def args_of(d, plugins, modes):
    a = [str(ITERS), str(SLEEP_MS), str(d)]
    if "heap" in modes:
        a.append("heap")
    if "dlopen" in modes:
        a += ["dlopen", *plugins]
    a += [m for m in modes if m in ("files", "shm", "thread", "unlinked", "rwfile", "wfile", "many",
                                        "memfd", "socket")]
    return a


def three_cycles(prog, plugins, lower, tmp_path, modes):
    """prog with modes through three checkpoint, SIGKILL and restart cycles
    on 2 ranks of lower; the directory its files went to, and (for files)
    the one of an uninterrupted run of the same."""
    native = tmp_path / "native"
    native.mkdir()
    if "files" in modes:
        r = run_on(prog, None, 2, args_of(native, plugins, modes), tmp_path)
        assert r.returncode == 0 and "PASS ranks=2" in r.stdout, r.stdout + r.stderr
    run = tmp_path / "run"
    run.mkdir()
    job = MpiJob(tmp_path)
    job.start(*launcher(lower, 2), prog, *args_of(run, plugins, modes))
    cycles(job)
    rc, out, err = job.finish_job()
    assert rc == 0 and f"PASS ranks=2 iterations={ITERS} blocks=" in out, out + err
    assert "FAIL" not in out
    for rank in (0, 1):  # each rank's own line right after its restart
        assert f"rank {rank} restarted 3" in out, out + err
    assert " restarts=3/3\n" in out, out + err
    return run, native, out


@pytest.mark.parametrize("lower", ["openmpi", "mpich"])
def test_heap_grown_by_small_blocks_across_restarts(appstate, plugins, lower, tmp_path):
    _, _, out = three_cycles(appstate[lower], plugins, lower, tmp_path, ("heap",))
    assert f"blocks={ITERS * 64}" in out


@pytest.mark.parametrize("lower", ["openmpi", "mpich"])
def test_libraries_dlopened_after_init_and_after_a_restart(appstate, plugins, lower, tmp_path):
    three_cycles(appstate[lower], plugins, lower, tmp_path, ("dlopen",))


# (Open MPI: the upper half's descriptors are saved and reopened by the
# same code above either MPI, src/split/lower/lh_fds.c)
@pytest.mark.parametrize("lower", ["openmpi"])
def test_open_files_equal_an_uninterrupted_runs(appstate, plugins, lower, tmp_path):
    """rank 0's fopen()ed log and every rank's O_APPEND file: lines written
    between a checkpoint and the kill are written again after the restart,
    over the same bytes (the log's offset) or after the file was cut back
    to its length at the checkpoint (the appended ones)."""
    run, native, _ = three_cycles(appstate[lower], plugins, lower, tmp_path, ("files",))
    assert files_of(run, 2) == files_of(native, 2)


def test_files_written_after_the_checkpoint_are_restored(appstate, plugins, tmp_path):
    """Every rank updates rw-R.db in place, as a database does (NWChem's
    runtime database), and rewrites w-R.txt with fopen "w" and fclose,
    reading it back the next iteration (NWChem's Hessian, perm/*.drv.hess),
    and r-R.txt the same way through a temporary file renamed over it:
    what it wrote to either between the checkpoint and the kill is undone
    at the restart, so what it reads back is its own."""
    run = tmp_path / "run"
    run.mkdir()
    job = MpiJob(tmp_path)
    job.start(*launcher("openmpi", 2), appstate["openmpi"],
              *args_of(run, plugins, ("rwfile", "wfile")))
    job.lines_until(r"rank 0 iteration 2")
    job.checkpoint()
    after = iteration(job.lines_until(r"rank 0 iteration \d+"))
    job.lines_until(rf"rank 0 iteration {after + 2}")   # updated since, for sure
    job.kill()
    job.restart()
    job.lines_until(r"rank 0 iteration \d+")
    with open(run / "rw-0.db") as f:   # the restarted rank holds its flock again
        with pytest.raises(BlockingIOError):
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    rc, out, err = job.finish_job()
    assert rc == 0 and f"PASS ranks=2 iterations={ITERS} " in out, out + err
    for rank in (0, 1):
        words = [ITERS] + [(it << 32) | rank for it in range(ITERS)] + [0] * (64 - ITERS)
        assert (run / f"rw-{rank}.db").read_bytes() == struct.pack("<65Q", *words)
        # what an uninterrupted run leaves
        assert (run / f"w-{rank}.txt").read_text() == f"iteration {ITERS - 1}\n"
        assert (run / f"r-{rank}.txt").read_text() == f"iteration {ITERS - 1}\n"


def test_written_file_over_written_save_max_changed_since_is_named(appstate, plugins, tmp_path):
    """written_save_max below w-R.txt's size: the checkpoint keeps only its
    size and mtime, and the restart names it, changed since, in one line
    per rank (the program then reads the file of the future and fails)."""
    run = tmp_path / "run"
    run.mkdir()
    job = MpiJob(tmp_path)
    job.env.update(STASIS_WRITTEN_SAVE_MAX="4")
    job.start(*launcher("openmpi", 2), appstate["openmpi"], *args_of(run, plugins, ("wfile",)))
    job.lines_until(r"rank 0 iteration 2")
    job.checkpoint()
    after = iteration(job.lines_until(r"rank 0 iteration \d+"))
    job.lines_until(rf"rank 0 iteration {after + 2}")
    job.kill()
    job.restart()
    rc, out, err = job.finish_job()
    assert rc != 0 and "FAIL w.txt holds iteration" in out, out + err
    for rank in (0, 1):
        line = (f"stasis: rank {rank}: {run.resolve()}/w-{rank}.txt changed after the checkpoint "
                f"and is larger than written_save_max: the program finds it as it is now\n")
        assert err.count(line) == 1, err


def test_more_written_files_than_listed_are_said(appstate, plugins, tmp_path):
    """Every rank writes and deletes 300 files, then writes 300 it keeps:
    the deleted ones leave the list of 256, and each checkpoint says in
    one line per rank how many written files it does not save."""
    run = tmp_path / "run"
    run.mkdir()
    job = MpiJob(tmp_path)
    job.start(*launcher("openmpi", 2), appstate["openmpi"], *args_of(run, plugins, ("many",)))
    job.lines_until(r"rank 0 iteration 2")
    job.checkpoint()
    rc, out, err = job.finish_job()
    assert rc == 0 and f"PASS ranks=2 iterations={ITERS} " in out, out + err
    for rank in (0, 1):
        said = re.findall(rf"^stasis: rank {rank}: (\d+) opens for writing since the last "
                          r"checkpoint found the list of 256 written files full: those files "
                          r"are not saved \(a restart finds them as they are then\)$", err, re.M)
        # 44 of the kept ones, and whatever else the rank opened for writing
        # meanwhile; without the deleted ones making room, 344 and more
        assert len(said) == 1 and 44 <= int(said[0]) < 300, err


@pytest.mark.parametrize("lower", ["openmpi", "mpich"])
def test_shared_memory_object_and_threads_started_after_restarts(appstate, plugins, lower,
                                                                  tmp_path):
    three_cycles(appstate[lower], plugins, lower, tmp_path, ("shm", "thread", "unlinked"))


def refused(appstate, plugins, tmp_path, mode, env=None):
    """appstate with mode under `stasis run` (and env): the checkpoint's one
    line of refusal; the job runs on to its end."""
    run = tmp_path / "run"
    run.mkdir()
    job = MpiJob(tmp_path)
    job.env.update(env or {})
    job.start(*launcher("openmpi", 2), appstate["openmpi"], *args_of(run, plugins, (mode,)))
    job.lines_until(r"rank 0 iteration 2")
    r = job.stasis("checkpoint", "--dir", job.ck, check=False)
    assert r.returncode != 0, r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    rc, out, err = job.finish_job()
    assert rc == 0 and f"PASS ranks=2 iterations={ITERS}" in out, out + err
    # the refused checkpoint is FAILED: a restart of it is refused in one line
    r = job.stasis("restart", "--dir", job.ck, "ckpt-000001", check=False)
    assert r.returncode == 1 and re.fullmatch(
        r"stasis: restart: ckpt-000001 of job \S+ failed \(.+\): restart an established "
        r"checkpoint \(stasis ls\)\n", r.stderr), r.stdout + r.stderr
    return lines[0]


def test_memfd_mapping_is_refused_and_the_job_runs_on(appstate, plugins, tmp_path):
    line = refused(appstate, plugins, tmp_path, "memfd")
    assert re.search(r"rank [01]: the upper half maps /memfd:appstate \(deleted\) shared at", line) \
        and "memfd, SysV and deleted shared files are not supported" in line, line


def test_file_over_file_save_max_is_refused(appstate, plugins, tmp_path):
    """(the whole line: the coordinator cut a rank's refusal at 199
    characters)"""
    line = refused(appstate, plugins, tmp_path, "rwfile", dict(STASIS_FILE_SAVE_MAX="100"))
    assert re.search(r"rank [01]: the program's fd 3 holds 520 bytes, over file_save_max "
                     r"\(100\), open for reading and writing: /\S+/run/rw-[01]\.db \(raise "
                     r"it, or set it to 0 to restart with the file as it will be then\)$",
                     line), line


def test_socket_is_refused_naming_the_descriptor(appstate, plugins, tmp_path):
    line = refused(appstate, plugins, tmp_path, "socket")
    assert re.search(r"rank [01]: the program's fd 3 is a socket \(socket:\[\d+\]\): the split "
                     r"process saves files, directories, devices, pipes within the process, "
                     r"eventfd, timerfd and epoll$", line), line

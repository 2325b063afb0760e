"""Transparent checkpoint/restart of unmodified programs (docs/transparent.md):
each test program goes through three checkpoint / SIGKILL / restart cycles and
must then verify itself (PASS)."""
import struct
import sys

import pytest

from proc_harness import job, program  # noqa: F401 (job is a fixture)
from test_tree import until

CYCLES = 3


def cycles(job, name, *args):
    job.run(program(name), *args)
    names = []
    for _ in range(CYCLES):
        names.append(job.checkpoint())
        job.kill()
        job.restart()
    rc, out, err = job.finish()
    assert rc == 0 and out.strip().endswith("PASS"), f"rc={rc}\n{out}\n{err}"
    assert "FAIL" not in out, out
    assert names == [f"ckpt-{i:06d}" for i in range(1, CYCLES + 1)]
    return out, err


@pytest.mark.parametrize("name", ["heap", "threads", "signals", "avx512", "bigzero", "filemap", "files", "events", "mutexes", "churn",
                                  "sigfd", "inotify", "locks", "pty"])
def test_cycles(job, name):
    cycles(job, name)


def test_a_process_tree(job):
    """forktree.c: a pipe carrying data between two children, a file two
    processes write through one offset, shared anonymous memory and a
    zombie, through three checkpoint / SIGKILL / restart cycles."""
    out, _ = cycles(job, "forktree")
    sent, parent, child = map(int, out.split("records")[1].split()[:3])
    assert sent > 0 and parent > 0 and child > 0, out


def test_a_child_started_by_posix_spawn(job):
    """spawn.c starts heap.c with posix_spawnp and a file action: the child
    is in the job (its own channel, across glibc's exec), and after three
    cycles both verify themselves and the parent waits for the child."""
    out, _ = cycles(job, "spawn", program("heap"))
    assert out.count("PASS") == 2, out


def test_children_of_popen_and_system(job):
    """shell.c: a popen() shell holding a pipe and a system() shell the
    program waits for, through three cycles (glibc starts both with its
    internal posix_spawn, which the agent cannot follow: it wraps popen,
    pclose and system)."""
    cycles(job, "shell")


def test_a_file_updated_in_place_after_the_checkpoint(job):
    """rwfile.c updates rw.db in place every 10 ms and reads its count back,
    as a database does: what it wrote between the checkpoint and the kill
    is undone at the restart (the file's contents are in the image)."""
    db = job.work / "rw.db"

    def count():
        return struct.unpack("<Q", db.read_bytes()[:8])[0]

    job.run(program("rwfile"))
    for _ in range(2):
        job.checkpoint()
        at = count()
        until(lambda: count() >= at + 3)   # updated since, for sure
        job.kill()
        job.restart()
    rc, out, err = job.finish()
    assert rc == 0 and out.strip().endswith("PASS"), f"rc={rc}\n{out}\n{err}"


def test_files_written_and_closed_after_the_checkpoint(job):
    """rwfile.c closed: every update also rewrites last.txt, stamp.txt
    (mkstemp, then rename) and linked.txt (O_TMPFILE, linkat, rename) after
    reading the previous count back from each, and appends a line to
    log.txt, closing them all. Killed three updates after a checkpoint,
    twice: the restart puts them back as they were at the checkpoint, so
    the program reads its own count, and log.txt ends as an uninterrupted
    run's, every update once."""
    log = job.work / "log.txt"

    def count():
        return len(log.read_text().splitlines()) if log.exists() else 0

    job.run(program("rwfile"), "closed")
    for _ in range(2):
        job.checkpoint()
        at = count()
        try:
            until(lambda: count() >= at + 3, timeout=20)   # appended to since, for sure
        except AssertionError:   # the program stopped updating: its FAIL line
            rc, out, err = job.finish()
            raise AssertionError(f"no update since {at}: rc={rc}\n{out}\n{err}")
        job.kill()
        job.restart()
    rc, out, err = job.finish()
    assert rc == 0 and out.strip().endswith("PASS"), f"rc={rc}\n{out}\n{err}"
    n = int((job.work / "last.txt").read_text())
    assert log.read_text() == "".join(f"update {i}\n" for i in range(1, n + 1))
    for name in ("stamp.txt", "linked.txt"):
        assert (job.work / name).read_text() == f"{n}\n", name
    # an O_TMPFILE file open at a checkpoint after its linkat is saved
    # under its name, not the "#inode (deleted)" its descriptor shows
    assert not list(job.work.glob("#*")), list(job.work.iterdir())


# writes d/f.txt and renames d to e; writes g.txt and keeps it open for
# reading; then, once "go" exists, appends to both
WRITTEN_BEFORE = """
import os, time
os.mkdir("d"); open("d/f.txt", "w").write("start\\n"); os.rename("d", "e")
open("g.txt", "w").write("start\\n"); g = open("g.txt")
print("READY", flush=True)
while not os.path.exists("go"): time.sleep(0.02)
open("e/f.txt", "a").write("after\\n"); open("g.txt", "a").write("after\\n")
while not os.path.exists("stop"): time.sleep(0.02)
"""


def test_closed_files_in_a_renamed_directory_or_open_for_reading(job):
    """Two files written and closed before the checkpoint, appended to
    after it: one whose directory was renamed, one the program still has
    open for reading. The restart puts both back, so each ends with the
    restarted program's append only (before, the first was listed under
    its old path and the second left to its read-only descriptor, which
    restores no contents: both ended with two appends)."""
    f, g = job.work / "e" / "f.txt", job.work / "g.txt"
    job.run(sys.executable, "-c", WRITTEN_BEFORE)
    job.checkpoint()
    (job.work / "go").touch()
    until(lambda: "after" in f.read_text() and "after" in g.read_text(), timeout=20)
    job.kill()
    job.restart()
    rc, out, err = job.finish()   # the restarted program appends before it stops
    assert rc == 0, f"rc={rc}\n{out}\n{err}"
    assert (f.read_text(), g.read_text()) == ("start\nafter\n",) * 2


# appends its count to log through a child (/bin/echo: the forked shell
# opens log, and ends) every 50 ms until "stop" exists
CHILDREN_APPEND = """
echo READY
i=0
while [ ! -e stop ]; do
    i=$((i + 1))
    /bin/echo "$i" >> log
    sleep 0.05
done
echo "wrote $i lines"
"""


def test_a_file_only_children_that_ended_wrote(job):
    """A bash loop whose children append to log (`/bin/echo $i >> log`),
    killed three appends after a checkpoint and restarted, twice: log
    comes back as it was at the checkpoint, so it ends with each line
    once, and the script's own output is an uninterrupted run's. Before,
    no living process had log in its list: it kept the lines appended
    after the checkpoint and the restarted loop wrote them again. About
    3 s."""
    log = job.work / "log"

    def count():
        return len(log.read_text().splitlines()) if log.exists() else 0

    job.run("/bin/bash", "-c", CHILDREN_APPEND)
    for _ in range(2):
        until(lambda: count() >= 2, timeout=20)
        job.checkpoint()
        at = count()
        until(lambda: count() >= at + 3, timeout=20)
        job.kill()
        job.restart()
    rc, out, err = job.finish()
    assert rc == 0, f"rc={rc}\n{out}\n{err}"
    n = count()
    assert log.read_text() == "".join(f"{i}\n" for i in range(1, n + 1))
    assert out == f"wrote {n} lines\n", out


# writes before.txt, then execs a program that, once "go" exists, appends
# to it
EXEC_AFTER = """
import os, time
print("READY", flush=True)
while not os.path.exists("go"): time.sleep(0.02)
open("before.txt", "a").write("after\\n")
while not os.path.exists("stop"): time.sleep(0.02)
"""
WRITE_THEN_EXEC = f"""
import os, sys
open("before.txt", "w").write("start\\n")
os.execv(sys.executable, [sys.executable, "-c", {EXEC_AFTER!r}])
"""


def test_a_file_written_before_an_exec(job):
    """A program writes before.txt and closes it, then execs another that,
    after the checkpoint, appends to it. The restart puts it back as it
    was, so it ends with the restarted program's append only (before, the
    list of the program before the exec was gone with it: two appends).
    About 1 s."""
    job.run(sys.executable, "-c", WRITE_THEN_EXEC)
    job.checkpoint()
    (job.work / "go").touch()
    until(lambda: "after" in (job.work / "before.txt").read_text(), timeout=20)
    job.kill()
    job.restart()
    rc, out, err = job.finish()
    assert rc == 0, f"rc={rc}\n{out}\n{err}"
    assert (job.work / "before.txt").read_text() == "start\nafter\n"


# once "go" exists, makes made.txt (O_CREAT|O_EXCL) and made.log ("a")
MADE_AFTER = """
import os, time
print("READY", flush=True)
while not os.path.exists("go"): time.sleep(0.02)
fd = os.open("made.txt", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
os.write(fd, b"made\\n"); os.close(fd)
open("made.log", "a").write("line\\n")
while not os.path.exists("stop"): time.sleep(0.02)
"""


def test_files_made_after_the_checkpoint(job):
    """Files the program first made after the checkpoint are gone at the
    restart: its O_CREAT|O_EXCL open succeeds again and its log holds its
    line once (before, the open failed with EEXIST). Files made after the
    checkpoint by anyone else ("go", other.txt) stay. About 1 s."""
    job.run(sys.executable, "-c", MADE_AFTER)
    job.checkpoint()
    (job.work / "other.txt").write_text("not the program's\n")
    (job.work / "go").touch()
    until(lambda: (job.work / "made.log").exists(), timeout=20)
    job.kill()
    job.restart()
    rc, out, err = job.finish()
    assert rc == 0, f"rc={rc}\n{out}\n{err}"
    assert (job.work / "made.txt").read_text() == "made\n"
    assert (job.work / "made.log").read_text() == "line\n"
    assert (job.work / "other.txt").read_text() == "not the program's\n"


# a forked child writes tmp.txt and keeps it open; once "go" exists it
# ends it and renames it to target.txt, over the one the parent wrote
RENAMED_AFTER = """
import os, time
open("target.txt", "w").write("old\\n")
pid = os.fork()
if pid == 0:
    f = open("tmp.txt", "w"); f.write("new\\n"); f.flush()
    print("READY", flush=True)
    while not os.path.exists("go"): time.sleep(0.02)
    f.write("end\\n"); f.close(); os.rename("tmp.txt", "target.txt")
    os._exit(0)
os.waitpid(pid, 0)
while not os.path.exists("stop"): time.sleep(0.02)
"""


def test_a_file_open_at_the_checkpoint_renamed_after_it(job):
    """A child has tmp.txt open for writing at the checkpoint; after it,
    it closes it and renames it over target.txt, which its parent wrote.
    The restart puts the file back under its name and target.txt as it
    was, so the restarted child ends the same way (before, the restart
    refused: tmp.txt was missing). About 1 s."""
    job.run(sys.executable, "-c", RENAMED_AFTER)
    job.checkpoint()
    (job.work / "go").touch()
    until(lambda: not (job.work / "tmp.txt").exists(), timeout=20)
    job.kill()
    job.restart()
    rc, out, err = job.finish()
    assert rc == 0, f"rc={rc}\n{out}\n{err}"
    assert (job.work / "target.txt").read_text() == "new\nend\n"
    assert not (job.work / "tmp.txt").exists()


def test_locks_on_descriptions_shared_with_a_child(job):
    """locks.c with a child holding its three descriptions: the locks
    come back though each description is made once for the whole tree."""
    cycles(job, "locks", "fork")


def test_a_child_that_ends_as_it_is_restarted(job):
    """exitsoon.c: a child ends as soon as it runs again after a restart
    (its nanosleep returns EINTR), while its agent says RESTARTED; the
    parent sees it end with its status and forks another, three cycles.
    (A child that wins that race is no failure of the restart: tree.c.)"""
    out, _ = cycles(job, "exitsoon")
    assert int(out.split("ended")[1].split()[0]) >= 1, out


def test_restart_stages_logged(job):
    job.run(program("heap"))
    job.checkpoint()
    job.kill()
    job.restart(env={"STASIS_LOG": "debug"})
    rc, out, err = job.finish()
    assert rc == 0 and "PASS" in out, err
    stages = [l.split("stage ")[1].split()[0] for l in err.splitlines() if "debug: stage " in l]
    assert stages == ["start", "self", "header", "map", "fill", "protect", "mm", "process",
                      "threads", "return"], err

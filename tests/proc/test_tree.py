"""Process trees as people run them (docs/transparent.md, "Process trees"):
a bash pipeline of programs nobody here wrote, checkpointed while its data
flows, killed with everything it started and restarted, twice; the
compressed output must be the bytes an uninterrupted run writes.

The pipeline's first stage writes half of its numbers, then waits for a
file "go" (a bash loop forking `sleep`) before it writes the rest: the
second checkpoint comes while sort holds the first half and bash forks.
About 5 s. And GNU make -j2 building a small C project (make starts its
jobs with posix_spawn and holds its jobserver pipe, close-on-exec),
checkpointed while its last job waits, with the rest of the build (a
compile and the link) after the restarts: the program it links must be the
one an uninterrupted build links. About 4 s. And Python's
multiprocessing.Pool (python3 as the PATH finds it, a pool of two forked
workers, pipes and a lock in /dev/shm), its results the same. About 5 s."""
import json
import subprocess
import time

from proc_harness import descendants, job, program  # noqa: F401 (job is a fixture)

PIPELINE = ("{ seq 1 2000000; while [ ! -e go ]; do sleep 0.05; done; seq 2000001 4000000; } "
            "| sort -n | gzip -1 > out.gz")


def processes(job):
    """Names of the job's processes (and stasis's own)."""
    names = []
    for pid in descendants(job.proc.pid):
        try:
            names.append(open(f"/proc/{pid}/comm").read().strip())
        except OSError:
            pass
    return names


def until(cond, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError("timed out")


def killed_and_restarted_twice(job):
    """After the first checkpoint: kill, restart, checkpoint again (the job
    waits for "go"), kill, restart, let it finish; its (out, err)."""
    job.kill()
    job.restart()
    assert job.checkpoint() == "ckpt-000002"
    job.kill()
    job.restart()
    (job.work / "go").touch()
    out, err = job.communicate(120)
    assert job.proc.returncode == 0, err
    return out, err


def test_a_bash_pipeline_killed_and_restarted_twice(job):
    (job.work / "go").touch()
    plain = subprocess.run(["bash", "-c", PIPELINE], cwd=job.work, env=job.env, timeout=300)
    assert plain.returncode == 0
    expected = (job.work / "out.gz").read_bytes()
    (job.work / "go").unlink()
    (job.work / "out.gz").unlink()

    job._start(["run", "--dir", job.ck, "--", "bash", "-c", PIPELINE])
    until(lambda: {"sort", "gzip"} <= set(processes(job)))
    assert job.checkpoint() == "ckpt-000001"     # seq writing, sort reading: data in the pipe
    out, err = killed_and_restarted_twice(job)
    assert (job.work / "out.gz").read_bytes() == expected


# main.o waits for a file "go": the checkpoints come while make waits
MAKEFILE = """OBJS = f1.o f2.o f3.o f4.o f5.o f6.o main.o
prog: $(OBJS)
\t$(CC) -o $@ $(OBJS)
main.o: main.c
\twhile [ ! -e go ]; do sleep 0.05; done; $(CC) -O2 -c $< -o $@
%.o: %.c
\tsleep 0.3; $(CC) -O2 -c $< -o $@
"""


def test_make_j2_killed_and_restarted_twice(job):
    for i in range(1, 7):
        (job.work / f"f{i}.c").write_text(f"int f{i}(void) {{ return {i}; }}\n")
    (job.work / "main.c").write_text("int main(void) { return 0; }\n")
    (job.work / "Makefile").write_text(MAKEFILE)
    (job.work / "go").touch()
    plain = subprocess.run(["make", "-j2"], cwd=job.work, env=job.env, capture_output=True, timeout=300)
    assert plain.returncode == 0, plain.stderr
    expected = (job.work / "prog").read_bytes()
    for f in job.work.glob("*.o"):
        f.unlink()
    (job.work / "prog").unlink()
    (job.work / "go").unlink()

    job._start(["run", "--dir", job.ck, "--", "make", "-j2"])
    # not while a compiler runs: one that finished between the checkpoint and
    # the kill would have deleted its temporary files, which its restarted
    # self then misses (the files are not part of a checkpoint)
    until(lambda: all((job.work / f"f{i}.o").exists() for i in range(1, 7)))
    assert job.checkpoint() == "ckpt-000001"     # make waits for its last job
    out, err = killed_and_restarted_twice(job)
    assert (job.work / "prog").read_bytes() == expected


POOL = """import hashlib, multiprocessing, os, time
def work(i):
    time.sleep(0.02)
    return hashlib.sha256(str(i).encode()).hexdigest()[:8]
if __name__ == "__main__":
    out = []
    with multiprocessing.Pool(2) as pool:
        for r in pool.imap(work, range(200)):
            out.append(r)
            if len(out) == 60:
                while not os.path.exists("go"):
                    time.sleep(0.05)
    print(len(out), hashlib.sha256("".join(out).encode()).hexdigest())
"""


def test_multiprocessing_pool_killed_and_restarted_twice(job):
    (job.work / "pool.py").write_text(POOL)
    (job.work / "go").touch()
    plain = subprocess.run(["python3", "pool.py"], cwd=job.work, env=job.env, capture_output=True,
                           text=True, timeout=300)
    assert plain.returncode == 0, plain.stderr
    (job.work / "go").unlink()

    job._start(["run", "--dir", job.ck, "--", "python3", "pool.py"])
    until(lambda: sum(n.startswith("python") for n in processes(job)) >= 3)  # the workers
    assert job.checkpoint() == "ckpt-000001"
    out, err = killed_and_restarted_twice(job)
    assert out == plain.stdout


def test_a_child_without_an_agent_is_refused(job):
    """A statically linked child (LD_PRELOAD cannot load the agent into it)
    would be missing after a restart: the checkpoint fails in one line
    naming it, and both run on to the end."""
    job.run("/bin/bash", "-c", f"{program('static')} & wait")
    (shell,) = [int(p) for p in open(f"/proc/{job.proc.pid}/task/{job.proc.pid}/children").read().split()]
    (child,) = [int(p) for p in open(f"/proc/{shell}/task/{shell}/children").read().split()]
    r = job.stasis("checkpoint", "--dir", job.ck, check=False)
    assert r.returncode == 1 and r.stderr.splitlines() == [
        f"stasis: checkpoint: checkpoint failed: cannot checkpoint: process {shell} has a child "
        f"process {child} (static) that is not under Stasis (a statically linked program, or "
        f"started without the agent in its environment)"], r.stderr
    rc, out, err = job.finish()
    assert rc == 0 and out.strip().endswith("PASS"), err


LOOP = 'echo READY; while [ ! -e stop ]; do sh -c "echo \\$\\$"; sleep 0.05; done'


def test_children_forked_after_a_restart_take_pids_above_the_checkpoints(job):
    """The processes of a tree restore at once, so one that runs again may
    fork while another still waits for its threads: the new PID namespace
    hands out pids above every pid and tid of the checkpoint, never one of
    those (a child forked at once took pid 2, 3, ..., and a restarted job's
    own ids are that low). A shell forks a child that prints its pid every
    50 ms; the first three new ones after the restart are above every id in
    the images (stasis inspect --decode); a child the checkpoint caught
    prints its own, restored pid. About 2 s."""
    job.run("/bin/sh", "-c", LOOP)
    name = job.checkpoint()
    ids = []
    for image in job.ck.glob(f"*/{name}/process*.img"):
        d = json.loads(job.stasis("inspect", "--decode", image).stdout)
        ids += [d["process"]["header"]["pid"]] + [t["tid"] for t in d["process"]["threads"]]
    job.kill()
    job.restart()
    pids = []   # a child caught by the checkpoint runs again and prints its own pid
    while len([p for p in pids if p not in ids]) < 3:
        line = job.read_line(30)
        assert line, f"the restarted loop printed nothing more: {pids}"
        if line.strip().isdigit():
            pids.append(int(line))
    assert min(p for p in pids if p not in ids) > max(ids), (pids, sorted(ids))
    (job.work / "stop").touch()
    job.communicate(60)
    assert job.proc.returncode == 0

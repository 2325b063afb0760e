"""Programs that exec (docs/transparent.md, "exec"): the agent survives the
exec, and the checkpoint is of the program the job became. Each job goes
through three checkpoint / SIGKILL / restart cycles: the PATH's python3 (on
the test machine a pyenv shim: a bash script that forks helpers, execs
another bash script, which execs the interpreter), a shim of the same shape
made here (for machines without pyenv), `env X=1 nice -n 1 prog`, a bash
script that runs a few commands and execs the program, and a program
holding an inherited pipe through an exec."""
import os
import shutil
import subprocess

import pytest

from proc_harness import job, program  # noqa: F401 (job is a fixture)
from test_external import FD, start

CYCLES = 3
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "exec_steps.py")

SHIM = """#!/usr/bin/env bash
set -e
program="${0##*/}"
root="$(cd "$(dirname "$0")/.." && pwd)"
exec "$root/libexec/runner" exec "$program" "$@"
"""
RUNNER = """#!/usr/bin/env bash
set -e
[ "$1" = exec ] && shift
name="$1"
shift
real="$(PATH=/usr/bin:/bin command -v "$name")"
version="$(cat "${0%/*}/version")"
[ -n "$version" ]
exec "$real" "$@"
"""


NO_AGENT = ("stasis: checkpoint: checkpoint failed: the program has no Stasis agent (it ended, "
            "or was not started under `stasis run`)")


def fifo_refused(job, name):
    return (f"stasis: checkpoint: checkpoint failed: cannot checkpoint: process {job.program_pid()} "
            f"({name}): fd 7 is a pipe or FIFO shared with another process")


def refused_then_runs_on(job, line, timeout=120):
    """A checkpoint fails with exactly that one line; the program runs on to
    its PASS."""
    r = job.stasis("checkpoint", "--dir", job.ck, check=False, timeout=timeout)
    assert r.returncode == 1 and r.stderr.splitlines() == [line], r.stderr
    rc, out, err = job.finish()
    assert rc == 0 and out.strip().endswith("PASS"), err


def cycles(job):
    names = []
    for _ in range(CYCLES):
        names.append(job.checkpoint())
        job.kill()
        job.restart()
    assert names == [f"ckpt-{i:06d}" for i in range(1, CYCLES + 1)]
    rc, out, err = job.finish()
    assert rc == 0 and out.strip().endswith("PASS") and "FAIL" not in out, f"rc={rc}\n{out}\n{err}"
    return out


def same_as_uninterrupted(job, *cmd):
    (job.work / "stop").touch()
    plain = subprocess.run(cmd, cwd=job.work, env=job.env, capture_output=True, text=True,
                           timeout=300)
    assert plain.returncode == 0, plain.stderr
    (job.work / "stop").unlink()
    job.run(*cmd)
    assert cycles(job) == plain.stdout.replace("READY\n", "")


def test_python3_on_the_path(job):
    """Whatever python3 is first on the PATH: here the pyenv shim."""
    assert shutil.which("python3", path=job.env["PATH"])
    same_as_uninterrupted(job, "python3", SCRIPT)


def test_a_shim_that_forks_helpers_and_execs(job, tmp_path):
    for d in ("shims", "libexec"):
        (tmp_path / d).mkdir()
    shim, runner = tmp_path / "shims" / "python3", tmp_path / "libexec" / "runner"
    shim.write_text(SHIM)
    runner.write_text(RUNNER)
    (tmp_path / "libexec" / "version").write_text("system\n")
    shim.chmod(0o755)
    runner.chmod(0o755)
    same_as_uninterrupted(job, str(shim), SCRIPT)


def test_env_and_nice_exec_chain(job):
    job.run("env", "X=1", "nice", "-n", "1", program("execd"), str(os.nice(0) + 1))
    cycles(job)


def test_a_bash_script_that_runs_commands_then_execs(job, tmp_path):
    script = tmp_path / "start.sh"
    script.write_text(f"""#!/bin/bash
set -e
dir="$(dirname "$0")"
ls "$dir" > /dev/null
words=$(echo a b c | wc -w)
[ "$words" = 3 ]
export X=1
exec nice -n 1 {program("execd")} {os.nice(0) + 1}
""")
    script.chmod(0o755)
    job.run(str(script))
    cycles(job)


def test_an_inherited_pipe_stays_external_through_an_exec(job):
    """The launch descriptors pass to the next program's agent: fd 251,
    inherited by the shell, is external in the program it execs."""
    first = start(job, "pipe", argv=["/bin/bash", "-c", f'true "$(true)"; exec {program("external")} {FD}'])
    assert os.read(first.mine, 6) == b"start\n"
    for _ in range(CYCLES):
        job.checkpoint()
        job.kill()
        last = start(job, "pipe", restart=True)
    assert first.output() == b""
    rc, out, err = job.finish()
    assert rc == 0 and out.split()[-3:] == ["FD", "pipe", "PASS"], f"{out}\n{err}"
    assert last.output() == b"end\n"


def test_without_the_agent_in_its_environment_the_exec_ends_checkpoints(job):
    """A program that execs another without LD_PRELOAD: the channel closes
    at the exec, and a checkpoint says at once that there is no agent."""
    job.run("env", "-u", "LD_PRELOAD", program("heap"))
    refused_then_runs_on(job, NO_AGENT)


def test_a_fifo_the_shell_opens_before_the_exec_was_not_inherited_at_launch(job, tmp_path):
    """Inherited at launch means open when the job's first program started:
    a FIFO the shell opens before it execs the program is the program's own,
    refused like any pipe to another process."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    job.run("/bin/bash", "-c", f"exec 7>{fifo}; exec {program('heap')}")
    refused_then_runs_on(job, fifo_refused(job, "heap"))
    os.close(reader)


def test_checkpoints_during_execs(job):
    """Checkpoints asked for while the program execs itself every 2 ms: a
    request that meets an exec waits in the channel for the next program's
    agent, so every one is established and none hangs. Restarts of images
    taken so (a restored program may exec at once) are checkpointed again,
    the last restarts, and the program execs on."""
    job.run(program("reexec"))
    taken = [job.checkpoint() for _ in range(20)]
    for _ in range(6):          # a restored program execs at once, too
        job.kill()
        job.restart()
        taken.append(job.checkpoint())
    assert taken == [f"ckpt-{i:06d}" for i in range(1, 27)]
    job.kill()
    job.restart()
    rc, out, err = job.finish()
    assert rc == 0 and out.split()[-1] == "PASS", f"{out}\n{err}"
    assert int(out.split()[-2]) > 0, out


def test_an_exec_of_a_static_program_ends_checkpoints_at_once(job):
    """LD_PRELOAD has no effect on a statically linked program: the channel
    does not go through that exec (else a checkpoint request would wait
    for the coordinator's 120 s limit), the program runs on."""
    job.run("/bin/bash", "-c", f"true; exec {program('static')}")
    refused_then_runs_on(job, NO_AGENT, timeout=20)


def test_time_runs_the_program_as_a_child(job):
    """GNU time forks the program and waits for it: a process tree, both
    checkpointed and restarted with their pids and parent link (time gets
    the program's status when it ends)."""
    job.run("/usr/bin/time", "-q", program("heap"))
    (timer,) = [int(p) for p in open(f"/proc/{job.proc.pid}/task/{job.proc.pid}/children").read().split()]
    (child,) = [int(p) for p in open(f"/proc/{timer}/task/{timer}/children").read().split()]
    assert open(f"/proc/{child}/comm").read().strip() == "heap"
    cycles(job)


def test_a_thread_that_execs_while_others_run(job):
    """Not the main thread: the kernel ends every other thread at the exec,
    the agent's among them, and the agent goes on in the new program."""
    job.run(program("threadexec"), program("threads"))
    cycles(job)


@pytest.mark.parametrize("function", ["execl", "execlp", "execle", "execv", "execvp", "execvpe",
                                      "execve", "fexecve"])
def test_each_exec_function(job, function):
    """Every exec function the agent wraps lets the channel through (the
    ones that search $PATH find heap by its name)."""
    heap = program("heap")
    searched = function in ("execlp", "execvp", "execvpe")
    env = {"PATH": f"{os.path.dirname(heap)}:{job.env['PATH']}"} if searched else None
    job.run(program("execvia"), function, "heap" if searched else heap, env=env)
    cycles(job)

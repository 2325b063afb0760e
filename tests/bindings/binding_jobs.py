"""Helpers for the binding tests (a plain module, not a conftest, so that it
cannot clash with tests/mpi/conftest.py): run the counter programs (counter.f90 on
the Fortran module, counter.py on the Python package) as real jobs, kill
them, restart them, and read what they wrote.

STASIS_BUILD (default build/) is the build tree whose libraries are used.
An MPI job is two ranks on two simulated nodes: MPMD launch gives rank 0
STASIS_NODE=nodeA and rank 1 nodeB, each with its own node-local directory;
the global directory, the job name and an empty configuration are shared,
and no other STASIS_* variable leaks in from the caller."""
import os
import pathlib
import re
import signal
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("STASIS_BUILD", str(ROOT / "build")))
API_DIR = BUILD / "src" / "api"
PYTHON = "/usr/bin/python3"
NODES = ["nodeA", "nodeB"]      # one rank each, in rank order
TIMEOUT = 60                    # seconds for one launch

# Never acceptable, even from a run killed on purpose.
CRASH_MARKERS = ("AddressSanitizer", "runtime error:", "Segmentation fault", "core dumped",
                 "Traceback", "ERROR STOP")


def require_library(name):
    """The path of STASIS_BUILD's lib<name>.so, or skip."""
    lib = API_DIR / f"lib{name}.so"
    if not lib.exists():
        pytest.skip(f"{lib} not built (STASIS_BUILD={BUILD})")
    if b"libasan.so" in lib.read_bytes():
        pytest.skip(f"{lib} is a sanitized build: an uninstrumented launcher or python "
                    f"cannot load it")
    return lib


class Result:
    def __init__(self, cmd, rc, out, err):
        self.cmd, self.rc, self.out, self.err = cmd, rc, out, err

    def __repr__(self):
        return f"$ {' '.join(self.cmd)}\nrc={self.rc}\nstdout:\n{self.out}\nstderr:\n{self.err}"

    @property
    def restarted_at(self):
        found = re.findall(r"^counter: restarted at step (\d+)$", self.out, re.M)
        assert len(found) <= 1, f"more than one restart line: {self}"
        return int(found[0]) if found else None

    @property
    def done(self):
        m = re.search(r"^counter: done (step=\d+ sum=\S+)$", self.out, re.M)
        return m.group(1) if m else None


class Job:
    """One job (its own directories under root): every run of the same Job
    is the same Stasis job, so a later run restarts. program: the command
    that runs one rank, before the counter's arguments."""

    def __init__(self, root, program, mpi, extra_env=None, job="counter"):
        self.root = root
        self.root.mkdir(parents=True)
        self.program = [str(p) for p in program]
        self.mpi = mpi
        self.ranks = len(NODES) if mpi else 1
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("STASIS_")}
        self.env.update({
            "STASIS_CONFIG": "/dev/null",
            "STASIS_GLOBAL_DIR": str(root / "global"),
            "STASIS_JOB": job,
            "HOME": str(root),
            "OMPI_ALLOW_RUN_AS_ROOT": "1",
            "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
            "OMPI_MCA_rmaps_base_oversubscribe": "1",
        })
        self.env.update(extra_env or {})
        if not mpi:
            self.env.update(self.node_env(NODES[0]))

    def node_env(self, node):
        return {"STASIS_NODE": node, "STASIS_LOCAL_DIR": str(self.root / "local" / node)}

    def command(self, args):
        args = [str(a) for a in args]
        if not self.mpi:
            return [*self.program, *args]
        cmd = ["mpirun.openmpi", "--oversubscribe"]
        for i, node in enumerate(NODES):
            if i:
                cmd.append(":")
            cmd += ["-np", "1"]
            for k, v in self.node_env(node).items():
                cmd += ["-x", f"{k}={v}"]
            cmd += [*self.program, *args]
        return cmd

    def run(self, *args):
        cmd = self.command(args)
        proc = subprocess.Popen(cmd, cwd=self.root, env=self.env, text=True, errors="replace",
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        try:
            out, err = proc.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)     # the launcher and its ranks
            out, err = proc.communicate()
            pytest.fail(f"timed out after {TIMEOUT} s:\n{Result(cmd, None, out, err)}")
        r = Result(cmd, proc.returncode, out, err)
        for marker in CRASH_MARKERS:
            assert marker not in r.err + r.out, f"crash marker {marker!r}: {r}"
        return r

    def ok(self, *args):
        r = self.run(*args)
        assert r.rc == 0 and r.done is not None, r
        return r

    def killed(self, *args):
        """A run that one of its ranks must end with SIGKILL."""
        r = self.run(*args)
        if self.mpi:
            assert r.rc != 0 and "signal 9" in r.err + r.out, f"not ended by the kill: {r}"
        else:
            assert r.rc == -signal.SIGKILL, f"not ended by the kill: {r}"
        assert r.done is None, r
        return r

    def outputs(self, name):
        """Every rank's final state as it wrote it (name.<rank>)."""
        return [(self.root / f"{name}.{rank}").read_bytes() for rank in range(self.ranks)]


def check_kill_and_restart(make_job, args, kill_rank, kill_iteration, every):
    """Run `args` uninterrupted (the reference), then killed at
    kill_iteration on kill_rank and restarted with the same command line:
    the restart must resume from the last checkpoint before the kill and end
    with every rank's state identical, byte for byte, to the reference."""
    ref = make_job("ref")
    first = ref.ok(*args, -1, 0, "ref")
    assert first.restarted_at is None, f"a fresh job restarted: {first}"
    reference = ref.outputs("ref")

    job = make_job("crash")
    again_args = [*args, kill_rank, kill_iteration, "out"]
    job.killed(*again_args)
    assert not (job.root / "out.0").exists()
    again = job.ok(*again_args)
    last_checkpoint = kill_iteration // every * every
    assert again.restarted_at == last_checkpoint, \
        f"restarted at {again.restarted_at}, not at the checkpoint of step {last_checkpoint}: {again}"
    assert job.outputs("out") == reference, f"restarted state differs from the reference: {again}"
    assert again.done == first.done, f"{first}\n{again}"

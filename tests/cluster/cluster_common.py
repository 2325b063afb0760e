"""The simulated cluster of scripts/cluster.sh for the tests (docs/cluster.md):
`cluster` is a fixture over it, brought up once per test module and torn down
after the module's last test, whether it passed or not (and at exit)."""
import atexit
import fcntl
import os
import pathlib
import shlex
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "cluster.sh"
BASE = pathlib.Path(os.environ.get("STS_CLUSTER", "/var/tmp/stasis-cluster"))
NODES = 4      # a test module may ask for more: CLUSTER_NODES = 7 in it
# One simulated cluster at a time on a machine: whoever brings it up (a test
# module, bench/cluster, a person) holds this lock until it is down again.
LOCK = pathlib.Path(os.environ.get("STS_CLUSTER_LOCK", "/var/tmp/stasis-cluster.lock"))


def hold_lock():
    """Block until no one else uses the simulated cluster: the open lock file
    (closing it releases the lock)."""
    f = open(LOCK, "w")
    fcntl.flock(f, fcntl.LOCK_EX)
    return f


def sh(*args, check=True, timeout=120, **kw):
    """scripts/cluster.sh ARGS...: the CompletedProcess (text)."""
    r = subprocess.run([str(SCRIPT), *map(str, args)], capture_output=True, text=True,
                       timeout=timeout, **kw)
    if check:
        assert r.returncode == 0, f"cluster.sh {args}: rc={r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


class Cluster:
    base = BASE

    def __init__(self, n=NODES):
        self.nodes = [f"n{i}" for i in range(1, n + 1)]

    def exec(self, node, cmd, check=True, timeout=120):
        """cmd (a shell command line) on node, like ssh: the CompletedProcess."""
        return sh("exec", node, cmd, check=check, timeout=timeout)

    def local(self, node):
        """node's node-local directory, as the host sees it."""
        return BASE / "nodes" / node / "local"

    @property
    def glob(self):
        """the directory every node shares (the parallel file system)."""
        return BASE / "global"


def down():
    subprocess.run([str(SCRIPT), "down"], capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def cluster(request):
    if os.geteuid() != 0:
        pytest.skip("the simulated cluster needs root")
    n = getattr(request.module, "CLUSTER_NODES", NODES)
    lock = hold_lock()
    atexit.register(down)
    before = set(BASE.glob("global/job-*"))
    try:
        # whoever holds the lock owns the cluster: one still up was left by
        # a holder killed before its down, with its jobs and files
        down()
        sh("up", n, timeout=180)
        yield Cluster(n)
    finally:
        down()
        # the module's job directories (checkpoints of 36 MiB and more: 680
        # of them had filled 24 GiB of a developer's disk); kept on request
        if not os.environ.get("STASIS_KEEP_JOBS"):
            for d in set(BASE.glob("global/job-*")) - before:
                shutil.rmtree(d, ignore_errors=True)
        # once down, no second down at exit: by then the lock is released
        # and another process may have brought its own cluster up
        atexit.unregister(down)
        lock.close()


STASIS = os.environ.get("STASIS_BIN", str(ROOT / "build" / "src" / "cli" / "stasis"))
BUILD = pathlib.Path(os.environ.get("STASIS_BUILD", str(ROOT / "build")))
MPICC = {"openmpi": "mpicc.openmpi", "mpich": "mpicc.mpich"}
ROOT_OK = "export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; "


def build_in_global(names, sub="progs"):
    """tests/split/<name>.c built with both MPIs into the global directory,
    where every node sees them: {(name, abi): path}."""
    d = BASE / "global" / sub
    d.mkdir(parents=True, exist_ok=True)
    out = {}
    for abi, cc in MPICC.items():
        for name in names:
            exe = d / f"{name}.{abi}"
            subprocess.run([cc, "-O1", "-I", str(ROOT / "include"), "-o", str(exe),
                            str(ROOT / "tests" / "split" / f"{name}.c")], check=True,
                           capture_output=True)
            out[(name, abi)] = str(exe)
    return out


def launcher(lower, hosts, n):
    """The launcher's words for n ranks on hosts ("n1:2,n2:2" for Open MPI,
    "n1,n2" for MPICH)."""
    if lower == "openmpi":
        return f"mpirun.openmpi --host {hosts} -np {n}"
    return f"mpiexec.mpich -hosts {hosts} -n {n}"


def node_procs(cluster, node, pattern):
    """"<pid> <args>" of the processes running on node whose command line
    matches pattern (pgrep -f), one a line. The simulated nodes share the
    host's PID namespace, so pgrep alone sees every node's processes; a
    process's UTS namespace says which node it runs on."""
    pattern = f"[{pattern[0]}]{pattern[1:]}"   # pgrep's own shell does not match
    return cluster.exec(node, f"u=$(readlink /proc/self/ns/uts); for p in $(pgrep -f '{pattern}'); "
                        f"do [ \"$(readlink /proc/$p/ns/uts)\" = \"$u\" ] && "
                        f"ps -o pid=,args= -p $p; done; true").stdout.strip()


# How long a job has to end once its last line came: a job that ends
# does so within 1-2 s (the ranks' MPI_Finalize, the launcher, stasis run);
# one that hangs in MPICH's MPI_Finalize (about every other MPICH run
# across nodes) never does, and waited 20 s each time
FINALIZE_GRACE = 8


class ClusterJob:
    """`stasis run` of an MPI launcher on head, its ranks on the compute
    nodes, and what a test does to it: checkpoint, kill (SIGKILL of every
    process of the job on every node), restart. Every step has a timeout;
    kill() at the end of a test leaves nothing running."""

    def __init__(self, cluster, tmp_path):
        import uuid
        self.c = cluster
        self.dir = BASE / "global" / f"job-{uuid.uuid4().hex[:10]}"
        self.dir.mkdir(parents=True)
        self.ck = self.dir / "ck"
        # p2p.c's and hello.c's last argument: once it exists, their ranks
        # stop sleeping (tests/split/p2p.c)
        self.no_sleep = self.dir / "no-sleep"
        self.proc = None
        self.seen = []
        self.env = {}   # STASIS_* settings of every stasis command of the job

    def _envs(self):
        """self.env as the shell's words (each value quoted: a space or a
        ';' in it stays in it)"""
        return "".join(f"{k}={shlex.quote(str(v))} " for k, v in self.env.items())

    def _start(self, words, alloc=None):
        """words of stasis on head; inside `salloc ALLOC` (an allocation of
        its own, named after the job) when alloc is given"""
        wrap = f"salloc -J {self.dir.name} {alloc} " if alloc else ""
        cmd = f"cd {self.dir}; {ROOT_OK}{'export ' + self._envs() + '; ' if self.env else ''}" \
              f"exec {wrap}{STASIS} {words}"
        self.seen = []
        self.proc = subprocess.Popen([str(SCRIPT), "exec", "head", cmd], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, start_new_session=True)

    def start(self, launcher_words, prog, *args, alloc=None, opts=""):
        """prog, linked into the job's directory so that every process of
        the job, on every node, names it (kill); opts: more options of run"""
        link = self.dir / pathlib.Path(prog).name
        if not link.exists():
            link.symlink_to(prog)
        self._start(f"run --dir {self.ck} {opts} -- {launcher_words} {link} "
                    f"{' '.join(map(str, args))}", alloc)

    def events_over(self):
        """The test's events are over: a job given no_sleep runs to its end
        without its sleeps, restarted or not (its output is the same)."""
        self.no_sleep.touch()

    def restart(self, launcher_words=None, alloc=None):
        self._start(f"restart --dir {self.ck}" +
                    (f" --launcher '{launcher_words}'" if launcher_words else ""), alloc)

    def stasis(self, *args, check=True, timeout=120):
        r = self.c.exec("head", f"{ROOT_OK}{self._envs()}{STASIS} " + " ".join(map(str, args)),
                        check=False, timeout=timeout)
        if check:
            assert r.returncode == 0, f"stasis {args}: {r.stdout}\n{r.stderr}"
        return r

    def checkpoint(self):
        r = self.stasis("checkpoint", "--dir", self.ck)
        name = r.stdout.strip()
        assert name.startswith("ckpt-"), r.stdout + r.stderr
        return name

    def lines_until(self, pattern, timeout=90):
        """Read the job's output until a line matches pattern; return it.
        A reader thread takes the lines: select() on a text stream misses
        lines already in its buffer (a job that says PASS and then hangs in
        MPI_Finalize would never be seen to have said it)."""
        import queue
        import re
        if getattr(self, "_q_proc", None) is not self.proc:
            import threading
            self._q_proc, self._q = self.proc, queue.Queue()

            def read(f, q):
                for line in f:
                    q.put(line)
                q.put(None)
            threading.Thread(target=read, args=(self.proc.stdout, self._q), daemon=True).start()
        import time
        end = time.time() + timeout
        while time.time() < end:
            try:
                line = self._q.get(timeout=0.2)
            except queue.Empty:
                continue
            if line is None:
                break
            self.seen.append(line)
            if re.fullmatch(pattern, line.strip()):
                return line.strip()
        out, err = self.kill()
        raise AssertionError(f"no line like {pattern!r}: {self.seen[-5:]} {out} {err}")

    def kill(self):
        """SIGKILL every process of the job, on every node; (out, err) so far."""
        import signal
        subprocess.run(["pkill", "-9", "-f", str(self.dir)], capture_output=True)
        out = err = ""
        if self.proc:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                if getattr(self, "_q_proc", None) is self.proc:
                    self.proc.wait(timeout=10)   # stdout is the reader thread's
                    err = self.proc.stderr.read()
                else:
                    out, err = self.proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            self.proc = None
        subprocess.run(["pkill", "-9", "-f", str(self.dir)], capture_output=True)
        self.c.exec("head", f"scancel -n {self.dir.name}", check=False)
        return out, err

    def finish(self, timeout=180, done=None):
        """(rc, out, err) once the job ends. With done (a pattern): once a
        line like it came, the job gets FINALIZE_GRACE s more, then it is
        killed and rc is None: MPICH over UCX/TCP sometimes hangs in
        MPI_Finalize across nodes, natively too (docs/cluster.md)."""
        if done:
            self.lines_until(done, timeout=timeout)
            try:   # the reader thread has stdout: read the rest through it
                self.proc.wait(timeout=FINALIZE_GRACE)
            except subprocess.TimeoutExpired:
                pass
            rc = self.proc.returncode
            rest = []
            while True:
                try:
                    line = self._q.get(timeout=1 if rc is not None else 0.1)
                except Exception:
                    break
                if line is None:
                    break
                rest.append(line)
            if rc is None:
                _, err = self.kill()
            else:
                err = self.proc.stderr.read()
                self.proc = None
            return rc, "".join(self.seen + rest), err
        if getattr(self, "_q_proc", None) is self.proc:
            # a reader thread has stdout: the end of the job through it
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                out, err = self.kill()
                raise AssertionError(f"the job did not end within {timeout} s: {err[-2000:]}")
            rest = []
            while (line := self._q.get(timeout=10)) is not None:
                rest.append(line)
            rc, err = self.proc.returncode, self.proc.stderr.read()
            self.proc = None
            return rc, "".join(self.seen + rest), err
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            out, err = self.kill()
            raise AssertionError(f"the job did not end within {timeout} s: {out[-2000:]} "
                                 f"{err[-2000:]}")
        rc = self.proc.returncode
        self.proc = None
        return rc, "".join(self.seen) + out, err

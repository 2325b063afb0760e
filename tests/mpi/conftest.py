"""Fixtures for the MPI restart tests: run heatdis (STASIS_BUILD, default build/,
then examples/heatdis/heatdis.<variant>) as a real job and read what it left.

A job is four ranks on two simulated nodes: MPMD launch gives ranks 0-1
STASIS_NODE=nodeA and ranks 2-3 STASIS_NODE=nodeB, and each node its own
node-local directory (STASIS_LOCAL_DIR), so a rank cannot read the other
node's local files by accident and a test can lose a whole node by removing
its directory. The global directory, the job name and an empty configuration
are shared; no other STASIS_* variable leaks in from the caller."""
import os
import pathlib
import re
import signal
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("STASIS_BUILD", str(ROOT / "build")))
HEATDIS_DIR = BUILD / "examples" / "heatdis"
STASIS_BIN = BUILD / "src" / "cli" / "stasis"

NODES = [("nodeA", 2), ("nodeB", 2)]    # (STASIS_NODE, ranks), in rank order
RANKS = sum(n for _, n in NODES)
TIMEOUT = 60                            # seconds for one launch, MPICH's busy polling included

# Never acceptable, even from a run killed on purpose.
CRASH_MARKERS = ("AddressSanitizer", "runtime error:", "LeakSanitizer", "Segmentation fault",
                 "core dumped", "Traceback")
STATES = ("CURRENT", "COMPLETE", "FAILED", "PARTIAL")


class Result:
    def __init__(self, cmd, rc, out, err):
        self.cmd = cmd
        self.rc = rc
        self.out = out
        self.err = err

    def __repr__(self):
        return f"$ {' '.join(self.cmd)}\nrc={self.rc}\nstdout:\n{self.out}\nstderr:\n{self.err}"

    @property
    def restarted_at(self):
        """The iteration heatdis said it restarted at, or None for a fresh run."""
        found = re.findall(r"^heatdis: restarted at iteration (-?\d+)$", self.out, re.M)
        assert len(found) <= 1, f"more than one restart line: {self}"
        return int(found[0]) if found else None

    @property
    def done(self):
        """(iterations, residual text) from the final line, or None."""
        m = re.search(r"^heatdis: done iterations=(\d+) residual=(\S+)$", self.out, re.M)
        return (int(m.group(1)), m.group(2)) if m else None


def launch_command(variant, binary, args, node_env):
    """The command line for one job of `variant` (openmpi, mpich, serial);
    node_env(node) gives the variables that differ between nodes."""
    args = [str(a) for a in args]
    if variant == "serial":
        return [str(binary), *args]
    cmd = []
    for node, ranks in NODES:
        if cmd:
            cmd.append(":")
        env = node_env(node)
        if variant == "openmpi":
            cmd += ["-np", str(ranks)]
            for k, v in env.items():
                cmd += ["-x", f"{k}={v}"]
        else:
            cmd += ["-n", str(ranks)]
            for k, v in env.items():
                cmd += ["-env", k, v]
        cmd += [str(binary), *args]
    if variant == "openmpi":
        return ["mpirun.openmpi", "--oversubscribe", *cmd]
    return ["mpiexec.mpich", *cmd]


class Heatdis:
    """One job of one heatdis variant with its own directories under root:
    global/, local/<node>/ and the working directory (outputs land there).
    Every run of the same Heatdis is the same job: a later run restarts."""

    def __init__(self, root, variant, job="heatdis"):
        self.variant = variant
        self.binary = HEATDIS_DIR / f"heatdis.{variant}"
        if not self.binary.exists():
            pytest.skip(f"heatdis.{variant} not built: no {self.binary} "
                        f"(its MPI or stasis_api_{variant} missing, or STASIS_BUILD wrong)")
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.global_dir = root / "global"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("STASIS_")}
        self.env.update({
            "STASIS_CONFIG": "/dev/null",
            "STASIS_GLOBAL_DIR": str(self.global_dir),
            "STASIS_JOB": job,
            "HOME": str(root),
            "OMPI_ALLOW_RUN_AS_ROOT": "1",
            "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        })
        if variant == "serial":
            self.env.update(self.node_env(NODES[0][0]))
        else:
            # Under a sanitizer build, the MPI libraries' own leaks are not ours.
            asan = self.env.get("ASAN_OPTIONS")
            self.env["ASAN_OPTIONS"] = f"{asan}:detect_leaks=0" if asan else "detect_leaks=0"
        self.ranks = 1 if variant == "serial" else RANKS

    def local_dir(self, node):
        return self.root / "local" / node

    def node_env(self, node):
        return {"STASIS_NODE": node, "STASIS_LOCAL_DIR": str(self.local_dir(node))}

    def run(self, *args, timeout=TIMEOUT):
        cmd = launch_command(self.variant, self.binary, args, self.node_env)
        proc = subprocess.Popen(cmd, cwd=self.root, env=self.env, text=True, errors="replace",
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            # The launcher and its ranks share the session we gave them.
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            pytest.fail(f"timed out after {timeout} s:\n{Result(cmd, None, out, err)}")
        r = Result(cmd, proc.returncode, out, err)
        for marker in CRASH_MARKERS:
            assert marker not in r.err, f"crash marker {marker!r}: {r}"
        return r

    def ok(self, *args, **kw):
        r = self.run(*args, **kw)
        assert r.rc == 0, r
        assert r.done is not None, f"no 'done' line: {r}"
        return r

    def killed(self, *args, **kw):
        """A run that one of its ranks must end with SIGKILL."""
        r = self.run(*args, **kw)
        assert r.rc != 0, f"the killed run succeeded: {r}"
        if self.variant == "serial":
            assert r.rc == -signal.SIGKILL, r
        else:
            # Both launchers name the signal (MPICH's hydra on stdout).
            assert "signal 9" in r.err + r.out, f"failed, but not from the kill: {r}"
        assert r.done is None, r
        return r

    def checkpoints(self):
        """{(tier directory, job): [(checkpoint, state), ...]} for every store
        index under this job's directories, as `stasis ls` reports them."""
        found = {}
        for index in sorted(self.root.rglob("index")):
            store_root, job = index.parent.parent, index.parent.name
            proc = subprocess.run([str(STASIS_BIN), "ls", "--dir", str(store_root), job],
                                  env=self.env, text=True, capture_output=True, timeout=60)
            assert proc.returncode == 0, f"stasis ls {store_root} {job}: {proc.stderr}"
            rows = []
            for line in proc.stdout.splitlines():
                fields = line.split()
                if len(fields) >= 2 and fields[1] in STATES:
                    rows.append((fields[0], fields[1]))
            found[(str(store_root.relative_to(self.root)), job)] = rows
        return found


@pytest.fixture(scope="session")
def reference(tmp_path_factory):
    """reference(variant, args): (grid bytes, done line) of an uninterrupted
    heatdis run with args (no checkpoints), made once per session for each
    variant and args: the modules of tests/mpi compare their restarts with
    the same grids. The grid and the residual do not depend on checkpoints
    or their level."""
    made = {}

    def get(variant, args):
        key = (variant, tuple(map(str, args)))
        if key not in made:
            ref = Heatdis(tmp_path_factory.mktemp(f"ref-{variant}"), variant)
            first = ref.ok(*args, "--output", "ref.bin")
            assert first.restarted_at is None, f"a fresh job restarted: {first}"
            made[key] = ((ref.root / "ref.bin").read_bytes(), first.done)
        return made[key]
    return get


@pytest.fixture
def heatdis(tmp_path):
    """heatdis(variant, name): a Heatdis job in tmp_path/name."""
    def make(variant, name="job"):
        return Heatdis(tmp_path / name, variant)
    return make

"""The simulated cluster of scripts/cluster.sh for the tests (docs/cluster.md):
`cluster` is a fixture over it, brought up once per test module and torn down
after the module's last test, whether it passed or not (and at exit)."""
import atexit
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "cluster.sh"
BASE = pathlib.Path(os.environ.get("STS_CLUSTER", "/var/tmp/stasis-cluster"))
NODES = 4


def sh(*args, check=True, timeout=120, **kw):
    """scripts/cluster.sh ARGS...: the CompletedProcess (text)."""
    r = subprocess.run([str(SCRIPT), *map(str, args)], capture_output=True, text=True,
                       timeout=timeout, **kw)
    if check:
        assert r.returncode == 0, f"cluster.sh {args}: rc={r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


class Cluster:
    base = BASE
    nodes = [f"n{i}" for i in range(1, NODES + 1)]

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
def cluster():
    if os.geteuid() != 0:
        pytest.skip("the simulated cluster needs root")
    atexit.register(down)
    try:
        sh("up", NODES, timeout=180)
        yield Cluster()
    finally:
        down()

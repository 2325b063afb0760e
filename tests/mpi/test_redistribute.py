"""A distributed array checkpointed by N ranks at the GLOBAL level comes back
on M ranks, under each MPI library; a SINGLE checkpoint cannot, and restart
falls back to the older global one with a message saying why."""
import os
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("STASIS_BUILD", ROOT / "build"))
COUNT = "100003"

LAUNCH = {
    "openmpi": lambda n: ["mpirun.openmpi", "--oversubscribe", "-np", str(n)],
    "mpich": lambda n: ["mpiexec.mpich", "-n", str(n)],
}


def run(mpi, n, mode, tmp):
    prog = BUILD / "tests" / f"redistribute.{mpi}"
    if not prog.exists() or not shutil.which(LAUNCH[mpi](1)[0]):
        pytest.skip(f"{prog.name} or its launcher is not built/installed")
    env = {k: v for k, v in os.environ.items() if not k.startswith("STASIS_")}
    env.update(STASIS_CONFIG="/dev/null", STASIS_JOB="redistribute", STASIS_NODE="n0",
               STASIS_LOCAL_DIR=str(tmp / "local"), STASIS_GLOBAL_DIR=str(tmp / "global"),
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               # the MPI libraries leak on their own; ours is checked by the unit tests
               ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") + ":detect_leaks=0")
    return subprocess.run(LAUNCH[mpi](n) + [str(prog), mode, COUNT], env=env, text=True,
                          capture_output=True, timeout=120)


@pytest.mark.parametrize("mpi", ["openmpi", "mpich"])
def test_n_to_m(mpi, tmp_path):
    w = run(mpi, 3, "write", tmp_path)
    assert w.returncode == 0 and "redistribute: OK (3 ranks" in w.stdout, w
    for m in (2, 1, 4):
        r = run(mpi, m, "read", tmp_path)
        assert r.returncode == 0 and f"redistribute: OK ({m} ranks" in r.stdout, (m, r)


@pytest.mark.parametrize("mpi", ["openmpi", "mpich"])
def test_single_level_is_not_redistributed(mpi, tmp_path):
    assert run(mpi, 2, "write", tmp_path).returncode == 0
    assert run(mpi, 3, "local", tmp_path).returncode == 0      # newer, single level, 3 ranks
    r = run(mpi, 2, "read", tmp_path)
    assert r.returncode == 0 and "redistribute: OK (2 ranks" in r.stdout, r
    assert "only a checkpoint in the global tier can be redistributed" in r.stderr, r


@pytest.mark.parametrize("mpi", ["openmpi"])
def test_region_that_differs_between_ranks_is_refused(mpi, tmp_path):
    assert run(mpi, 3, "differ", tmp_path).returncode == 0
    r = run(mpi, 2, "read", tmp_path)
    assert r.returncode != 0 and "redistribute: FAIL" in r.stdout, r
    assert "id 0 differs between old ranks 0 and 1" in r.stderr, r


@pytest.mark.parametrize("mpi", ["openmpi"])
def test_missing_global_image_refuses(mpi, tmp_path):
    assert run(mpi, 3, "write", tmp_path).returncode == 0
    img = next((tmp_path / "global/redistribute").glob("ckpt-*/rank-00001.img"))
    img.unlink()
    r = run(mpi, 2, "read", tmp_path)
    assert r.returncode != 0 and "redistribute: FAIL" in r.stdout, r
    assert "rank-00001.img" in r.stderr or "No such file" in r.stderr, r


@pytest.mark.parametrize("mode, message", [
    ("readint", "id 1 has 8-byte elements in the checkpoint, 4-byte now"),
    ("readbyte", "id 0 holds 4 bytes in the checkpoint, 1 protected now"),
])
def test_other_element_or_region_size_is_refused(mode, message, tmp_path):
    assert run("openmpi", 3, "write", tmp_path).returncode == 0
    r = run("openmpi", 2, mode, tmp_path)
    assert r.returncode != 0 and "redistribute: FAIL" in r.stdout, r
    assert message in r.stderr, r


def test_bad_configuration_on_one_rank_fails_every_rank(tmp_path):
    """One rank's bad setting must fail stasis_init everywhere, not hang."""
    prog = BUILD / "tests" / "redistribute.openmpi"
    if not prog.exists():
        pytest.skip("redistribute.openmpi is not built")
    env = {k: v for k, v in os.environ.items() if not k.startswith("STASIS_")}
    env.update(STASIS_CONFIG="/dev/null", STASIS_JOB="badcfg", STASIS_NODE="n0",
               STASIS_LOCAL_DIR=str(tmp_path / "local"), STASIS_GLOBAL_DIR=str(tmp_path / "global"),
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") + ":detect_leaks=0")
    cmd = ["mpirun.openmpi", "--oversubscribe", "-np", "1", str(prog), "write", COUNT, ":",
           "-np", "1", "-x", "STASIS_LEVEL=bogus", str(prog), "write", COUNT]
    r = subprocess.run(cmd, env=env, text=True, capture_output=True, timeout=60)
    assert r.returncode != 0 and "redistribute: FAIL" in r.stdout, r
    assert "stasis_init: rank 1: env STASIS_LEVEL: bad value 'bogus'" in r.stderr, r


def test_ranks_with_different_levels_follow_rank_0(tmp_path):
    """A rank configured for another level must not leave the job hanging:
    every rank checkpoints at rank 0's level."""
    heatdis = BUILD / "examples" / "heatdis" / "heatdis.openmpi"
    if not heatdis.exists():
        pytest.skip("heatdis.openmpi is not built")
    env = {k: v for k, v in os.environ.items() if not k.startswith("STASIS_")}
    env.update(STASIS_CONFIG="/dev/null", STASIS_JOB="levels",
               STASIS_LOCAL_DIR=str(tmp_path / "local"), STASIS_GLOBAL_DIR=str(tmp_path / "global"),
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") + ":detect_leaks=0")
    args = [str(heatdis), "--rows-per-rank", "16", "--cols", "64", "--iterations", "40",
            "--checkpoint-every", "10", "--level", "auto"]
    cmd = ["mpirun.openmpi", "--oversubscribe", "-np", "2", "-x", "STASIS_NODE=a", "-x",
           "STASIS_LEVEL=single", *args, ":", "-np", "2", "-x", "STASIS_NODE=b", "-x",
           "STASIS_LEVEL=partner", *args]
    r = subprocess.run(cmd, env=env, text=True, capture_output=True, timeout=60)
    assert r.returncode == 0 and "heatdis: done iterations=40" in r.stdout, r
    info = sorted((tmp_path / "global/levels").glob("ckpt-*/checkpoint.json"))[-1].read_text()
    assert '"level": "single"' in info, info


def test_rs_two_of_four_nodes_lost_large_images(tmp_path):
    """RS 2+2 over four nodes with images of ~24 MiB per rank (several 8 MiB
    slices per segment, and two parity columns per member): two nodes'
    caches lost, every rank's data rebuilt bit for bit from the other two,
    without the global tier (it holds no image at this level)."""
    prog = BUILD / "tests" / "redistribute.openmpi"
    if not prog.exists() or not shutil.which("mpirun.openmpi"):
        pytest.skip(f"{prog.name} or mpirun.openmpi is not built/installed")
    count, nodes = "12000003", ["nodeA", "nodeB", "nodeC", "nodeD"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("STASIS_")}
    env.update(STASIS_CONFIG="/dev/null", STASIS_JOB="rsbig", STASIS_GLOBAL_DIR=str(tmp_path / "global"),
               STASIS_GROUP_SIZE="4", STASIS_RS_PARITY="2",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") + ":detect_leaks=0")

    def launch(mode):
        cmd = ["mpirun.openmpi", "--oversubscribe"]
        for i, node in enumerate(nodes):
            cmd += ([":"] if i else []) + ["-np", "1", "-x", f"STASIS_NODE={node}",
                                           "-x", f"STASIS_LOCAL_DIR={tmp_path / 'local' / node}",
                                           str(prog), mode, count]
        return subprocess.run(cmd, env=env, text=True, capture_output=True, timeout=300)

    w = launch("rs")
    assert w.returncode == 0 and "redistribute: OK (4 ranks" in w.stdout, w
    ckpt = tmp_path / "local" / "nodeA" / "nodeA" / "rsbig" / "ckpt-000001"
    assert (ckpt / "rs-00000.img").stat().st_size > 2 * 8 * 2**20, "images too small to slice"
    assert not list((tmp_path / "global" / "rsbig" / "ckpt-000001").glob("*.img"))
    for node in ("nodeB", "nodeD"):
        shutil.rmtree(tmp_path / "local" / node)
    r = launch("read")
    assert r.returncode == 0 and "redistribute: OK (4 ranks" in r.stdout, r

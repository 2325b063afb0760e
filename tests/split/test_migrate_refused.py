"""`stasis migrate` and `stasis predict` refused in one line on one host
(docs/coordinator.md, "Migration"; the migrations themselves are
tests/cluster/test_migrate.py): an MPI job without staging, one whose
launcher names no host list (no spare), an unknown node or rank, and a
single program. The job runs on after each refusal and ends as usual.
About 8 s. And a receiver whose remote shell's pipe closes ends.

Environment: STASIS_BIN, STASIS_BUILD."""
import socket
import subprocess
import time

import pytest

from split_common import BUILD, launcher, program_fixture
from test_recover import job  # noqa: F401 (a fixture: an MpiJob, killed at the end)

p2p = program_fixture("p2p")
# p2p.c's iterations take 0.3 s: the refusals come at the second, the job
# then runs on to its end
ITERS = 10


def refused(job, *args):
    r = job.stasis(*args, "--dir", job.ck, check=False)
    assert r.returncode == 1 and r.stdout == "", r.stdout + r.stderr
    return r.stderr


def test_migration_refusals_leave_the_job_running(p2p, job, tmp_path):
    host = socket.gethostname()
    job.start(*launcher("openmpi", 2), p2p["openmpi"], ITERS, 100)
    job.lines_until(r"rank 0 iteration 2")
    assert refused(job, "migrate", "--node", host) == \
        "stasis: migrate: migration moves the ranks' node-local images: run the job with " \
        "staging = on\n"
    rc, out, err = job.finish_job()
    assert rc == 0 and f"PASS ranks=2 iterations={ITERS}" in out, out + err

    job.env.update(STASIS_STAGING="on", STASIS_LOCAL_DIR=str(tmp_path / "local"))
    job.ck = tmp_path / "ck2"
    job.seen = []
    job.start(*launcher("openmpi", 2), p2p["openmpi"], ITERS, 100)
    job.lines_until(r"rank 0 iteration 2")
    assert refused(job, "migrate", "--node", "n9") == \
        f"stasis: migrate: node n9 runs no rank of the job (its ranks run on {host})\n"
    assert refused(job, "migrate", "--rank", "7") == \
        "stasis: migrate: rank 7 is not a rank of the job (0-1)\n"
    assert refused(job, "predict", "--node", host, "--within", "60s") == \
        f"stasis: predict: no spare node for {host}'s ranks: the launcher's command names no " \
        "host list (Open MPI's --host, Hydra's -hosts)\n"
    rc, out, err = job.finish_job()
    assert rc == 0 and f"PASS ranks=2 iterations={ITERS}" in out, out + err


def test_a_single_program_cannot_migrate(job):
    job._start(["run", "--dir", job.ck, "--", "sleep", "30"])
    err = ""
    for _ in range(50):
        err = refused(job, "migrate", "--node", "n1")
        if "no running job" not in err and "no answer" not in err:
            break
        time.sleep(0.1)
    assert err == "stasis: migrate: migration moves the ranks of an MPI job; this job is one " \
        "program\n", err


@pytest.mark.parametrize("source", [False, True])
def test_a_receiver_ends_once_the_pipe_to_its_remote_shell_closes(tmp_path, source):
    """a migration cancelled or ended by the coordinator closes the pipe
    to the receiver's remote shell: the receiver on the target ends, while
    it waits for its source or inside a stream, and leaves no partial
    image (it stayed, orphaned, holding `stasis run`'s stderr)"""
    secret = "s" * 32
    (tmp_path / "coord.secret").write_text(secret)
    image = tmp_path / "local" / "ckpt-000001" / "rank-00001.img"
    p = subprocess.Popen([str(BUILD / "src/split/stasis-node"), "--receive", str(tmp_path), "1"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        port = int(p.stdout.readline().split()[1])
        if source:
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(f"MIGRATE {secret}\nIMAGE - {image}\n".encode() + b"x" * 4096)
            while not image.with_suffix(".img.tmp").exists() and p.poll() is None:
                time.sleep(0.01)
        p.stdout.close()
        assert p.wait(timeout=20) == 1
        assert p.stderr.read() == "stasis-node: migration not received: cancelled: the pipe to " \
            "its remote shell closed\n"
        assert not image.parent.exists() or list(image.parent.iterdir()) == []
    finally:
        p.kill()
        p.wait()

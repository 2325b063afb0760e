"""Debian's python3 with numpy, an unmodified program nobody here wrote:
checkpointed mid-computation, killed, restarted three times; its output must
equal an uninterrupted run's."""
import pathlib
import subprocess

import pytest

from proc_harness import job  # noqa: F401 (a fixture)

PYTHON = "/usr/bin/python3"
SCRIPT = str(pathlib.Path(__file__).with_name("numpy_steps.py"))


def have_numpy():
    try:
        return subprocess.run([PYTHON, "-c", "import numpy"], capture_output=True).returncode == 0
    except OSError:
        return False


@pytest.mark.skipif(not have_numpy(), reason="Debian's python3-numpy is not installed")
def test_numpy_matches_an_uninterrupted_run(job):
    (job.work / "stop").touch()
    plain = subprocess.run([PYTHON, SCRIPT], cwd=job.work, capture_output=True, text=True,
                           timeout=300)
    assert plain.returncode == 0, plain.stderr
    (job.work / "stop").unlink()
    job.run(PYTHON, SCRIPT)
    for _ in range(3):
        job.checkpoint()
        job.kill()
        job.restart()
    rc, out, err = job.finish()
    assert rc == 0, err
    assert out.replace("READY\n", "") == plain.stdout.replace("READY\n", ""), (out, plain.stdout)

"""What the test directories share: Open MPI's files of each test in a
directory of that test, removed after it."""
import shutil
import sys
import tempfile

import pytest

# mpirun's session directory (its PMIx segments, 8 MB) and each rank's
# shared-memory segment (vader, 4 MB): both stay behind when a job is
# killed with SIGKILL, as most tests here do (tens of GB after a few days
# of test runs, /dev/shm being memory)
OMPI_DIRS = ("OMPI_MCA_orte_tmpdir_base", "OMPI_MCA_btl_vader_backing_directory")


@pytest.fixture(autouse=True)
def ompi_files(request, monkeypatch):
    """Every Open MPI job the test starts puts those files in a directory
    of the test in /dev/shm, removed after the test (its jobs have ended).
    The harnesses copy os.environ when a test makes a job, except
    split_common.ENV, made once: it is updated too. tests/cluster's jobs
    run inside the nodes with their own environment."""
    if "/tests/cluster/" in str(request.path):
        yield
        return
    d = tempfile.mkdtemp(prefix="stasis-test-ompi-", dir="/dev/shm")
    for key in OMPI_DIRS:
        monkeypatch.setenv(key, d)
    common = sys.modules.get("split_common")
    if common is not None:
        for key in OMPI_DIRS:
            monkeypatch.setitem(common.ENV, key, d)
    yield
    shutil.rmtree(d, ignore_errors=True)

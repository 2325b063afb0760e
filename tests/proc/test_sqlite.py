"""sqlite3, a program nobody here wrote, writing a database in one
exclusive transaction (a POSIX lock held on the database, its rollback
journal growing), checkpointed mid-transaction, killed and restarted,
twice (docs/descriptors.md, "File locks"). After each restart the lock is
held again (this test cannot take it), and at the end the database passes
integrity_check and holds what an uninterrupted run writes. About 10 s."""
import fcntl
import os
import shutil
import subprocess

import pytest

from proc_harness import job  # noqa: F401 (job is a fixture)
from test_tree import until

ROWS = 2000000
SQL = ("CREATE TABLE t(x INTEGER PRIMARY KEY, b BLOB); BEGIN EXCLUSIVE; "
       "INSERT INTO t WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x<%d) "
       "SELECT x, randomblob(64) FROM c; COMMIT; SELECT count(*), sum(length(b)) FROM t;" % ROWS)
SQLITE = shutil.which("sqlite3")
PENDING_BYTE = 0x40000000     # sqlite's lock bytes start here


def size(path):
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def locked(db):
    """Does another process hold sqlite's lock bytes of db?"""
    fd = os.open(db, os.O_RDWR)
    try:
        fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB, 512, PENDING_BYTE)
        fcntl.lockf(fd, fcntl.LOCK_UN, 512, PENDING_BYTE)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


@pytest.mark.skipif(SQLITE is None, reason="sqlite3 is not installed")
def test_sqlite_transaction_with_a_lock_held(job):
    plain = subprocess.run([SQLITE, "ref.db", SQL], cwd=job.work, env=job.env, timeout=300,
                           capture_output=True, text=True)
    assert plain.returncode == 0, plain.stderr
    db, journal = job.work / "db.sqlite", job.work / "db.sqlite-journal"

    job._start(["run", "--dir", job.ck, "--", SQLITE, "db.sqlite", SQL])
    until(lambda: size(journal) > 0 and size(db) > (8 << 20))   # inside the transaction
    assert job.checkpoint() == "ckpt-000001"
    job.kill()
    for name in ("ckpt-000002", None):
        job.restart()               # the database cut back to its size at the checkpoint
        grown = size(db)
        assert locked(db), "the restarted sqlite3 does not hold its lock"
        if name:
            until(lambda: size(db) > grown + (8 << 20))      # on, then again
            assert job.checkpoint() == name
            job.kill()
    out, err = job.communicate(300)
    assert job.proc.returncode == 0, err
    assert out == plain.stdout == f"{ROWS}|{ROWS * 64}\n"
    check = subprocess.run([SQLITE, str(db), "PRAGMA integrity_check; SELECT count(*), sum(x) FROM t;"],
                           capture_output=True, text=True, timeout=300)
    assert check.stdout == f"ok\n{ROWS}|{ROWS * (ROWS + 1) // 2}\n", check.stdout + check.stderr
    assert not journal.exists()

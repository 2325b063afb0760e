"""Lazy restore of single processes (docs/transparent.md, "Lazy restore"):
with `stasis restart --lazy` (or STASIS_RESTORE_LAZY=1) the program runs
before its large runs of memory are in, and `stasis restart` serves them
from the image as they are touched.
lazy.c checks its memory while it waits (so it touches pages before their
turn) and in a child it forks right after each restart."""
import hashlib

import pytest

from proc_harness import BIN, flip_bit, job, program, raw_page_chunks  # noqa: F401 (job is a fixture)

DONE = "lazy restore done"


def final_run(job, *extra, env):
    """Restart from the newest checkpoint, let the program check itself:
    its output, the sha256 of its data.bin and the restart's stderr."""
    for f in ("stop", "data.bin"):
        (job.work / f).unlink(missing_ok=True)
    job.restart(*extra, env=env)
    rc, out, err = job.finish()
    assert rc == 0 and out.strip().endswith("PASS") and "FAIL" not in out, f"rc={rc}\n{out}\n{err}"
    return out, hashlib.sha256((job.work / "data.bin").read_bytes()).hexdigest(), err


def test_lazy_restart_is_bit_identical_to_an_eager_one(job):
    """Two lazy cycles, each checkpointed at once after its restart (the
    checkpoint waits for the pages still missing), then the last checkpoint
    restarted lazily and eagerly: the same output, the same data.
    About 3 s."""
    info = {"STASIS_LOG": "info"}
    lazy = {**info, "STASIS_RESTORE_LAZY": "1"}
    job.run(program("lazy"))
    job.checkpoint()
    job.kill()
    for _ in range(2):
        job.restart(env=lazy)
        job.checkpoint()
        _, err = job.kill()
        assert DONE in err, err
    lazy_out, lazy_data, err = final_run(job, "--lazy", env=info)
    assert DONE in err, err
    eager_out, eager_data, err = final_run(job, env=info)
    assert DONE not in err, err
    assert lazy_out == eager_out and lazy_data == eager_data


def middle_chunk_of_largest_section(img):
    """(offset, length) of the payload of a raw chunk in the middle of the
    image's largest memory section (lazy.c's 40 MiB mapping)."""
    chunks = raw_page_chunks(img)
    names = [name for name, _, _ in chunks]
    largest = [(at, length) for name, at, length in chunks
               if name == max(names, key=names.count)]
    assert len(largest) > 2, chunks
    return largest[len(largest) // 2]


def test_a_damaged_chunk_read_lazily_ends_the_program_in_one_line(job):
    """A lazy restart finds a bad chunk only when it reads it, after the
    program ran: one line naming the process and the chunk, the program
    killed, never running on with pages missing. About 1 s."""
    job.run(program("lazy"))
    job.checkpoint()
    pid = job.program_pid()
    job.kill()
    img = next(job.ck.glob("*/ckpt-000001/process.img"))
    at, length = middle_chunk_of_largest_section(img)
    flip_bit(img, at + length // 2)
    r = job.stasis("restart", "--dir", job.ck, check=False, env={"STASIS_RESTORE_LAZY": "1"})
    lines = [l for l in r.stderr.splitlines() if "lazy restore" in l]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"stasis: restart: process {pid}: lazy restore: {img}: section 'mem."), lines
    assert "payload checksum mismatch" in lines[0], lines
    assert lines[0].endswith("; the restarted process cannot go on"), lines
    assert r.returncode != 0 and "PASS" not in r.stdout, (r.returncode, r.stdout)


def test_no_userfaultfd_is_one_line_and_an_eager_restart(job):
    """Where the restart may not serve pages (here: inside a user namespace
    of its own, UFFDIO_API with fork events needs CAP_SYS_PTRACE of the
    first one), one line says so and the process restarts eagerly. About
    1 s."""
    job.run(program("lazy"))
    job.checkpoint()
    pid = job.program_pid()
    job.kill()
    (job.work / "stop").touch()
    r = job.stasis("unshare", "--user", "--map-root-user", BIN, "restart", "--lazy", "--dir",
                   job.ck, raw=True, check=False)
    if r.stderr.startswith("unshare:"):
        pytest.skip(f"no user namespace here: {r.stderr.strip()}")
    assert r.returncode == 0 and r.stdout.strip().endswith("PASS"), (r.returncode, r.stdout,
                                                                     r.stderr)
    assert r.stderr.splitlines() == [
        f"stasis: restart: process {pid}: no lazy restore (UFFDIO_API: Operation not "
        "permitted); reading its memory first"], r.stderr

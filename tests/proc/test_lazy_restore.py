"""Lazy restore of single processes (docs/transparent.md, "Lazy restore"):
with STASIS_RESTORE_LAZY=1 `stasis restart` runs the program before its
large runs of memory are in and serves them from the image as they are
touched.
lazy.c checks its memory while it waits (so it touches pages before their
turn) and in a child it forks right after each restart."""
import hashlib

from proc_harness import job, program  # noqa: F401 (job is a fixture)

DONE = "lazy restore done"


def final_run(job, env):
    """Restart from the newest checkpoint, let the program check itself:
    its output, the sha256 of its data.bin and the restart's stderr."""
    for f in ("stop", "data.bin"):
        (job.work / f).unlink(missing_ok=True)
    job.restart(env=env)
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
    lazy_out, lazy_data, err = final_run(job, env=lazy)
    assert DONE in err, err
    eager_out, eager_data, err = final_run(job, env=info)
    assert DONE not in err, err
    assert lazy_out == eager_out and lazy_data == eager_data

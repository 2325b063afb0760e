"""Fault walk under MPI: one rank of a four-rank heatdis job is killed (or
made to fail) at the n-th pass through a fault point while checkpointing.
Only that rank has STASIS_FAULT set: the job is launched MPMD, one segment
per rank. The killed job dies; the same command without the fault must
resume from the checkpoint the reasoning below names - the one before the
checkpoint being written, or that one when the kill came after it was
established (in particular, during its upgrade: the partner copy, the rs
parity or the global copy that the progress thread adds afterwards) - and
end with the grid, bit for bit, of a run never interrupted.

Passes are counted per process, over the whole run (src/common/fault.c),
and the counts per checkpoint below are those of the code paths in
src/api/checkpoint.c, src/api/rs.c and src/store. The jobs run with
cache_keep = 1, so every checkpoint waits for the previous one's upgrade:
a process passes the points of checkpoint k's write, then those of its
upgrade, then those of checkpoint k + 1, whichever thread passes them.
Every checkpoint passes each point the same number of times (zero-elided or
not, the images have the same sections and chunks), except for the index
appends of a node leader, which gains a PRUNED record from the second
checkpoint on."""
import os
import signal
import subprocess

import pytest

from conftest import CRASH_MARKERS, NODES, RANKS, STASIS_BIN, TIMEOUT, Heatdis, Result

JOB = "heatdis"
ROWS, COLS, ITERATIONS = 64, 256, 400
EVERY = 50                      # checkpoint k (ckpt-00000k) is taken after iteration 50 k
GRID = ["--rows-per-rank", ROWS, "--cols", COLS, "--iterations", ITERATIONS]
RANK_NODE = [node for node, ranks in NODES for _ in range(ranks)]


def launch_command(job, args, rank_env):
    """One MPMD segment per rank, so rank_env[rank] reaches that rank only."""
    cmd = []
    for rank, node in enumerate(RANK_NODE):
        env = {**job.node_env(node), **rank_env.get(rank, {})}
        if cmd:
            cmd.append(":")
        if job.variant == "openmpi":
            cmd += ["-np", "1"] + [x for k, v in env.items() for x in ("-x", f"{k}={v}")]
        else:
            cmd += ["-n", "1"] + [x for k, v in env.items() for x in ("-env", k, v)]
        cmd += [str(job.binary), *map(str, args)]
    if job.variant == "openmpi":
        return ["mpirun.openmpi", "--oversubscribe", *cmd]
    return ["mpiexec.mpich", *cmd]


def run_with(job, rank_env, *args):
    """Heatdis.run, with environment variables for single ranks."""
    cmd = launch_command(job, args, rank_env)
    proc = subprocess.Popen(cmd, cwd=job.root, env=job.env, text=True, errors="replace",
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"timed out after {TIMEOUT} s:\n{Result(cmd, None, out, err)}")
    r = Result(cmd, proc.returncode, out, err)
    for marker in CRASH_MARKERS:
        assert marker not in r.err, f"crash marker {marker!r}: {r}"
    return r


def ckpt(k):
    return f"ckpt-{k:06d}"


def established(job):
    """The global index's established checkpoints, oldest first."""
    return [c for c, s in job.checkpoints().get(("global", JOB), []) if s in ("COMPLETE", "CURRENT")]


# Passes per checkpoint of one rank, from the code, in order (w: while
# the checkpoint is written, before it is established; u: in its upgrade):
#   store.file.write, rank 1: w its image goes to the store in 5 writes
#     (header, the chunks of var-0 and var-1, manifest, footer); u at partner
#     1 more, the copy of rank 3's image it receives (one piece: < 8 MiB); at
#     rs 4 more, its parity image rs-00001.img; at global 1, the copy of its
#     image into the global tier.
#   store.file.rename, rank 3: w its image; u partner-00001.img or rs-00003.img.
#   image.chunk.write, rank 2: w var-0 and var-1 are one chunk each (< 4 MiB);
#     u at rs its parity image adds one.
PER_CKPT = {
    ("store.file.write", "partner"): 6,
    ("store.file.write", "rs"): 9,
    ("store.file.write", "global"): 6,
    ("store.file.rename", "partner"): 2,
    ("store.file.rename", "rs"): 2,
    ("image.chunk.write", "partner"): 2,
    ("image.chunk.write", "rs"): 3,
}
WRITTEN = {"store.file.write": 5, "store.file.rename": 1, "image.chunk.write": 2}
RANK_OF = {"store.file.write": 1, "store.file.rename": 3, "image.chunk.write": 2}
CACHE_KEEP = 1


def resume_after(point, n, level):
    """Iteration to resume at after a kill at pass n of a point passed
    PER_CKPT times by every checkpoint, the first WRITTEN of them before it
    is established: the checkpoint being written if the kill came in its
    upgrade, else the one before (None: there is none, a fresh start)."""
    per = PER_CKPT[(point, level)]
    k = -(-n // per)                    # the checkpoint being written
    in_upgrade = n - (k - 1) * per > WRITTEN[point]
    return (k if in_upgrade else k - 1) * EVERY or None


KILLS = []
for level in ("partner", "rs", "global"):
    # Before rank 2 writes its image of checkpoint n.
    KILLS += [("api.ckpt.write", 2, 1, level, None), ("api.ckpt.write", 2, 4, level, 150)]
    # Before rank 2's progress thread starts checkpoint 3's upgrade: 3 is
    # established, its copies missing (partner; rs and global are killed
    # inside their upgrade's loop below, the same restart)
    if level == "partner":
        KILLS += [("api.upgrade.begin", 2, 3, level, 150)]
    for point, rank in RANK_OF.items():
        if (point, level) not in PER_CKPT:
            continue
        per = PER_CKPT[(point, level)]
        # The first pass of checkpoint 2, and the last pass of checkpoint 3.
        KILLS += [(point, rank, n, level, resume_after(point, n, level)) for n in (per + 1, 3 * per)]
# The redundancy engine's points inside a level's loops, each passed once a
# checkpoint by a rank: before the last piece of the one partner copy it
# sends, and of the one it receives is filed, before the parity of the last
# slice of its rs encode, before the last piece of its image copied to the
# global tier. Pass 3 is in checkpoint 3's upgrade: 3 was established, its
# copy is left incomplete.
KILLS += [("redun.partner.send", 1, 3, "partner", 150), ("redun.partner.recv", 2, 3, "partner", 150),
          ("redun.rs.encode", 3, 3, "rs", 150), ("redun.global.copy", 1, 3, "global", 150)]
# store.index.append, rank 0, in order: w global BEGIN; in nodeA's cache
# BEGIN (unless rank 1 appended it first: the two race for it), rank-00000
# FILE, COMPLETE; global FILE (checkpoint.json), global COMPLETE =
# established; u nodeA's ANNEX partner-00002 or rs-00000, global LEVEL,
# from checkpoint 2 on nodeA's PRUNED for the checkpoint the cache drops.
# So 5 or 6 passes before a checkpoint is established, 7 or 8 in all for
# the first, 8 or 9 from the second, and the n below land where they do
# whichever way each race went:
#   8: in checkpoint 1's upgrade (its LEVEL), or the first pass of
#      checkpoint 2 -> 50;
#  15: in checkpoint 2's upgrade (7th or 8th of its 8 or 9) -> 100;
#  19: passes 2 to 4 of checkpoint 3, before it is established -> 100.
for level in ("partner", "rs"):
    KILLS += [("store.index.append", 0, 8, level, 50), ("store.index.append", 0, 15, level, 100),
              ("store.index.append", 0, 19, level, 100)]
# Only rank 0 passes these, once a checkpoint: just before establishing it,
# and just before recording the level its upgrade reached.
KILLS += [("api.ckpt.commit", 0, 3, level, 100) for level in ("partner", "rs", "global")]
KILLS += [("api.upgrade.level", 0, 3, level, 150) for level in ("partner", "rs", "global")]

MPICH_KILLS = {("store.index.append", 0, 19, "partner"), ("api.ckpt.commit", 0, 3, "rs"),
               ("store.file.write", 1, 27, "rs"), ("api.upgrade.begin", 2, 3, "partner")}

KILL_CASES = [pytest.param(mpi, point, rank, n, level, resume,
                           id=f"{mpi}-{level}-{point}:{n}:kill@rank{rank}")
              for mpi in ("openmpi", "mpich")
              for point, rank, n, level, resume in KILLS
              if mpi == "openmpi" or (point, rank, n, level) in MPICH_KILLS]


def check_resumed(job, args, resume, reference):
    grid, done = reference
    again = job.ok(*args, "--output", "out.bin")
    assert again.restarted_at == resume, \
        f"resumed at {again.restarted_at}, expected {resume}: {again}"
    assert (job.root / "out.bin").read_bytes() == grid, f"grid differs from the uninterrupted run: {again}"
    assert again.done == done, again


def job_of(heatdis, mpi):
    job = heatdis(mpi)
    job.env["STASIS_CACHE_KEEP"] = str(CACHE_KEEP)
    return job


def level_notes(job):
    """{checkpoint: the note `stasis ls` gives it} in the global index."""
    proc = subprocess.run([str(STASIS_BIN), "ls", "--dir", str(job.global_dir), JOB], env=job.env,
                          text=True, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return {line.split()[0]: line for line in proc.stdout.splitlines() if line.strip().startswith("ckpt-")}


@pytest.mark.parametrize("mpi, point, rank, n, level, resume", KILL_CASES)
def test_kill_at_fault_point(heatdis, reference, mpi, point, rank, n, level, resume):
    job = job_of(heatdis, mpi)
    args = [*GRID, "--checkpoint-every", EVERY, "--level", level]
    fault = {rank: {"STASIS_FAULT": f"{point}:{n}:kill"}}
    r = run_with(job, fault, *args, "--output", "out.bin")
    assert r.rc != 0 and r.done is None, f"the run with {fault} did not die: {r}"
    assert "signal 9" in r.err + r.out, f"failed, but not from the kill: {r}"
    assert not (job.root / "out.bin").exists(), r
    # What the kill left established is what the restart must use.
    newest = established(job)[-1:]
    assert newest == ([ckpt(resume // EVERY)] if resume else []), \
        f"established after the kill: {established(job)}, expected up to {resume}: {r}"
    check_resumed(job, args, resume, reference(mpi, GRID))


# `fail` on one rank at its pass in checkpoint 3 (iteration 150): the
# agreement makes ckpt-000003 FAILED on every rank and in every tier, every
# rank gets the same error, naming that rank, and heatdis ends on every rank
# (MPI_Finalize, exit status 1).
# A restart resumes from checkpoint 2.
FAILS = [
    ("partner", "store.file.write", 1, 2 * PER_CKPT[("store.file.write", "partner")] + 1),
    ("rs", "image.chunk.write", 2, 2 * PER_CKPT[("image.chunk.write", "rs")] + 1),
    ("global", "api.ckpt.write", 3, 3),
]
FAIL_CASES = [pytest.param(mpi, level, point, rank, n, id=f"{mpi}-{level}-{point}:{n}:fail@rank{rank}")
              for mpi in ("openmpi", "mpich") for level, point, rank, n in FAILS
              if mpi == "openmpi" or level == "rs"]


@pytest.mark.parametrize("mpi, level, point, rank, n", FAIL_CASES)
def test_fail_at_fault_point(heatdis, reference, mpi, level, point, rank, n):
    job = job_of(heatdis, mpi)
    args = [*GRID, "--checkpoint-every", EVERY, "--level", level]
    r = run_with(job, {rank: {"STASIS_FAULT": f"{point}:{n}:fail"}}, *args, "--output", "out.bin")
    assert r.rc != 0 and r.done is None, r
    assert "signal 9" not in r.err + r.out, f"killed, not failed: {r}"
    assert not (job.root / "out.bin").exists(), r
    # heatdis prints the stasis_checkpoint error (every rank the same) and
    # every rank ends with status 1, no abort: every line reaches the launcher.
    reports = [l for l in r.err.splitlines() if l.startswith("heatdis: rank ")]
    assert sorted(int(l.split()[2].rstrip(":")) for l in reports) == list(range(RANKS)), \
        f"not every rank reported the error: {r}"
    for line in reports:
        assert "stasis_checkpoint: " in line and point in line \
            and f"checkpoint {ckpt(3)} failed: rank {rank}: " in line, \
            f"the error does not name the checkpoint, rank and fault point: {r}"
    states = job.checkpoints()
    assert established(job) == [ckpt(1), ckpt(2)], f"{states}\n{r}"
    for where, rows in states.items():
        if where[0] == "global" or level != "global":
            assert (ckpt(3), "FAILED") in rows, f"{ckpt(3)} not FAILED in {where}: {states}\n{r}"
    check_resumed(job, args, 2 * EVERY, reference(mpi, GRID))


# `fail` in checkpoint 3's upgrade, on one rank: the checkpoint stays
# established at single, every rank's progress thread gives up on that
# upgrade alike, the run goes on to the end undisturbed, and the global
# index records the level reached and why (stasis ls).
UPGRADE_FAILS = [
    ("partner", "store.file.write", 1, 3 * PER_CKPT[("store.file.write", "partner")]),
    ("rs", "image.chunk.write", 2, 3 * PER_CKPT[("image.chunk.write", "rs")]),
    ("global", "store.file.write", 1, 3 * PER_CKPT[("store.file.write", "global")]),
    # inside the encode's loop: rank 2 goes on exchanging its cells
    ("rs", "redun.rs.encode", 2, 3),
]
UPGRADE_FAIL_CASES = [pytest.param(mpi, level, point, rank, n,
                                   id=f"{mpi}-{level}-{point}:{n}:fail-in-upgrade@rank{rank}")
                      for mpi in ("openmpi", "mpich") for level, point, rank, n in UPGRADE_FAILS
                      if mpi == "openmpi" or level == "partner"]


@pytest.mark.parametrize("mpi, level, point, rank, n", UPGRADE_FAIL_CASES)
def test_fail_in_upgrade(heatdis, reference, mpi, level, point, rank, n):
    grid, done = reference(mpi, GRID)
    job = job_of(heatdis, mpi)
    args = [*GRID, "--checkpoint-every", EVERY, "--level", level]
    r = run_with(job, {rank: {"STASIS_FAULT": f"{point}:{n}:fail"}}, *args, "--output", "out.bin")
    assert r.rc == 0 and r.done == done, f"a failed upgrade must not disturb the run: {r}"
    assert (job.root / "out.bin").read_bytes() == grid, r
    notes = level_notes(job)
    assert established(job) == [ckpt(k) for k in range(1, ITERATIONS // EVERY)], notes
    # the index keeps the first 159 bytes of the reason; the warning all of it
    assert f"level single: {level}: rank {rank}: " in notes[ckpt(3)], notes
    for k in (1, 2, 4):
        assert f"level {level}" in notes[ckpt(k)] and "single" not in notes[ckpt(k)], notes
    warning = [l for l in r.err.splitlines() if f"checkpoint {ckpt(3)} stays established at level single" in l]
    assert warning and f"{level}: rank {rank}: " in warning[0] and point in warning[0], r

"""Node-local staging (docs/split.md, "Node-local staging"), on one host:
with staging on, a checkpoint is established at level local once every
rank's image is in local_dir, then reaches level global when the node
agent copied them all; a restart reads the node-local copies, the global
one of a rank whose local copy is gone, and says which; the node agent
killed with its copies whole but not committed (fault point
node.copy.commit) leaves the checkpoint at level local and no global copy
selected, and the job restarts from the local copies; killed at its first
piece, which it copies while the ranks write, the checkpoint fails and the
previous one stays; a chunk damaged on its way (node.copy.corrupt:fail) is
caught by the CRC check and never committed; with cache_keep 1, a
checkpoint that fails after its images were written leaves the previous
one's images on the node, which the restart reads.

Environment: STASIS_BIN, STASIS_BUILD."""
import json
import re
import shutil
import time

import pytest

from split_common import launcher, program_fixture
from test_ckpt import MpiJob

# hello.c's iterations take 0.1 s: every event comes by iteration 5 (by
# rank 1's 10th in one test), and the restarted jobs go on from their
# checkpoint to their end
ITERS = 30
SLEEP_MS = 100

hello = program_fixture("hello")


def staged_job(tmp_path, **env):
    job = MpiJob(tmp_path)
    job.local = tmp_path / "local"
    job.env.update(STASIS_STAGING="on", STASIS_LOCAL_DIR=str(job.local), STASIS_LOG="info", **env)
    return job


def level(job, name):
    for line in job.stasis("ls", "--dir", job.ck).stdout.splitlines():
        if line.split()[:1] == [name]:
            m = re.search(r"level (\w+)", line)
            return m.group(1) if m else None
    return None


def restart_to_the_end(job):
    """`stasis restart` of the job, run to its PASS (without its sleeps:
    the test's events are over); the restart's stderr"""
    job.events_over()
    job.restart()
    job.lines_until(r"rank 0 iteration \d+")
    rc, out, err = job.finish_job()
    assert rc == 0 and f"PASS ranks=2 iterations={ITERS}" in out, out + err
    return err


def images(root, name):
    return sorted(p.name for p in root.glob(f"*/{name}/rank-*.img"))


# (Open MPI: the node agent's copy and the image's reading are the same
# above either MPI; test_recover.py's killed rank restarts from staged
# copies above MPICH too)
@pytest.mark.parametrize("lower", ["openmpi"])
def test_local_then_global_then_restart_from_local(hello, lower, tmp_path):
    job = staged_job(tmp_path)
    job.start(*launcher(lower, 2), hello[lower], ITERS, SLEEP_MS, "-", job.no_sleep)
    job.lines_until(r"rank 0 iteration 3")
    r = job.stasis("checkpoint", "--dir", job.ck, "--wait", "global")
    name = r.stdout.strip()
    assert name == "ckpt-000001", r.stdout + r.stderr
    assert level(job, name) == "global"
    assert images(job.local, name) == ["rank-00000.img", "rank-00001.img"]
    assert images(job.ck, name) == ["rank-00000.img", "rank-00001.img"]
    jobname = hello[lower].rsplit("/", 1)[1]
    [local] = job.local.glob(f"{jobname}.*")   # <job>.<stage id>
    for rank in (0, 1):   # the copy is the image, byte for byte
        assert (local / name / f"rank-0000{rank}.img").read_bytes() == \
            (job.ck / jobname / name / f"rank-0000{rank}.img").read_bytes()
    job.kill()
    (local / name / "rank-00001.img").unlink()
    err = restart_to_the_end(job)
    assert re.search(r"rank 0 reads its node-local copy \S+/local/hello\.\w+\.[0-9a-f]{16}/ckpt-000001/"
                     r"rank-00000\.img", err), err
    assert re.search(r"rank 1 reads the global copy \S+/ck/hello\.\w+/ckpt-000001/rank-00001\.img",
                     err), err
    # the node agents of both runs ended with them, leaving no socket or
    # lock behind; a log stays only when it warned of something (the first
    # run's agent may have seen its ranks killed before its coordinator)
    def left():
        return [p for p in job.local.glob("stasis-node.*/*")
                if not p.name.endswith(".log") or "warn:" not in p.read_text()]
    end = time.time() + 10
    while time.time() < end and left():
        time.sleep(0.1)
    assert not left(), left()


def test_killed_mid_copy_restarts_from_the_local_copies(hello, tmp_path):
    """The node agent dies before it commits its copies (right after
    `stasis checkpoint` returned): the checkpoint stays at level local,
    nothing of the global copy counts, and the restart reads the node-local
    copies. The ranks run on to their end, without checkpoints. A restart
    whose rank 1 finds its image nowhere fails in one line that names the
    rank once."""
    job = staged_job(tmp_path, STASIS_FAULT="node.copy.commit:kill")
    job.start(*launcher("openmpi", 2), hello["openmpi"], ITERS, SLEEP_MS, "-", job.no_sleep)
    job.lines_until(r"rank 0 iteration 3")
    name = job.checkpoint()
    rc, out, err = job.finish_job()   # the fault kills the node agent
    assert rc == 0 and f"PASS ranks=2 iterations={ITERS}" in out, out + err
    assert re.search(r"the node agent on \S+ \(pid \d+\) is gone", err), err
    assert level(job, name) == "local"
    assert images(job.ck, name) == []   # a .tmp at most: never committed
    job.env.pop("STASIS_FAULT")
    # a rank whose image is nowhere says so, with its rank once (it said
    # "rank 1: rank 1: no copy ...")
    [img] = job.local.glob(f"*/{name}/rank-00001.img")
    img.rename(img.with_suffix(".away"))
    job.restart()
    rc, out, err = job.finish_job()
    assert rc != 0 and re.search(rf"^stasis: lower half: rank 1: no copy of its image of {name}: "
                                 r"not in \S+'s local directory", err, re.M), err
    img.with_suffix(".away").rename(img)
    err = restart_to_the_end(job)
    assert err.count("reads its node-local copy") == 2, err


def test_wait_global_fails_in_one_line_when_the_job_ends_first(hello, tmp_path):
    job = staged_job(tmp_path, STASIS_FAULT="node.copy.commit:kill")
    job.start(*launcher("openmpi", 2), hello["openmpi"], ITERS, SLEEP_MS, "-", job.no_sleep)
    job.lines_until(r"rank 0 iteration 3")
    r = job.stasis("checkpoint", "--dir", job.ck, "--wait", "global", check=False)
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stderr.strip() == ("stasis: checkpoint: ckpt-000001 stays at level local: the job "
                                "ended before every rank's image was in the global tier"), r.stderr
    job.finish_job()


def test_a_new_job_of_the_same_name_never_meets_an_old_ones_images(hello, tmp_path):
    """Two jobs of one name with their own global directories and one
    node-local directory: each numbers its checkpoints from ckpt-000001,
    and the second's must not collide with the first's staged images
    (it did: 'ckpt-000001/rank-00000.img: already committed')."""
    local = tmp_path / "local"
    for run in ("first", "second"):
        (tmp_path / run).mkdir()
        job = staged_job(tmp_path / run)
        job.local = local
        job.env["STASIS_LOCAL_DIR"] = str(local)
        job.start(*launcher("openmpi", 2), hello["openmpi"], ITERS, SLEEP_MS, "-", job.no_sleep)
        job.lines_until(r"rank 0 iteration 2")
        assert job.checkpoint() == "ckpt-000001"
        job.kill()
    assert len(list(local.glob("hello.openmpi.*/ckpt-000001"))) == 2


def test_each_node_keeps_the_last_cache_keep_images_of_every_rank(hello, tmp_path):
    """cache_keep = 1: after two checkpoints the node-local directory holds
    the second's image of every rank and none of the first's."""
    job = staged_job(tmp_path, STASIS_CACHE_KEEP="1")
    job.start(*launcher("openmpi", 2), hello["openmpi"], ITERS, SLEEP_MS, "-", job.no_sleep)
    job.lines_until(r"rank 0 iteration 2")
    assert job.stasis("checkpoint", "--dir", job.ck, "--wait", "global").stdout.strip() == \
        "ckpt-000001"
    job.lines_until(r"rank 0 iteration 5")
    assert job.stasis("checkpoint", "--dir", job.ck, "--wait", "global").stdout.strip() == \
        "ckpt-000002"
    job.kill()
    kept = sorted(str(p.relative_to(job.local)).split("/", 1)[1]
                  for p in job.local.glob("*/ckpt-*/rank-*.img"))
    assert kept == ["ckpt-000002/rank-00000.img", "ckpt-000002/rank-00001.img"], kept


def test_cache_keep_1_keeps_the_images_until_the_next_checkpoint_stands(hello, tmp_path):
    """cache_keep = 1 and ckpt-000002 fails after every rank wrote its
    image (store.ckpt.commit:2:fail: the coordinator's seal): the nodes
    still hold ckpt-000001's images (a rank dropped its older image once
    its new one was written, before the checkpoint stood), the failed
    checkpoint's files go, and the restart reads every rank's node-local
    copy of ckpt-000001."""
    job = staged_job(tmp_path, STASIS_CACHE_KEEP="1", STASIS_FAULT="store.ckpt.commit:2:fail")
    try:
        job.start(*launcher("openmpi", 2), hello["openmpi"], ITERS, SLEEP_MS, "-", job.no_sleep)
        job.lines_until(r"rank 0 iteration 2")
        assert job.stasis("checkpoint", "--dir", job.ck, "--wait", "global").stdout.strip() == \
            "ckpt-000001"
        r = job.stasis("checkpoint", "--dir", job.ck, check=False)
        assert r.returncode == 1 and "store.ckpt.commit" in r.stderr, r.stdout + r.stderr
        assert images(job.local, "ckpt-000001") == ["rank-00000.img", "rank-00001.img"]
        end = time.time() + 60   # the node agent's verdict follows the client's answer
        while time.time() < end and list(job.local.glob("*/ckpt-000002")):
            time.sleep(0.1)
        assert not list(job.local.glob("*/ckpt-000002"))
    finally:
        job.kill()
    job.env.pop("STASIS_FAULT")
    err = restart_to_the_end(job)
    assert len(re.findall(r"rank \d reads its node-local copy \S+/ckpt-000001/rank-0000\d\.img",
                          err)) == 2, err


@pytest.mark.parametrize("compress", ["off", "zstd"])
def test_a_chunk_damaged_while_copied_is_never_committed(hello, compress, tmp_path):
    """node.copy.corrupt:fail flips a byte of the first piece the node agent
    copies (with stage_compress, of the first chunk it re-encodes): the
    chunk's CRC32C no longer matches, the copy is dropped (its .tmp
    removed), the checkpoint stays at level local, and the agent says why in
    its log; the next checkpoint reaches level global."""
    job = staged_job(tmp_path, STASIS_FAULT="node.copy.corrupt:fail",
                     STASIS_STAGE_COMPRESS=compress)
    try:
        job.start(*launcher("openmpi", 2), hello["openmpi"], ITERS, SLEEP_MS, "-", job.no_sleep)
        job.lines_until(r"rank 0 iteration 2")
        first = job.checkpoint()
        second = job.stasis("checkpoint", "--dir", job.ck, "--wait", "global").stdout.strip()
        logs = "".join(p.read_text() for p in job.local.glob("stasis-node.*/*.log"))
    finally:
        job.kill()
    assert (first, second) == ("ckpt-000001", "ckpt-000002")
    assert re.search(r"rank \d's image of ckpt-000001 stays at level local: \S+rank-0000\d\.img: "
                     r"section \d+, chunk \d+ \(payload at byte \d+\): CRC32C mismatch", logs), logs
    assert level(job, first) == "local" and level(job, second) == "global"
    assert len(images(job.ck, first)) == 1   # the other rank's copy, undamaged
    assert not list(job.ck.glob(f"*/{first}/*.tmp"))


def test_compressed_global_copy_restarts_alone(hello, tmp_path):
    """stage_compress = zstd: the node agent re-encodes every chunk of a
    rank's image that zstd shrinks on its way to the global tier. The copy
    is the same image (same id and sections) and smaller than the staged
    one (hello's 4 MiB heap is a counter); with every node-local copy gone,
    the restart reads the compressed global copies alone and the program
    ends as it would have."""
    job = staged_job(tmp_path, STASIS_STAGE_COMPRESS="zstd")
    job.start(*launcher("openmpi", 2), hello["openmpi"], ITERS, SLEEP_MS, "-", job.no_sleep)
    job.lines_until(r"rank 0 iteration 3")
    r = job.stasis("checkpoint", "--dir", job.ck, "--wait", "global")
    name = r.stdout.strip()
    assert level(job, name) == "global", r.stdout + r.stderr
    job.kill()
    jobname = hello["openmpi"].rsplit("/", 1)[1]
    [local] = job.local.glob(f"{jobname}.*")
    for rank in (0, 1):
        staged = local / name / f"rank-0000{rank}.img"
        copy = job.ck / jobname / name / f"rank-0000{rank}.img"
        assert copy.stat().st_size < staged.stat().st_size * 0.8, (copy.stat(), staged.stat())
        mine, theirs = (json.loads(job.stasis("inspect", "--json", str(p)).stdout)
                        for p in (copy, staged))
        assert mine["compression"] == "zstd:1" and mine["totals"]["zstd_chunks"] > 0, mine
        assert mine["image_id"] == theirs["image_id"]
        assert [(x["name"], x["size"]) for x in mine["sections"]] == \
            [(x["name"], x["size"]) for x in theirs["sections"]]
        job.stasis("verify", str(copy))
    shutil.rmtree(local)
    err = restart_to_the_end(job)
    assert err.count("reads the global copy") == 2, err


def test_an_earlier_global_checkpoint_outlives_a_later_copy_killed(hello, tmp_path):
    """ckpt-000001 reaches level global; the job is restarted and its next
    checkpoint's copy is killed (node.copy.commit:kill: the node agent dies
    before its first commit), so ckpt-000002 stays at level local with nothing of it in
    the global tier. With every node-local copy gone, a restart picks
    ckpt-000001 from the global tier, says so, and the program ends as it
    would have; nothing of ckpt-000002 is ever read."""
    job = staged_job(tmp_path)
    job.start(*launcher("openmpi", 2), hello["openmpi"], ITERS, SLEEP_MS, "-", job.no_sleep)
    job.lines_until(r"rank 0 iteration 2")
    assert job.stasis("checkpoint", "--dir", job.ck, "--wait", "global").stdout.strip() == \
        "ckpt-000001"
    job.kill()
    job.env["STASIS_FAULT"] = "node.copy.commit:kill"
    job.restart()
    job.lines_until(r"rank 0 iteration \d+")
    r = job.stasis("checkpoint", "--dir", job.ck, "--wait", "global", check=False)
    assert r.returncode == 1 and "ckpt-000002 stays at level local" in r.stderr, \
        r.stdout + r.stderr
    job.kill()
    job.env.pop("STASIS_FAULT")
    assert (level(job, "ckpt-000001"), level(job, "ckpt-000002")) == ("global", "local")
    assert images(job.ck, "ckpt-000002") == []
    for d in job.local.glob("hello.openmpi.*"):
        shutil.rmtree(d)
    err = restart_to_the_end(job)
    # the ranks find no copy of ckpt-000002 and stop; stasis restart then
    # says which checkpoint it falls back to, and the ranks read it
    assert "restart: ckpt-000002 is at level local and some of its ranks' nodes no longer " \
        "hold their copies: restarting from ckpt-000001 (level global)" in err, err
    assert len(re.findall(r"rank \d reads the global copy \S+/ckpt-000001/rank-0000\d\.img",
                          err)) == 2, err
    assert not re.search(r"reads (its node-local|the global) copy \S+ckpt-000002", err), err


def test_killed_while_the_ranks_write_fails_the_checkpoint(hello, tmp_path):
    """The node agent copies each image while its rank writes it; killed at
    its first piece (node.copy:kill), it is gone before the checkpoint is
    sealed: the checkpoint fails in one line and is FAILED in `stasis ls`,
    nothing of it reaches the global tier, and the ranks run on."""
    job = staged_job(tmp_path, STASIS_FAULT="node.copy:kill")
    # 64 MiB more a rank: hello's image alone (about 8 MiB) was written
    # before the agent's 2 ms nap ended in one run in three, its first
    # piece then copied after the seal, and the checkpoint established
    job.start(*launcher("openmpi", 2), hello["openmpi"], ITERS, SLEEP_MS, "-", job.no_sleep, 64)
    job.lines_until(r"rank 0 iteration 2")
    r = job.stasis("checkpoint", "--dir", job.ck, check=False)
    assert r.returncode == 1 and re.fullmatch(
        r"stasis: checkpoint: checkpoint failed: the node agent on \S+ \(pid \d+; ranks [01], "
        r"[01]\) ended during the checkpoint", r.stderr.strip()), r.stdout + r.stderr
    try:
        job.lines_until(r"rank 1 iteration 1\d")
        assert re.search(r"ckpt-000001 +FAILED", job.stasis("ls", "--dir", job.ck).stdout)
        assert images(job.ck, "ckpt-000001") == []
    finally:
        job.kill()

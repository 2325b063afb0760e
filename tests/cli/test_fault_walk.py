"""Fault walk: kill (or fail) the writer at every fault point of the commit
path, at every pass that point sees during one checkpoint. The previous
checkpoint must stay CURRENT, the broken one must never be selected, `ls` and
`verify` must say what happened, and the next checkpoint must succeed."""
import re

import pytest

from conftest import ROOT

ALL_POINTS = re.findall(r'^FAULT_POINT\(\w+,\s*"([a-z.]+)"',
                        (ROOT / "src/common/fault_points.h").read_text(), re.M)
# Points a `stasis save` passes through, and how many times in one save of the
# data set below with 64 KiB chunks (enough to reach later passes too).
COMMIT_PATH = {
    "image.chunk.write": 3,
    "image.finish": 1,
    "store.file.write": 3,
    "store.file.fsync": 1,
    "store.file.rename": 1,
    "store.dir.fsync": 1,
    "store.index.append": 3,   # BEGIN, FILE, COMPLETE records
    "store.index.torn": 3,
    "store.index.fsync": 3,
    "store.ckpt.commit": 1,
}
CASES = [(p, n) for p, count in COMMIT_PATH.items() for n in range(1, count + 1)]
ENV = {"STASIS_CHUNK_SIZE": "64K", "STASIS_THREADS": "2"}


def test_commit_path_points_exist():
    # every point named here is a real point; left out are prune, the
    # application library's own points (walked by tests/mpi), the split
    # process's and its node agents' (tests/split), the redundancy engine's
    # (tests/mpi, tests/cluster)
    assert set(COMMIT_PATH) <= set(ALL_POINTS)
    rest = set(ALL_POINTS) - set(COMMIT_PATH) - {"store.prune.remove"}
    assert all(p.startswith(("api.", "split.", "node.", "redun.")) for p in rest), rest


def ls_states(stasis):
    out = stasis.ok("ls", "--dir", "store", "demo").out
    return dict(re.findall(r"^\s+(ckpt-\d+)\s+(\w+)", out, re.M)), out


def good_save(stasis):
    return stasis.ok("save", "--dir", "store", "--job", "demo", "grid.bin", "notes.txt", env=ENV)


@pytest.mark.parametrize("point,n", CASES, ids=[f"{p}:{n}" for p, n in CASES])
@pytest.mark.parametrize("action", ["kill", "fail"])
def test_fault_walk(stasis, dataset, point, n, action):
    good_save(stasis)
    env = dict(ENV, STASIS_FAULT=f"{point}:{n}:{action}")
    r = stasis.run("save", "--dir", "store", "--job", "demo", "grid.bin", "notes.txt", env=env)
    if action == "kill":
        assert r.rc == -9, f"expected SIGKILL at {point}:{n}: {r}"
    else:
        assert r.rc == 1, r
        assert f"fault injected at {point}" in r.err, r

    states, out = ls_states(stasis)
    if (point, n, action) == ("store.index.fsync", 3, "kill"):
        # Killed after the COMPLETE record reached the file, before its fsync:
        # every file was already durable and the record is in the page cache,
        # so the checkpoint is established (only a power cut could lose the
        # record, and then it would be PARTIAL).
        assert states.get("ckpt-000002") == "CURRENT", out
        stasis.ok("verify", "store/demo/ckpt-000002")
        return
    # the previous checkpoint is still the one a restart picks
    assert states.get("ckpt-000001") == "CURRENT", out
    # the broken one is never CURRENT nor COMPLETE
    assert states.get("ckpt-000002") in (None, "PARTIAL", "FAILED"), out
    if action == "fail" and point not in ("store.index.append", "store.index.torn",
                                          "store.index.fsync"):
        assert states.get("ckpt-000002") == "FAILED", out

    # verify: the established checkpoint is intact; the broken one is refused
    stasis.ok("verify", "store/demo/ckpt-000001")
    if (stasis.tmp / "store/demo/ckpt-000002").exists():
        r = stasis.fails("verify", "store/demo/ckpt-000002", rc=1)
        assert "ckpt-000002" in r.err and "not established" in r.err, r
    job = stasis.run("verify", "store/demo")
    assert "ckpt-000001: OK" in job.out, job

    # and life goes on: the next checkpoint commits and becomes current
    good_save(stasis)
    states, out = ls_states(stasis)
    newest = max(states)
    assert states[newest] == "CURRENT" and newest > "ckpt-000002", out
    assert states["ckpt-000001"] == "COMPLETE", out
    stasis.ok("verify", f"store/demo/{newest}")

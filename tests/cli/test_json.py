"""`stasis ls --json` and `stasis status --json` (docs/cli.md): one JSON
document each, with exactly the documented keys and values, on a store
whose index is written here record by record (known times, levels,
reasons), and against a stand-in coordinator giving exact STATUS answers.
The text output stays what it was; bad input is still one line."""
import json
import re

import pytest

from fakecoord import FakeCoordinator


def _table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 & -(c & 1))
        t.append(c)
    return t


CRC_TABLE = _table()


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc = CRC_TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def record(op, ckpt, time, **kw):
    """One index line (docs/store.md, "Index format"), keys in their order."""
    obj = {"op": op, "ckpt": ckpt, "time": time}
    for k in ("name", "size", "crc", "image", "files", "bytes", "reason"):
        if k in kw:
            obj[k] = kw[k]
    js = json.dumps(obj, separators=(",", ":")).encode()
    return b"R %d %08x %s\n" % (len(js), crc32c(js), js)


T = 1795362600   # 2026-11-22T15:50:00Z


def make_store(root):
    """Job "sim": 1 COMPLETE at level partner (with why), 2 PRUNED, 3 FAILED,
    4 CURRENT at level global, 5 PARTIAL."""
    job = root / "sim"
    job.mkdir(parents=True)
    recs = [b"STASIS-INDEX 1\n"]

    def files(ckpt, t, contents):
        (job / ckpt).mkdir()
        for name, data in contents.items():
            (job / ckpt / name).write_bytes(data)
            recs.append(record("FILE", ckpt, t, name=name, size=len(data),
                               crc="%08x" % crc32c(data)))

    recs.append(record("BEGIN", "ckpt-000001", T))
    files("ckpt-000001", T + 1, {"rank-00000.img": b"a" * 1000, "rank-00001.img": b"b" * 1000})
    recs.append(record("COMPLETE", "ckpt-000001", T + 2, files=2, bytes=2000))
    recs.append(record("LEVEL", "ckpt-000001", T + 5, name="partner",
                       reason="rs: rank 3 lost its node"))
    recs.append(record("BEGIN", "ckpt-000002", T + 60))
    files("ckpt-000002", T + 61, {"rank-00000.img": b"c" * 10})
    recs.append(record("COMPLETE", "ckpt-000002", T + 62, files=1, bytes=10))
    recs.append(record("PRUNED", "ckpt-000002", T + 300, reason="removed by prune"))
    recs.append(record("BEGIN", "ckpt-000003", T + 120))
    recs.append(record("FAILED", "ckpt-000003", T + 121,
                       reason="rank 3: write failed: No space left on device"))
    recs.append(record("BEGIN", "ckpt-000004", T + 180))
    files("ckpt-000004", T + 181, {"rank-00000.img": b"d" * 300000})
    recs.append(record("COMPLETE", "ckpt-000004", T + 183, files=1, bytes=300000))
    recs.append(record("LEVEL", "ckpt-000004", T + 190, name="global"))
    recs.append(record("BEGIN", "ckpt-000005", T + 240))
    (job / "index").write_bytes(b"".join(recs))
    return job


def ckpt(name, state, files, nbytes, size, t, begin, end, level=None, level_reason=None,
         reason=None):
    return {"name": name, "state": state, "current": state == "CURRENT", "files": files,
            "bytes": nbytes, "size": size, "time": t[0], "epoch": t[1], "begin_epoch": begin,
            "end_epoch": end, "level": level, "level_reason": level_reason, "reason": reason}


SIM = [
    ckpt("ckpt-000001", "COMPLETE", 2, 2000, "2.0 KiB", ("2026-11-22T15:50:02Z", T + 2), T, T + 2,
         level="partner", level_reason="rs: rank 3 lost its node"),
    ckpt("ckpt-000003", "FAILED", 0, 0, "0 B", ("2026-11-22T15:52:01Z", T + 121), T + 120, T + 121,
         reason="rank 3: write failed: No space left on device"),
    ckpt("ckpt-000004", "CURRENT", 1, 300000, "293.0 KiB", ("2026-11-22T15:53:03Z", T + 183),
         T + 180, T + 183, level="global"),
    ckpt("ckpt-000005", "PARTIAL", 0, 0, "0 B", ("2026-11-22T15:54:00Z", T + 240), T + 240, None),
]

SIM_TEXT = """\
job sim (store/sim)
  CHECKPOINT   STATE      FILES        SIZE  TIME                 NOTE
  ckpt-000001  COMPLETE       2     2.0 KiB  2026-11-22 15:50:02  level partner: rs: rank 3 lost its node
  ckpt-000003  FAILED         0         0 B  2026-11-22 15:52:01  rank 3: write failed: No space left on device
  ckpt-000004  CURRENT        1   293.0 KiB  2026-11-22 15:53:03  level global
  ckpt-000005  PARTIAL        0         0 B  2026-11-22 15:54:00  never committed; not used for restart
"""


def test_ls_json_every_state(stasis):
    make_store(stasis.tmp / "store")
    r = stasis.ok("ls", "--dir", "store", "--json")
    assert r.err == ""
    assert json.loads(r.out) == {"root": "store", "jobs": [
        {"name": "sim", "dir": "store/sim", "damaged_records": 0, "checkpoints": SIM}]}
    # the documented key order, as printed
    doc = json.loads(r.out)
    assert list(doc) == ["root", "jobs"]
    assert list(doc["jobs"][0]) == ["name", "dir", "damaged_records", "checkpoints"]
    assert list(doc["jobs"][0]["checkpoints"][0]) == [
        "name", "state", "current", "files", "bytes", "size", "time", "epoch", "begin_epoch",
        "end_epoch", "level", "level_reason", "reason"]
    # by name, the same document with that job only; --json anywhere before it
    assert stasis.ok("ls", "--json", "--dir", "store", "sim").out == r.out


def test_ls_text_unchanged(stasis):
    make_store(stasis.tmp / "store")
    assert stasis.ok("ls", "--dir", "store").out == SIM_TEXT
    assert stasis.ok("ls", "--dir", "store", "sim").out == SIM_TEXT


def test_ls_json_several_jobs_and_none(stasis, dataset):
    (stasis.tmp / "empty").mkdir()
    r = stasis.ok("ls", "--json", "--dir", "empty")
    assert json.loads(r.out) == {"root": "empty", "jobs": []}
    make_store(stasis.tmp / "store")
    stasis.ok("save", "--dir", "store", "--job", "files", "notes.txt")
    doc = json.loads(stasis.ok("ls", "--json", "--dir", "store").out)
    assert [j["name"] for j in doc["jobs"]] == ["files", "sim"]
    (c,) = doc["jobs"][0]["checkpoints"]
    assert (c["name"], c["state"], c["current"], c["files"], c["level"], c["reason"]) == \
        ("ckpt-000001", "CURRENT", True, 1, None, None)
    img = stasis.tmp / "store/files/ckpt-000001/files.img"
    assert c["bytes"] == img.stat().st_size
    assert c["epoch"] == c["begin_epoch"] == c["end_epoch"]
    assert doc["jobs"][1]["checkpoints"] == SIM


def test_ls_json_damaged_record(stasis):
    job = make_store(stasis.tmp / "store")
    data = bytearray((job / "index").read_bytes())
    at = data.index(b'"op":"BEGIN","ckpt":"ckpt-000005"')
    data[at + 2] ^= 0x20
    (job / "index").write_bytes(bytes(data))
    r = stasis.run("ls", "--json", "--dir", "store")
    assert r.rc == 1
    doc = json.loads(r.out)
    assert doc["jobs"][0]["damaged_records"] == 1
    assert doc["jobs"][0]["checkpoints"] == SIM[:3]
    # the store's own warning, as for the text listing; stdout stays JSON
    assert re.fullmatch(r"stasis\[\d+\]: warn: store/sim/index: damaged record at byte \d+ "
                        r"skipped \(checksum mismatch\)\n", r.err), r.err


def test_ls_json_bad_input_one_line(stasis):
    r = stasis.fails("ls", "--json", "--dir", "missing", rc=2)
    assert r.out == "" and r.err == "stasis: ls: no checkpoint directory missing\n"
    make_store(stasis.tmp / "store")
    r = stasis.fails("ls", "--json", "--dir", "store", "nosuch", rc=1)
    assert r.out == "" and r.err == "stasis: ls: no job 'nosuch' in store\n"


@pytest.mark.parametrize("cmd", ["prune", "save"])
def test_json_only_where_documented(stasis, cmd):
    r = stasis.run(cmd, "--json", "--dir", "store")
    assert r.rc == 2 and r.err.startswith(f"stasis: {cmd}: unknown option '--json'\n"), r


# ---- status ----

MPI_REPLY = ("OK job=sim launcher=4242 ranks=3/4 checkpoints=2 last=ckpt-000004 "
             "ranks=0:100@n1,1:101@n1,3:205@n2.cluster nodes=n1:90,n2.cluster:91 "
             "lost=2:204@n2.cluster")
PROC_REPLY = "OK job=sim pid=77 agent=yes checkpoints=0 last=-"


def coordinator(stasis, reply):
    job = make_store(stasis.tmp / "store")
    return FakeCoordinator(job, lambda req: reply if req == "STATUS" else "ERR no")


def test_status_json_stopped(stasis):
    make_store(stasis.tmp / "store")
    r = stasis.ok("status", "--dir", "store", "--json")
    assert r.err == ""
    assert json.loads(r.out) == {"root": "store", "jobs": [
        {"name": "sim", "state": "stopped", "established": 2, "latest": "ckpt-000004",
         "latest_level": "global", "coordinator": None}]}
    assert stasis.ok("status", "--dir", "store").out == \
        "sim  stopped  established=2 latest=ckpt-000004 level=global\n"


def test_status_json_mpi_job(stasis):
    fake = coordinator(stasis, MPI_REPLY)
    try:
        r = stasis.ok("status", "--json", "--dir", "store")
        text = stasis.ok("status", "--dir", "store").out
    finally:
        fake.close()
    assert fake.requests == ["STATUS", "STATUS"]
    doc = json.loads(r.out)
    assert doc == {"root": "store", "jobs": [
        {"name": "sim", "state": "running", "established": 2, "latest": "ckpt-000004",
         "latest_level": "global", "coordinator": {
             "kind": "mpi", "pid": None, "agent": None, "launcher_pid": 4242,
             "ranks_registered": 3, "ranks_size": 4,
             "ranks": [{"rank": 0, "pid": 100, "host": "n1"},
                       {"rank": 1, "pid": 101, "host": "n1"},
                       {"rank": 3, "pid": 205, "host": "n2.cluster"}],
             "nodes": [{"host": "n1", "agent_pid": 90},
                       {"host": "n2.cluster", "agent_pid": 91}],
             "lost": [{"rank": 2, "pid": 204, "host": "n2.cluster"}],
             "checkpoints": 2, "last": "ckpt-000004", "standby": None,
             "standby_ready": None}}]}
    assert list(doc["jobs"][0]) == ["name", "state", "established", "latest", "latest_level",
                                  "coordinator"]
    assert list(doc["jobs"][0]["coordinator"]) == [
        "kind", "pid", "agent", "launcher_pid", "ranks_registered", "ranks_size", "ranks",
        "nodes", "lost", "checkpoints", "last", "standby", "standby_ready"]
    # the text line is the coordinator's answer, as before
    assert text == f"sim  running  {MPI_REPLY[3:]}  established=2 latest=ckpt-000004 level=global\n"


def test_status_json_process_and_no_ranks(stasis):
    fake = coordinator(stasis, PROC_REPLY)
    try:
        doc = json.loads(stasis.ok("status", "--json", "--dir", "store").out)
    finally:
        fake.close()
    assert doc["jobs"][0]["coordinator"] == {
        "kind": "process", "pid": 77, "agent": True, "launcher_pid": None,
        "ranks_registered": None, "ranks_size": None, "ranks": None, "nodes": None,
        "lost": None, "checkpoints": 0, "last": None, "standby": None, "standby_ready": None}
    # an MPI job none of whose ranks registered yet
    c = coordinator_json(stasis, "OK job=sim launcher=9 ranks=0/0 checkpoints=0 last=- "
                                 "ranks=- nodes=- lost=-")
    assert (c["kind"], c["launcher_pid"], c["ranks_registered"], c["ranks_size"], c["ranks"],
            c["nodes"], c["lost"]) == ("mpi", 9, 0, 0, [], [], [])
    # a stand-by (`stasis standby`) whose 4 ranks wait past MPI_Init
    c = coordinator_json(stasis, "OK job=sim launcher=9 ranks=0/0 checkpoints=0 last=- "
                                 "standby=waiting:4 ranks=- nodes=n1:90 lost=-")
    assert (c["standby"], c["standby_ready"], c["nodes"]) == (
        "waiting", 4, [{"host": "n1", "agent_pid": 90}])


def coordinator_again(stasis, reply):
    return FakeCoordinator(stasis.tmp / "store/sim", lambda req: reply)


def coordinator_json(stasis, reply):
    """`status --json`'s coordinator object for a coordinator answering reply"""
    fake = coordinator_again(stasis, reply)
    try:
        return json.loads(stasis.ok("status", "--json", "--dir", "store").out)["jobs"][0][
            "coordinator"]
    finally:
        fake.close()


def test_status_json_busy(stasis):
    """A coordinator in the middle of a checkpoint accepts nobody: busy
    (after the 5 s status waits for its greeting)."""
    fake = FakeCoordinator(make_store(stasis.tmp / "store"), None, greet=False)
    try:
        doc = json.loads(stasis.ok("status", "--json", "--dir", "store").out)
    finally:
        fake.close()
    assert doc["jobs"][0] == {"name": "sim", "state": "busy", "established": 2,
                              "latest": "ckpt-000004", "latest_level": "global",
                              "coordinator": None}


def test_status_json_bad_input_one_line(stasis):
    r = stasis.fails("status", "--json", "--dir", "missing", rc=1)
    assert r.out == "" and r.err == "stasis: status: no checkpoint directory missing\n"
    (stasis.tmp / "store").mkdir()
    r = stasis.fails("status", "--json", "--dir", "store", "extra", rc=2)
    assert r.err == ("stasis: status: unexpected operand 'extra' "
                     "(usage: stasis status [--dir D] [--json])\n")

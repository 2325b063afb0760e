"""`stasis inspect --decode` prints the records of a process image as JSON
and `--encode` turns that JSON back into each section's bytes (decode.c,
docs/cli.md): the round trip must give back every section as stored, as
CRIU's crit-recode checks. files.c holds the descriptors a user would
look for (a file at an offset, an unlinked file, a pipe with data) and a
second thread; sockets.c and pty.c the records inside descriptors'
sections. About 1 s."""
import json
import os
import subprocess

from proc_harness import BIN, job, program  # noqa: F401 (job is a fixture)


def test_decode_shows_the_process_and_encodes_back_every_section(job, tmp_path):
    job.run(program("files"))
    pid = job.program_pid()
    name = job.checkpoint()
    image = next(job.ck.glob(f"*/{name}/process.img"))

    d = json.loads(job.stasis("inspect", "--decode", image).stdout)
    proc = d["process"]
    assert proc["header"]["pid"] == pid
    assert proc["exe"] == os.path.realpath(program("files"))
    assert proc["cwd"] == str(job.work)
    assert len(proc["threads"]) == proc["header"]["nthreads"] == len(d["threads"])
    assert [t["tid"] for t in proc["threads"] if t["tid"] == pid] == [pid]
    assert any(r["kind"] == "file_private" and r["path"] == proc["exe"] for r in proc["regions"])
    fds = {f["path"].rsplit("/", 1)[-1]: f for f in d["fds"]}
    assert fds["read.txt"]["kind"] == "file" and fds["read.txt"]["offset"] == 4
    assert fds["unlinked.txt (deleted)"]["kind"] == "unlinked"
    assert sum(f["kind"] == "pipe_read" for f in d["fds"]) == 2

    assert bytes.fromhex(d["files"]["fd.%d" % fds["unlinked.txt (deleted)"]["fd"]]["data"]) \
        == b"secret data"
    round_trip(job, image, d, tmp_path)


def round_trip(job, image, d, tmp_path):
    """Every decoded section, encoded again, is the section as stored."""
    decoded = tmp_path / "decoded.json"
    decoded.write_text(json.dumps(d))
    for section in ["process", "fds", *d["threads"], *d["files"]]:
        stored = tmp_path / f"stored.{section}"
        job.stasis("extract", image, section, stored)
        encoded = subprocess.run([BIN, "inspect", "--encode", section, str(decoded)],
                                 capture_output=True, check=True).stdout
        assert encoded == stored.read_bytes(), section


def test_sockets_and_ptys_decode_and_encode_back(job, tmp_path):
    """sockets.c and pty.c: their descriptors' sections begin with a
    struct proc_socket or proc_pty; decoded, and every section back."""
    for name, kind in (("sockets", "socket"), ("pty", "pty")):
        job.run(program(name))
        ckpt = job.checkpoint()
        image = next(job.ck.glob(f"*/{ckpt}/process.img"))
        d = json.loads(job.stasis("inspect", "--decode", image).stdout)
        records = [f[kind] for f in d["files"].values() if kind in f]
        assert records, (name, list(d["files"]))
        if kind == "socket":
            assert {r["family"] for r in records} >= {1, 2}   # AF_UNIX, AF_INET
        else:
            assert any(r["master"] == 1 and r["winsize_rows"] > 0 for r in records), records
        round_trip(job, image, d, tmp_path)
        job.kill()
        job.ck = job.ck.with_name(job.ck.name + "-2")


def test_encode_names_what_is_wrong(job, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"fds": [{"fd": 3}]}')
    r = job.stasis("inspect", "--encode", "fds", bad, check=False)
    assert r.returncode == 1
    assert r.stderr == f"stasis: inspect: {bad}: encode: a struct proc_fd has no field kind\n"
    r = job.stasis("inspect", "--encode", "thread.7", bad, check=False)
    assert r.stderr == f"stasis: inspect: {bad}: encode: the decoded image has no section thread.7\n"


NAMED = """
import os, time
f = open(b"caf\\xe9.txt", "wb")
print("READY", flush=True)
while not os.path.exists("stop"):
    time.sleep(0.02)
"""


def test_a_file_name_that_is_not_utf8_decodes_as_its_bytes(job, tmp_path):
    """A path is any bytes: one that is not UTF-8 is {"hex": ...}, every
    byte of it, and encodes back as it was."""
    job.run("/usr/bin/python3", "-c", NAMED)
    ckpt = job.checkpoint()
    image = next(job.ck.glob(f"*/{ckpt}/process.img"))
    d = json.loads(job.stasis("inspect", "--decode", image).stdout)
    named = [bytes.fromhex(f["path"]["hex"]) for f in d["fds"] if isinstance(f["path"], dict)]
    assert named == [str(job.work).encode() + b"/caf\xe9.txt\0"], d["fds"]
    round_trip(job, image, d, tmp_path)

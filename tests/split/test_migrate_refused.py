"""`stasis migrate` and `stasis predict` refused in one line on one host
(docs/coordinator.md, "Migration"; the migrations themselves are
tests/cluster/test_migrate.py): an MPI job without staging, one whose
launcher names no host list (no spare), an unknown node or rank, and a
single program. The job runs on after each refusal and ends as usual.
About 8 s. And a migration's receiver on its own (under 1 s): it ends
once its remote shell's pipe closes, and serves its sources at once.

Environment: STASIS_BIN, STASIS_BUILD."""
import json
import os
import pathlib
import socket
import struct
import subprocess
import time

import pytest

from split_common import BUILD, launcher, program_fixture
from test_recover import job  # noqa: F401 (a fixture: an MpiJob, killed at the end)

p2p = program_fixture("p2p")
# p2p.c's iterations take 0.3 s: the refusals come at the second, the job
# then runs on to its end
ITERS = 10


def refused(job, *args):
    r = job.stasis(*args, "--dir", job.ck, check=False)
    assert r.returncode == 1 and r.stdout == "", r.stdout + r.stderr
    return r.stderr


def test_migration_refusals_leave_the_job_running(p2p, job, tmp_path):
    host = socket.gethostname()
    job.start(*launcher("openmpi", 2), p2p["openmpi"], ITERS, 100)
    job.lines_until(r"rank 0 iteration 2")
    assert refused(job, "migrate", "--node", host) == \
        "stasis: migrate: migration moves the ranks' node-local images: run the job with " \
        "staging = on\n"
    rc, out, err = job.finish_job()
    assert rc == 0 and f"PASS ranks=2 iterations={ITERS}" in out, out + err

    job.env.update(STASIS_STAGING="on", STASIS_LOCAL_DIR=str(tmp_path / "local"))
    job.ck = tmp_path / "ck2"
    job.seen = []
    job.start(*launcher("openmpi", 2), p2p["openmpi"], ITERS, 100)
    job.lines_until(r"rank 0 iteration 2")
    assert refused(job, "migrate", "--node", "n9") == \
        f"stasis: migrate: node n9 runs no rank of the job (its ranks run on {host})\n"
    assert refused(job, "migrate", "--rank", "7") == \
        "stasis: migrate: rank 7 is not a rank of the job (0-1)\n"
    assert refused(job, "predict", "--node", host, "--within", "60s") == \
        f"stasis: predict: no spare node for {host}'s ranks: the launcher's command names no " \
        "host list (Open MPI's --host, Hydra's -hosts)\n"
    rc, out, err = job.finish_job()
    assert rc == 0 and f"PASS ranks=2 iterations={ITERS}" in out, out + err


def test_a_single_program_cannot_migrate(job):
    job._start(["run", "--dir", job.ck, "--", "sleep", "30"])
    err = ""
    for _ in range(50):
        err = refused(job, "migrate", "--node", "n1")
        if "no running job" not in err and "no answer" not in err:
            break
        time.sleep(0.1)
    assert err == "stasis: migrate: migration moves the ranks of an MPI job; this job is one " \
        "program\n", err


SECRET = "s" * 32


def receiver(tmp_path, sources, fault=None):
    """a migration's receiver (stasis-node --receive) for that many
    sources, as the coordinator starts it on the target; its port"""
    (tmp_path / "coord.secret").write_text(SECRET)
    env = dict(os.environ, STASIS_FAULT=fault) if fault else None
    p = subprocess.Popen([str(BUILD / "src/split/stasis-node"), "--receive", str(tmp_path),
                          str(sources)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env)
    return p, int(p.stdout.readline().split()[1])


def stream(port, image):
    """a moving rank's stream, its first bytes sent (not an image's)"""
    s = socket.create_connection(("127.0.0.1", port), timeout=120)
    s.sendall(f"MIGRATE {SECRET}\nIMAGE - {image}\n".encode() + b"x" * 4096)
    return s


def answer(s):
    """the receiver's answer to a stream ended now"""
    s.shutdown(socket.SHUT_WR)
    return s.makefile().readline()


def receiving(p, image):
    """whether the receiver p holds the unnamed file (O_TMPFILE) it writes
    image into"""
    fds = pathlib.Path(f"/proc/{p.pid}/fd")
    links = []
    for fd in fds.iterdir():
        try:
            links.append(os.readlink(fd))
        except OSError:
            pass
    return any(ln.startswith(f"{image.parent}/#") for ln in links)


@pytest.mark.parametrize("source", [False, True])
def test_a_receiver_ends_once_the_pipe_to_its_remote_shell_closes(tmp_path, source):
    """a migration cancelled or ended by the coordinator closes the pipe
    to the receiver's remote shell: the receiver on the target ends, while
    it waits for its source or inside a stream, and leaves no partial
    image (it stayed, orphaned, holding `stasis run`'s stderr)"""
    image = tmp_path / "local" / "ckpt-000001" / "rank-00001.img"
    p, port = receiver(tmp_path, 1)
    try:
        if source:
            s = stream(port, image)  # noqa: F841 (held open, stalled)
            while not receiving(p, image) and p.poll() is None:
                time.sleep(0.01)
        p.stdout.close()
        assert p.wait(timeout=20) == 1
        assert p.stderr.read() == "stasis-node: migration not received: cancelled: the pipe to " \
            "its remote shell closed\n"
        assert not image.parent.exists() or list(image.parent.iterdir()) == []
    finally:
        p.kill()
        p.wait()


def test_a_receiver_serves_its_sources_at_once(tmp_path):
    """a stream that stalls does not hold up the next rank's: its answer
    comes while the first is still open (the sources were served one
    after the other: a small image's rank, its bytes all in the socket
    buffers, waited behind the others' streams and gave up after 60 s)"""
    p, port = receiver(tmp_path, 2)
    try:
        first = stream(port, tmp_path / "local" / "ckpt-000001" / "rank-00000.img")
        second = stream(port, tmp_path / "local" / "ckpt-000001" / "rank-00001.img")
        # neither stream is an image: each refused, the second while the
        # first is still open, and the first then too
        a = answer(second)
        assert a.startswith("ERR ") and "rank-00001.img" in a, a
        first.sendall(b"y" * 4096)
        a = answer(first)
        assert a.startswith("ERR ") and "rank-00000.img" in a, a
        assert p.wait(timeout=60) == 1
    finally:
        p.kill()
        p.wait()


@pytest.fixture(scope="module")
def saved_image(tmp_path_factory):
    """the bytes of an image (`stasis save` of a small file), for the
    receivers to be sent"""
    saved = tmp_path_factory.mktemp("saved")
    (saved / "f.txt").write_text("the bytes of an image\n")
    subprocess.run([str(BUILD / "src/cli/stasis"), "save", "--dir", "store", "f.txt"], cwd=saved,
                   check=True, capture_output=True)
    return next(saved.glob("store/*/ckpt-*/*.img")).read_bytes()


def test_a_receiver_refused_unnamed_files_writes_a_named_one(tmp_path, saved_image):
    """the local directory's file system refuses O_TMPFILE (NFS, overlayfs
    before 6.6; here the fault node.tmpfile): the receiver writes
    <image>.tmp, checks it and renames it into place (it refused every
    image); a stream that is no image leaves no file"""
    data = saved_image
    ckpt = tmp_path / "local" / "ckpt-000001"
    for name, sent, said, rc in (("rank-00000.img", b"x" * 4096, "ERR ", 1),
                                 ("rank-00001.img", data, "OK\n", 0)):
        p, port = receiver(tmp_path, 1, "node.tmpfile:1:fail")
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=120)
            s.sendall(f"MIGRATE {SECRET}\nIMAGE - {ckpt / name}\n".encode() + sent)
            a = answer(s)
            assert a.startswith(said) and p.wait(timeout=60) == rc, a + p.stderr.read()
        finally:
            p.kill()
            p.wait()
    assert sorted(f.name for f in ckpt.iterdir()) == ["rank-00001.img"]
    assert (ckpt / "rank-00001.img").read_bytes() == data


def test_a_receiver_refuses_an_image_with_a_bad_chunk(tmp_path, saved_image):
    """a byte of a chunk's payload changed on its way: the receiver, which
    checks each chunk's CRC as the bytes arrive (no second pass over the
    image), reads the stream to its end, names the chunk in its answer
    and leaves no file; the same image unchanged is put in place whole"""
    data = saved_image
    at = data.find(b"the bytes of an image")
    bad = data[:at] + b"T" + data[at + 1:]
    image = tmp_path / "local" / "ckpt-000001" / "rank-00001.img"
    for sent, said, rc in ((bad, f"ERR {image}: section 0, chunk 0 (payload at byte {at}): "
                            "CRC32C mismatch\n", 1), (data, "OK\n", 0)):
        got = streamed(tmp_path, image, sent)
        assert got[:2] == (said, rc), got
        assert sorted(f.name for f in image.parent.iterdir()) == ([] if rc else [image.name])
    assert image.read_bytes() == data


def streamed(tmp_path, image, data):
    """data streamed whole as image to a receiver of its own: its answer,
    its exit status and what it said on stderr"""
    p, port = receiver(tmp_path, 1)
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=120)
        s.sendall(f"MIGRATE {SECRET}\nIMAGE - {image}\n".encode() + data)
        return answer(s), p.wait(timeout=60), p.stderr.read()
    finally:
        p.kill()
        p.wait()


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


def reworded(data, change):
    """the image data with its manifest (JSON) changed by change and its
    checksums made again (docs/format.md, "Footer"): every CRC valid"""
    off, length = struct.unpack_from("<QQ", data, len(data) - 40)
    manifest = json.loads(data[off:off + length])
    change(manifest)
    text = json.dumps(manifest, indent=2).encode()
    footer = bytearray(data[-48:])
    struct.pack_into("<QI", footer, 16, len(text), crc32c(text))
    struct.pack_into("<I", footer, 44, crc32c(bytes(footer[:44])))
    return data[:off] + text + bytes(footer)


def test_a_receiver_refuses_a_manifest_its_chunks_disagree_with(tmp_path, saved_image):
    """the manifest says the file is 21 bytes (one chunk still), its one
    chunk holds 22, every checksum valid: a restore refuses that image, so
    the receiver does, in one line naming the chunk (it checked the
    checksums only and put the image in place)"""
    def shorter(m):
        m["sections"][0]["size"] -= 1
        m["totals"]["size"] -= 1
    image = tmp_path / "local" / "ckpt-000001" / "rank-00001.img"
    got = streamed(tmp_path, image, reworded(saved_image, shorter))
    assert got[:2] == (f"ERR {image}: section 'f.txt' (#0) chunk 0 at offset 64: covers 22 bytes "
                       "at 0, expected 21 at 0\n", 1), got
    assert list(image.parent.iterdir()) == []

"""Corruption matrix: flip a byte in every kind of region of an image and of
the index, truncate, delete. Each case must be detected and named, and a
restart must never be pointed at damaged data."""
import re
import struct

import pytest

ENV = {"STASIS_CHUNK_SIZE": "64K"}
HEADER_SIZE = 64
CHUNK_HEADER_SIZE = 48


def make_job(stasis):
    for _ in range(2):
        stasis.ok("save", "--dir", "store", "--job", "demo", "grid.bin", "notes.txt", env=ENV)
    return stasis.tmp / "store/demo/ckpt-000002/files.img"


def flip(path, offset):
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x5A
    path.write_bytes(bytes(data))


def regions(img):
    """Byte offsets inside each region of an image (docs/format.md)."""
    data = img.read_bytes()
    manifest_at = struct.unpack_from("<Q", data, len(data) - 48 + 8)[0]
    assert data[manifest_at:manifest_at + 1] == b'{'

    first_chunk_stored = struct.unpack_from("<I", data, HEADER_SIZE + 28)[0]
    return {
        "magic": (0, r"not a Stasis image"),
        "header": (12, r"header"),
        "chunk header": (HEADER_SIZE + 20, r"chunk"),
        "chunk data": (HEADER_SIZE + CHUNK_HEADER_SIZE + first_chunk_stored // 2,
                       r"section 'grid\.bin'.*offset|offset.*section 'grid\.bin'"),
        "last chunk data": (manifest_at - 10, r"section 'notes\.txt'"),
        "manifest": (manifest_at + 30, r"manifest"),
        "footer": (len(data) - 12, r"footer|truncated"),
    }


@pytest.mark.parametrize("region", ["magic", "header", "chunk header", "chunk data",
                                    "last chunk data", "manifest", "footer"])
def test_flip_byte_in_image(stasis, dataset, region):
    img = make_job(stasis)
    offset, pattern = regions(img)[region]
    flip(img, offset)
    r = stasis.fails("verify", img, rc=1)
    assert "files.img" in r.err, r
    assert re.search(pattern, r.err), r
    # checkpoint- and job-level verification name the same problem
    r = stasis.fails("verify", "store/demo/ckpt-000002", rc=1)
    assert "files.img" in r.err and re.search(pattern, r.err), r
    r = stasis.run("verify", "store/demo")
    assert r.rc == 1 and "ckpt-000001: OK" in r.out, r


def test_every_byte_of_a_small_image_is_covered(stasis, tmp_path):
    """Flip each byte of a small image in turn: verify must refuse every one."""
    # a zero page then a partial page: exercises the sparse form in few bytes
    (tmp_path / "small.bin").write_bytes(bytes(4096) + bytes(range(7, 250)))
    stasis.ok("save", "--dir", "store", "--job", "small", "small.bin")
    img = tmp_path / "store/small/ckpt-000001/files.img"
    good = img.read_bytes()
    bad = tmp_path / "bad.img"
    missed = []
    for i in range(len(good)):
        data = bytearray(good)
        data[i] ^= 0x01
        bad.write_bytes(bytes(data))
        r = stasis.run("verify", bad)
        if r.rc == 0:
            missed.append(i)
    assert not missed, f"undetected flips at offsets {missed[:20]} of {len(good)}"


def test_truncated_image_in_store(stasis, dataset):
    img = make_job(stasis)
    data = img.read_bytes()
    img.write_bytes(data[: len(data) // 2])
    r = stasis.fails("verify", "store/demo/ckpt-000002", rc=1)
    assert "files.img" in r.err and re.search(r"size|truncated", r.err), r
    # restart selection walks back to the intact checkpoint
    out = stasis.ok("ls", "--dir", "store").out
    assert re.search(r"ckpt-000001\s+CURRENT", out), out


def test_deleted_image(stasis, dataset):
    img = make_job(stasis)
    img.unlink()
    r = stasis.fails("verify", "store/demo/ckpt-000002", rc=1)
    assert "files.img" in r.err and "missing" in r.err, r
    out = stasis.ok("ls", "--dir", "store").out
    assert re.search(r"ckpt-000001\s+CURRENT", out), out


def index_records(path):
    data = path.read_bytes()
    starts = [m.start() for m in re.finditer(rb"^R ", data, re.M)]
    return data, starts


def test_flip_byte_in_index(stasis, dataset):
    make_job(stasis)
    index = stasis.tmp / "store/demo/index"
    data, starts = index_records(index)
    # damage the COMPLETE record of ckpt-000002 (the last record)
    target = starts[-1]
    assert b'"COMPLETE"' in data[target:]
    flip(index, target + (len(data) - target) // 2)
    r = stasis.run("ls", "--dir", "store")
    assert r.rc == 1 and "damaged index record" in r.out, r
    assert re.search(r"ckpt-000001\s+CURRENT", r.out), r
    assert re.search(r"ckpt-000002\s+PARTIAL", r.out), r
    r = stasis.fails("verify", "store/demo", rc=1)
    assert "index" in r.err and re.search(rf"\b{target}\b", r.err), r


def test_flip_byte_in_index_middle_record(stasis, dataset):
    make_job(stasis)
    index = stasis.tmp / "store/demo/index"
    data, starts = index_records(index)
    target = starts[1]            # the FILE record of ckpt-000001
    flip(index, target + 12)
    out = stasis.run("ls", "--dir", "store").out
    assert re.search(r"ckpt-000002\s+CURRENT", out), out
    r = stasis.fails("verify", "store/demo", rc=1)
    assert re.search(rf"\b{target}\b", r.err), r


def test_truncated_index_every_byte_of_last_record(stasis, dataset):
    make_job(stasis)
    index = stasis.tmp / "store/demo/index"
    data, starts = index_records(index)
    for cut in range(starts[-1], len(data)):
        index.write_bytes(data[:cut])
        out = stasis.ok("ls", "--dir", "store").out if cut == starts[-1] else \
            stasis.run("ls", "--dir", "store").out
        assert re.search(r"ckpt-000001\s+CURRENT", out), (cut, out)
        assert re.search(r"ckpt-000002\s+PARTIAL", out), (cut, out)


def test_index_is_not_an_index(stasis, dataset):
    make_job(stasis)
    (stasis.tmp / "store/demo/index").write_bytes(b"garbage\n")
    r = stasis.fails("ls", "--dir", "store", "demo")
    assert "index" in r.err, r


def test_deleted_index(stasis, dataset):
    make_job(stasis)
    (stasis.tmp / "store/demo/index").unlink()
    assert "no job 'demo'" in stasis.fails("ls", "--dir", "store", "demo").err
    r = stasis.fails("verify", "store/demo", rc=1)
    assert "store/demo" in r.err and "no index" in r.err, r

"""The `stasis` command line: every subcommand, its help, its output, and a
one-line error with a non-zero exit on every kind of bad input."""
import json
import pathlib
import re

import pytest

from conftest import ROOT

SUBCOMMANDS = ["inspect", "verify", "ls", "prune", "save", "extract", "config", "faults"]


def save(stasis, *files, job="demo", env=None):
    r = stasis.ok("save", "--dir", "store", "--job", job, *files, env=env)
    m = re.search(r"as \S+/(ckpt-\d+) ", r.out)
    assert m, r
    return m.group(1)


def test_version(stasis):
    r = stasis.ok("--version")
    assert re.fullmatch(r"stasis \d+\.\d+\.\d+\n", r.out)


@pytest.mark.parametrize("cmd", SUBCOMMANDS)
def test_help_on_every_subcommand(stasis, cmd):
    r = stasis.ok(cmd, "--help")
    assert r.out.startswith(f"usage: stasis {cmd}"), r
    assert stasis.ok("help", cmd).out == r.out


def test_top_level_help_lists_every_subcommand(stasis):
    out = stasis.ok("--help").out
    for cmd in SUBCOMMANDS:
        assert re.search(rf"^  {cmd} ", out, re.M), cmd


def test_unknown_command(stasis):
    r = stasis.fails("frobnicate", rc=2)
    assert "unknown command 'frobnicate'" in r.err


def test_no_arguments_prints_usage(stasis):
    r = stasis.run()
    assert r.rc == 2 and r.err.startswith("usage: stasis")


def test_save_ls_inspect_extract_roundtrip(stasis, dataset):
    first = save(stasis, "grid.bin", "notes.txt", "empty.dat")
    second = save(stasis, "grid.bin", "notes.txt", "empty.dat")
    assert (first, second) == ("ckpt-000001", "ckpt-000002")

    ls = stasis.ok("ls", "--dir", "store").out
    assert re.search(r"ckpt-000001\s+COMPLETE\s+1\s", ls), ls
    assert re.search(r"ckpt-000002\s+CURRENT\s+1\s", ls), ls

    img = stasis.tmp / "store/demo/ckpt-000002/files.img"
    text = stasis.ok("inspect", img).out
    for name in dataset:
        assert re.search(rf"\sfile\s+{re.escape(name)}\s", text), text
    manifest = json.loads(stasis.ok("inspect", "--json", img).out)
    sections = {s["name"]: s for s in manifest["sections"]}
    assert set(sections) == set(dataset)
    assert sections["grid.bin"]["size"] == len(dataset["grid.bin"])
    # half of grid.bin's pages are zero: recorded, not stored
    assert sections["grid.bin"]["stored"] < 0.55 * len(dataset["grid.bin"])
    assert manifest["meta"]["job"] == "demo"

    for name, data in dataset.items():
        out = stasis.tmp / f"out-{name}"
        stasis.ok("extract", img, name, out)
        assert out.read_bytes() == data, name
    r = stasis.run("extract", img, "notes.txt", "-")
    assert r.rc == 0 and r.out.encode() == dataset["notes.txt"]


def test_zstd_compression_roundtrip(stasis, dataset):
    env = {"STASIS_COMPRESS": "zstd", "STASIS_CHUNK_SIZE": "64K"}
    ckpt = save(stasis, "grid.bin", "notes.txt", env=env)
    img = stasis.tmp / "store/demo" / ckpt / "files.img"
    manifest = json.loads(stasis.ok("inspect", "--json", img).out)
    notes = next(s for s in manifest["sections"] if s["name"] == "notes.txt")
    assert notes["stored"] < notes["size"] / 2, notes      # text compresses
    stasis.ok("verify", img)
    stasis.ok("extract", img, "notes.txt", "n.out")
    assert (stasis.tmp / "n.out").read_bytes() == dataset["notes.txt"]


def test_verify_image_checkpoint_and_job(stasis, dataset):
    ckpt = save(stasis, "grid.bin", "notes.txt")
    assert "OK" in stasis.ok("verify", f"store/demo/{ckpt}/files.img").out
    assert f"{ckpt}: OK" in stasis.ok("verify", f"store/demo/{ckpt}").out
    out = stasis.ok("verify", "store/demo").out
    assert "1 complete checkpoint(s) verified" in out


def test_prune_keeps_newest(stasis, dataset):
    for _ in range(4):
        save(stasis, "notes.txt")
    r = stasis.ok("prune", "--dir", "store", "--keep", "2")
    assert "removed 2 checkpoint(s)" in r.out
    ls = stasis.ok("ls", "--dir", "store").out
    assert "ckpt-000001" not in ls and "ckpt-000002" not in ls
    assert re.search(r"ckpt-000004\s+CURRENT", ls) and re.search(r"ckpt-000003\s+COMPLETE", ls)
    assert not (stasis.tmp / "store/demo/ckpt-000001").exists()
    stasis.ok("verify", "store/demo")


def test_prune_bad_keep(stasis, dataset):
    save(stasis, "notes.txt")
    assert "--keep" in stasis.fails("prune", "--dir", "store", "--keep", "x", rc=2).err
    assert "--keep" in stasis.fails("prune", "--dir", "store", rc=2).err


def test_ls_with_several_jobs_and_by_name(stasis, dataset):
    save(stasis, "notes.txt", job="a")
    save(stasis, "notes.txt", job="b")
    out = stasis.ok("ls", "--dir", "store").out
    assert "job a " in out and "job b " in out
    out = stasis.ok("ls", "--dir", "store", "b").out
    assert "job a " not in out and "job b " in out
    assert "2 jobs" in stasis.fails("prune", "--dir", "store", "--keep", "1").err
    assert "no job 'c'" in stasis.fails("ls", "--dir", "store", "c").err


def test_ls_uses_configured_global_dir(stasis, dataset):
    stasis.ok("save", "--job", "cfg", "notes.txt",
              env={"STASIS_GLOBAL_DIR": str(stasis.tmp / "g")})
    out = stasis.ok("ls", env={"STASIS_GLOBAL_DIR": str(stasis.tmp / "g")}).out
    assert "job cfg" in out and "CURRENT" in out


def test_config_list_shows_every_key_and_origin(stasis):
    keys = re.findall(r'^CONFIG_KEY\(\w+,\s*"([a-z_]+)"',
                      (ROOT / "src/common/config_keys.h").read_text(), re.M)
    assert len(keys) >= 10
    conf = stasis.tmp / "s.conf"
    conf.write_text("# test\nthreads = 1\n")
    r = stasis.ok("--config", conf, "config", "--list", env={"STASIS_COMPRESS": "zstd"})
    rows = {l.split()[0]: l for l in r.out.splitlines()[1:]}
    assert set(rows) == set(keys)
    assert re.match(r"compress\s+zstd\s+env STASIS_COMPRESS$", rows["compress"])
    assert re.match(rf"threads\s+1\s+file {re.escape(str(conf))}:2$", rows["threads"])
    assert re.match(r"log\s+warn\s+default$", rows["log"])
    assert stasis.ok("config", "chunk_size").out == "4M\n"
    # STASIS_CONFIG names the file too
    r = stasis.ok("config", "threads", env={"STASIS_CONFIG": str(conf)})
    assert r.out == "1\n"


def test_config_errors(stasis):
    assert "unknown configuration key 'nope'" in stasis.fails("config", "nope", rc=2).err
    r = stasis.fails("config", "--list", env={"STASIS_COMPRESS": "lz5"}, rc=2)
    assert "env STASIS_COMPRESS: bad value 'lz5' for 'compress'" in r.err
    conf = stasis.tmp / "bad.conf"
    conf.write_text("threads = 2\nfrobs = 1\n")
    r = stasis.fails("--config", conf, "config", "--list", rc=2)
    assert f"{conf}:2: unknown configuration key 'frobs'" in r.err
    r = stasis.fails("--config", stasis.tmp / "missing.conf", "config", "--list", rc=2)
    assert "missing.conf" in r.err


def test_faults_lists_every_point(stasis):
    points = re.findall(r'^FAULT_POINT\(\w+,\s*"([a-z._]+)"',
                        (ROOT / "src/common/fault_points.h").read_text(), re.M)
    out = stasis.ok("faults").out
    assert [l.split()[0] for l in out.splitlines()] == points
    r = stasis.fails("ls", env={"STASIS_FAULT": "no.such"}, rc=2)
    assert "unknown fault point 'no.such'" in r.err


# ---- bad input: one line, non-zero, never a crash ---------------------------

def test_missing_paths(stasis):
    assert "No such file" in stasis.fails("verify", "nope.img").err
    assert "No such file" in stasis.fails("inspect", "nope.img").err
    assert "no checkpoint directory" in stasis.fails("ls", "--dir", "nope").err
    assert "No such file" in stasis.fails("extract", "nope.img", "x", "y").err
    r = stasis.fails("save", "--dir", "store", "nope.txt")
    assert "nope.txt" in r.err


@pytest.mark.parametrize("content", [b"", b"hello world\n", bytes(4096), b"\x89STASIS"],
                         ids=["empty", "text", "zeros", "magic-only"])
def test_not_an_image(stasis, content):
    p = stasis.tmp / "x.img"
    p.write_bytes(content)
    for cmd in ("verify", "inspect"):
        r = stasis.fails(cmd, p, rc=1)
        assert "x.img" in r.err
        assert re.search(r"not a Stasis image|truncated", r.err), r


def test_directory_that_is_not_a_store(stasis):
    (stasis.tmp / "d").mkdir()
    assert "not an image, a checkpoint or a job" in stasis.fails("verify", "d", rc=2).err


def test_truncated_image_every_region(stasis, dataset):
    ckpt = save(stasis, "grid.bin", "notes.txt", env={"STASIS_CHUNK_SIZE": "64K"})
    data = (stasis.tmp / f"store/demo/{ckpt}/files.img").read_bytes()
    for cut in (1, 63, 64, 65, 200, len(data) // 2, len(data) - 60, len(data) - 1):
        p = stasis.tmp / "t.img"
        p.write_bytes(data[:cut])
        for cmd in ("verify", "inspect"):
            r = stasis.fails(cmd, p, rc=1)
            assert "t.img" in r.err, r


def test_extract_unknown_section(stasis, dataset):
    ckpt = save(stasis, "notes.txt")
    r = stasis.fails("extract", f"store/demo/{ckpt}/files.img", "nope", "o", rc=2)
    assert "no section 'nope'" in r.err


def test_usage_errors(stasis):
    for args in (["inspect"], ["verify"], ["verify", "a", "b"], ["extract", "a"],
                 ["config"], ["faults", "x"], ["ls", "--bogus"], ["save", "--dir", "s"]):
        r = stasis.run(*args)
        assert r.rc == 2, (args, r)
        assert "usage: stasis" in r.err, (args, r)

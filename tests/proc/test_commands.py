"""The transparent mode's commands: --stop, --interval, the SIGTERM and SIGUSR1
checkpoints, status, and the refusals of restart (docs/transparent.md)."""
import os
import pathlib
import signal
import time

from proc_harness import BIN, flip_bit, job, program, raw_page_chunks  # noqa: F401 (job is a fixture)


def established(job):
    r = job.stasis("ls", "--dir", job.ck)
    return [l.split()[0] for l in r.stdout.splitlines()
            if "COMPLETE" in l or "CURRENT" in l]


def one_line_error(r, rc=None):
    assert r.returncode != 0, r
    if rc is not None:
        assert r.returncode == rc, r.stderr
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("stasis: "), r.stderr
    return lines[0]


def test_stop_ends_the_program_and_restart_continues(job):
    job.run(program("heap"))
    assert job.checkpoint("--stop") == "ckpt-000001"
    out, err = job.communicate(60)
    assert job.proc.returncode == 0, err
    assert "PASS" not in out
    job.proc = None
    job.restart()
    rc, out, err = job.finish()
    assert rc == 0 and out.strip() == "PASS", err


def test_resume_starts_then_restarts(job):
    """`run --resume` starts the program when the job has no checkpoint,
    and restarts the latest established one when it has (a batch script's
    one line, requeued)."""
    job.run(program("heap"), extra=["--resume"], env={"STASIS_LOG": "info"})
    assert job.checkpoint("--stop") == "ckpt-000001"
    out, err = job.communicate(60)
    assert job.proc.returncode == 0 and "PASS" not in out, err
    assert "run --resume: job heap has no established checkpoint: starting it" in err, err
    job.proc = None
    job._start(["run", "--dir", job.ck, "--resume", "--", program("heap")],
               {"STASIS_LOG": "info"})
    job.wait_running()
    rc, out, err = job.finish()
    assert rc == 0 and out.strip() == "PASS", err
    assert "run --resume: job heap restarts from ckpt-000001" in err, err
    r = job.stasis("run", "--dir", job.ck, "--launcher", "x", "--", program("heap"), check=False)
    assert one_line_error(r, rc=2) == "stasis: run: --launcher goes with --resume (or `stasis restart`)"


def test_interval(job):
    job.run(program("threads"), extra=["--interval", "1"])
    deadline = time.time() + 60
    while time.time() < deadline and len(established(job)) < 2:
        time.sleep(0.2)
    assert len(established(job)) >= 2
    rc, out, err = job.finish()
    assert rc == 0 and out.strip().endswith("PASS"), err


def test_sigterm_checkpoints_then_ends(job):
    job.run(program("heap"))
    job.proc.send_signal(signal.SIGTERM)
    out, err = job.communicate(60)
    assert job.proc.returncode == 0, err
    assert "checkpoint ckpt-000001 taken on SIGTERM" in err
    job.proc = None
    job.restart()
    rc, out, err = job.finish()
    assert rc == 0 and out.strip() == "PASS", err


def test_sigusr1_checkpoints_and_runs_on(job):
    job.run(program("heap"))
    job.proc.send_signal(signal.SIGUSR1)
    deadline = time.time() + 60
    while time.time() < deadline and not established(job):
        time.sleep(0.1)
    assert established(job) == ["ckpt-000001"]
    rc, out, err = job.finish()
    assert rc == 0 and out.strip().endswith("PASS"), err


def test_status_and_exit_status(job, tmp_path):
    job.run(program("heap"))
    r = job.stasis("status", "--dir", job.ck)
    assert r.stdout.startswith("heap  running  job=heap pid="), r.stdout
    job.checkpoint()
    r = job.stasis("status", "--dir", job.ck)
    assert "checkpoints=1 last=ckpt-000001" in r.stdout and "established=1" in r.stdout
    rc, out, err = job.finish()
    assert rc == 0
    r = job.stasis("status", "--dir", job.ck)
    assert r.stdout.startswith("heap  stopped  established=1 latest=ckpt-000001"), r.stdout
    # the program's exit status is stasis run's
    r = job.stasis("run", "--dir", job.ck, "--job", "false", "--", "/bin/sh", "-c", "exit 7",
                   check=False)
    assert r.returncode == 7, r


def test_restart_refuses_a_damaged_image(job):
    job.run(program("heap"))
    job.checkpoint()
    job.kill()
    img = job.ck / "heap" / "ckpt-000001" / "process.img"
    data = bytearray(img.read_bytes())
    data[len(data) // 3] ^= 0xFF
    img.write_bytes(bytes(data))
    r = job.stasis("restart", "--dir", job.ck, check=False)
    line = one_line_error(r, rc=1)
    assert "ckpt-000001" in line and "process.img" in line, line


def raw_page_chunk(img):
    """File offset of the payload of a raw (stored as is) chunk of page data."""
    for _, at, length in raw_page_chunks(img):
        if length >= 4096:
            return at, length
    raise AssertionError("no raw chunk of page data in the image")


def test_restart_refuses_a_damaged_page_chunk(job):
    """Raw page chunks are read and checked by the restorer itself, after the
    coordinator has streamed everything else: a bad one still stops the
    restart in one line naming the file, the section and the chunk, and the
    program does not run."""
    job.run(program("heap"))
    job.checkpoint()
    job.kill()
    img = job.ck / "heap" / "ckpt-000001" / "process.img"
    at, length = raw_page_chunk(img)
    flip_bit(img, at + length // 2)
    r = job.stasis("restart", "--dir", job.ck, check=False)
    line = one_line_error(r, rc=1)
    assert str(img) in line and "section 'mem." in line and " chunk " in line, line
    assert "payload checksum mismatch" in line, line
    assert "PASS" not in r.stdout
    r = job.stasis("status", "--dir", job.ck)
    assert "  running  " not in r.stdout, r.stdout


def test_restart_refuses_a_changed_binary(job, tmp_path):
    exe = tmp_path / "heapcopy"
    exe.write_bytes(pathlib.Path(program("heap")).read_bytes())
    exe.chmod(0o755)
    job.run(str(exe))
    job.checkpoint()
    job.kill()
    st = exe.stat()
    os.utime(exe, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    r = job.stasis("restart", "--dir", job.ck, check=False)
    line = one_line_error(r, rc=1)
    assert f"mapped file {exe} changed since the checkpoint" in line, line
    exe.unlink()
    r = job.stasis("restart", "--dir", job.ck, check=False)
    line = one_line_error(r, rc=1)
    assert f"mapped file {exe} is missing" in line, line


def test_bad_usage_is_one_line(job):
    for args in (["run", "--dir", job.ck], ["run", "--interval", "soon", "--", "true"],
                 ["checkpoint", "--dir", job.ck], ["restart", "--dir", job.ck / "none"],
                 ["status", "--dir", job.ck / "none"], ["checkpoint", "--bogus"]):
        r = job.stasis(*args, check=False)
        one_line_error(r)


def test_a_socket_fails_the_checkpoint_and_the_program_runs_on(job):
    job.run(program("socket"), "socket")
    r = job.stasis("checkpoint", "--dir", job.ck, check=False)
    line = one_line_error(r, rc=1)
    assert line == (f"stasis: checkpoint: checkpoint failed: cannot checkpoint: process "
                    f"{job.program_pid()} (socket): fd 3 is a socket (IPv4, datagram)"), line
    r = job.stasis("ls", "--dir", job.ck)
    assert "FAILED" in r.stdout, r.stdout
    rc, out, err = job.finish()
    assert rc == 0 and out.strip().endswith("PASS"), err


def test_a_child_process_and_a_zombie_are_restored(job):
    """A child is a process of the job (docs/transparent.md, "Process
    trees"): checkpointed while it runs, then as a zombie not yet waited
    for, each time killed and restarted; after the restarts the parent
    still has it, kills it, and waits for it with the status it ended with
    (tests/proc/children.c). The child is started after a restart: the
    restarted program has its own PID namespace, and the child keeps its
    pid in it."""
    job.run(program("children"))        # its first child came and went
    assert job.checkpoint() == "ckpt-000001"
    job.kill()
    job.restart()
    (job.work / "fork").touch()
    job.wait_line("CHILD")
    assert job.checkpoint() == "ckpt-000002"
    job.kill()
    job.restart()
    (job.work / "zombie").touch()       # the parent kills its restored child
    job.wait_line("ZOMBIE")
    assert job.checkpoint() == "ckpt-000003"
    job.kill()
    job.restart()
    (job.work / "reap").touch()         # the zombie's status survived
    job.wait_line("REAPED")
    assert established(job) == ["ckpt-000001", "ckpt-000002", "ckpt-000003"]
    rc, out, err = job.finish()
    assert rc == 0 and out.strip().endswith("PASS") and "FAIL" not in out, f"{out}\n{err}"


def test_a_file_that_grew_is_cut_back_one_that_shrank_or_vanished_is_refused(job):
    """A file the program writes that grew after the checkpoint is cut back
    to its size then: the program writes those bytes again (src/proc/fds.c)."""
    job.run(program("socket"))          # appends to log.txt every 10 ms
    job.checkpoint("--stop")            # the program ends with its checkpoint
    job.communicate(60)
    job.proc = None
    log = job.work / "log.txt"
    at_checkpoint = log.read_bytes()
    with open(log, "ab") as f:          # grown after the checkpoint
        f.write(b"written after the checkpoint\n")
    job.restart()
    job.checkpoint()
    job.kill()
    after = log.read_bytes()
    assert after.startswith(at_checkpoint) and b"after the checkpoint" not in after, after[-200:]
    assert len(after) > len(at_checkpoint)   # the restarted program appended
    with open(log, "r+") as f:
        f.truncate(1)
    r = job.stasis("restart", "--dir", job.ck, check=False)
    line = one_line_error(r, rc=1)
    assert f"file {log} (fd " in line and "shrank since the checkpoint" in line, line
    log.unlink()
    r = job.stasis("restart", "--dir", job.ck, check=False)
    line = one_line_error(r, rc=1)
    assert f"file {log} (fd " in line and "is missing" in line, line


def test_long_job_directory(job):
    """A socket path longer than sun_path is reached through a descriptor."""
    deep = job.work / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    job.ck = deep / "ck"
    assert len(str(job.ck / "heap" / "coord.sock")) > 108
    job.run(program("heap"))
    assert job.checkpoint() == "ckpt-000001"
    job.kill()
    job.restart()
    rc, out, err = job.finish()
    assert rc == 0 and out.strip() == "PASS", err


def test_no_signal_checkpoint_passes_sigterm_on(job):
    """Without signal checkpoints SIGTERM reaches the program, after a
    restart too (through the namespace's processes)."""
    job.run(program("heap"), extra=["--no-signal-checkpoint"])
    job.checkpoint()
    job.proc.send_signal(signal.SIGTERM)
    job.communicate(60)
    assert job.proc.returncode == 128 + signal.SIGTERM
    job.proc = None
    job.restart("--no-signal-checkpoint")
    job.proc.send_signal(signal.SIGTERM)
    job.communicate(60)
    assert job.proc.returncode == 128 + signal.SIGTERM
    job.proc = None
    assert established(job) == ["ckpt-000001"]


def test_compressed_images(job):
    """compress = zstd applies to process images; restart reads them."""
    zstd = {"STASIS_COMPRESS": "zstd"}
    job.run(program("bigzero"), env=zstd)
    job.checkpoint()
    job.kill()
    r = job.stasis("inspect", next(job.ck.glob("*/ckpt-000001/process.img")))
    assert "compression  zstd" in r.stdout, r.stdout
    job.restart(env=zstd)
    rc, out, err = job.finish()
    assert rc == 0 and out.strip() == "PASS", err


def test_short_and_missing_programs(job):
    """A program that ends at once runs quietly; one that cannot be executed
    is one line and exit status 127."""
    r = job.stasis("run", "--dir", job.ck, "--", "/bin/true", check=False)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    r = job.stasis("run", "--dir", job.ck, "--job", "x", "--", "/nonexistent/prog", check=False)
    line = one_line_error(r, rc=127)
    assert line == "stasis: run: cannot execute /nonexistent/prog: No such file or directory", line


def test_keep_prunes_older_checkpoints(job):
    """With keep = N the coordinator prunes after each established checkpoint."""
    keep = {"STASIS_KEEP": "2"}
    job.run(program("heap"), env=keep)
    for _ in range(4):
        job.checkpoint()
    r = job.stasis("ls", "--dir", job.ck)
    assert established(job) == ["ckpt-000003", "ckpt-000004"], r.stdout
    assert not (job.ck / "heap" / "ckpt-000001").exists()
    job.kill()
    job.restart(env=keep)
    rc, out, err = job.finish()
    assert rc == 0 and out.strip() == "PASS", err


def test_restart_refuses_a_kernel_lacking_a_feature(job):
    """A kernel without clone3, without user namespaces or without
    PR_SET_MM_MAP (seccomp makes the call fail as such a kernel would) is
    refused in one line naming the feature, before anything of the restart
    runs; the checkpoint stays established and restarts on this kernel."""
    job.run(program("heap"))
    job.checkpoint()
    job.kill()
    nokernel = program("nokernel")
    cases = [  # x86_64 system call number, errno[, first argument]
        (["435", "38"], "this kernel lacks clone3 (Linux 5.5 or later"),
        (["272", "22"], "this kernel refuses new user and PID namespaces (Invalid argument"),
        (["272", "28"], "this kernel refuses new user and PID namespaces (No space left"),
        (["157", "22", "35"], "this kernel lacks prctl PR_SET_MM_MAP"),
    ]
    for spec, text in cases:
        r = job.stasis(nokernel, *spec, "--", BIN, "restart", "--dir", job.ck,
                       check=False, raw=True)
        line = one_line_error(r, rc=1)
        assert line.startswith("stasis: restart: " + text), (spec, line)
    # a restart failing inside the namespace (clone3 refused there) is one line too
    r = job.stasis(nokernel, "435", "1", "--", BIN, "restart", "--dir", job.ck,
                   check=False, raw=True)
    line = one_line_error(r, rc=1)
    assert "clone3 set_tid" in line, line
    assert established(job) == ["ckpt-000001"]
    job.restart()
    rc, out, err = job.finish()
    assert rc == 0 and out.strip() == "PASS", err

"""Stand-by ranks (`stasis standby`, docs/cluster.md, "Stand-by ranks"): a
job's launcher started again with every rank past MPI_Init and waiting, and
`stasis restart --standby` restoring a checkpoint into them without a
launch. p2p.c under Open MPI, checkpointed with messages in flight and
SIGKILLed, restored into an MPICH stand-by (whose node agent waits for it,
relaunched once by --recover auto), must print what an uninterrupted run
prints; the refusals are one line each. About 8 s in all.

Environment: STASIS_BIN, STASIS_BUILD."""
import os
import re
import signal

from split_common import launcher, program_fixture
from test_ckpt import MpiJob
from test_node_agent import field, pids, until
from test_restart_p2p import p2p_messages

p2p = program_fixture("p2p")
ITERS, SLEEP_MS = "8", "100"


def agents(job):
    """host:pid of the stand-by's node agents (STATUS nodes=), [] before
    its coordinator answers"""
    r = job.stasis("status", "--dir", job.ck, check=False)
    nodes = field(r.stdout, "nodes") if r.returncode == 0 else None
    return nodes.split(",") if nodes and nodes != "-" else []


def test_restart_into_a_standby_prints_what_an_uninterrupted_run_prints(p2p, tmp_path):
    prog = p2p["openmpi"]
    job = MpiJob(tmp_path)
    # its first checkpoint fails (rank 1 cannot write its image)
    job.env.update(STASIS_FAULT="split.rank.write:1:fail", STASIS_FAULT_RANK="1")
    job.start(*launcher("openmpi", 2), prog, ITERS, SLEEP_MS)
    del job.env["STASIS_FAULT"], job.env["STASIS_FAULT_RANK"]
    job.lines_until(r"rank 0 iteration 2")
    assert job.stasis("checkpoint", "--dir", job.ck, check=False).returncode == 1
    name = job.checkpoint()
    assert name == "ckpt-000002"
    job.kill()
    jdir = next(job.ck.glob("*"))
    r = job.stasis("standby", "--dir", job.ck, jdir.name, "ckpt-000002", check=False)
    assert r.returncode == 2 and r.stderr == (
        "stasis: standby: too many operands (usage: stasis standby [--dir D] [JOB])\n"), r.stderr
    # none runs (and standby_wait 0: none is waited for): gone, in one line
    r = job.stasis("restart", "--dir", job.ck, "--standby", check=False,
                   env={"STASIS_STANDBY_WAIT": "0"})
    assert r.returncode == 1 and r.stderr == (
        f"stasis: restart: --standby: no stand-by of job {next(job.ck.glob('*')).name} runs "
        f"(no coordinator in {next(job.ck.glob('*'))}): start one with `stasis standby`\n"), r.stderr
    # a stand-by of 3 ranks refuses a checkpoint of 2, and stays; the
    # restart started right after it waits for it, as the README's
    # `stasis standby ... & stasis restart --standby ...` does
    job._start(["standby", "--dir", job.ck, "--launcher", " ".join(launcher("openmpi", 3))])
    r = job.stasis("restart", "--dir", job.ck, "--standby", check=False)
    assert r.returncode == 1 and r.stderr == (
        f"stasis: restart: --standby: {name} has 2 ranks, the stand-by 3: start one with as "
        "many\n"), r.stderr
    # a waiting stand-by has nothing to checkpoint: said at once
    r = job.stasis("checkpoint", "--dir", job.ck, check=False)
    assert r.returncode == 1 and r.stderr == (
        f"stasis: checkpoint: checkpoint failed: job {jdir.name} is a stand-by: nothing to "
        "checkpoint before a restore\n"), r.stderr
    # a failed or missing checkpoint is refused before the stand-by is used
    r = job.stasis("restart", "--dir", job.ck, "--standby", f"{jdir.name}/ckpt-000001",
                   check=False)
    assert r.returncode == 1 and re.fullmatch(
        rf"stasis: restart: --standby: ckpt-000001 of job {jdir.name} failed \(.+\): restore "
        r"an established checkpoint \(stasis ls\)\n", r.stderr), r.stderr
    r = job.stasis("restart", "--dir", job.ck, "--standby", f"{jdir.name}/ckpt-000099",
                   check=False)
    assert r.returncode == 1 and r.stderr == (
        f"stasis: restart: --standby: no checkpoint ckpt-000099 in job {jdir.name}\n"), r.stderr
    # `stasis status` tells it waits, and once its node agent is killed,
    # that it is lost: refused from then on, in one line
    [agent] = agents(job)
    host = agent.split(":")[0]
    assert " standby=waiting:3 " in job.stasis("status", "--dir", job.ck).stdout
    os.kill(pids(agent)[0], signal.SIGKILL)
    assert until(lambda: f" standby=lost:{host} " in job.stasis("status", "--dir", job.ck).stdout,
                 20)
    r = job.stasis("restart", "--dir", job.ck, "--standby", check=False)
    assert r.returncode == 1 and r.stderr == (
        f"stasis: restart: --standby: the stand-by lost its node agent on {host} "
        "before a restore: end it and start another\n"), r.stderr
    assert job.proc.poll() is None, job.communicate(5)
    job.proc.terminate()
    _, err = job.communicate(60)
    assert re.search(rf"^stasis: the stand-by of job {jdir.name} ended before a restore: on "
                     r"SIGTERM, its launcher's status \d+\n\Z", err, re.M), err
    # its ranks' word that they wait went with them
    assert not (jdir / "standby.ready").exists()
    # node.no_rank: a node agent that no rank came to gives up at once, as
    # after 300 s; a stand-by's agents wait for the restore instead
    # after the wait; under --recover auto, a node lost while it waits
    # (its agent silent) relaunches a stand-by, which restores nothing
    # until asked
    # (an MPICH stand-by, the checkpoint Open MPI's: either MPI takes either)
    job._start(["standby", "--dir", job.ck, "--recover", "auto",
                "--launcher", " ".join(launcher("mpich", 2))],
               env={"STASIS_FAULT": "node.no_rank", "STASIS_HEARTBEAT_TIMEOUT": "2000"})
    [old] = until(lambda: agents(job), 60)
    os.kill(pids(old)[0], signal.SIGSTOP)
    try:
        assert until(lambda: agents(job) and agents(job) != [old], 60), agents(job)
    finally:
        os.kill(pids(old)[0], signal.SIGKILL)
    r = job.stasis("restart", "--dir", job.ck, "--standby")
    assert re.fullmatch(rf"restart: {name} restored into the stand-by's 2 ranks in [0-9.]+ s\n",
                        r.stdout), r.stdout + r.stderr
    assert not (jdir / "standby.ready").exists()
    rc, out, err = job.finish_job()
    assert rc == 0, out + err
    # what an uninterrupted run prints at its end (test_restart_p2p's
    # test_programs_pass_natively checks p2p.c's count natively)
    assert f"PASS ranks=2 iterations={ITERS} messages={p2p_messages(2, int(ITERS))}\n" in out, \
        out + err
    assert "FAIL" not in out, out + err
    assert re.search(r"^stasis: recovery 1 of \d+: .*; from a new stand-by(;|$)", err, re.M), err

"""The node agent (docs/coordinator.md, "Node agents"), on one host: one
agent for the job's ranks of the node, started by the first of them,
each rank on its board; a
rank killed between checkpoints is reported by its agent at once (STATUS
lost=, and the next checkpoint's one line names it without waiting for
it); the agent killed alone fails the checkpoint under way in one line
naming its node, the previous checkpoint staying the one a restart takes;
the agent killed between checkpoints, the next one fails naming its node.

Environment: STASIS_BIN, STASIS_BUILD."""
import os
import re
import signal
import subprocess
import time

import pytest

from split_common import launcher, program_fixture
from test_ckpt import MpiJob
from proc_harness import BIN  # noqa: E402 (test_ckpt puts it on the path)

ITERS = 60
SLEEP_MS = 100

hello = program_fixture("hello")


@pytest.fixture
def job(tmp_path):
    """the test's job, killed at its end whatever happened"""
    j = MpiJob(tmp_path)
    yield j
    j.kill()


def status(job):
    return job.stasis("status", "--dir", job.ck).stdout


def field(text, key):
    """The value of key in a STATUS line (the last one: ranks= is there
    twice, registered/size first)"""
    found = re.findall(rf"(?:^|\s){key}=(\S+)", text)
    return found[-1] if found else None


def pids(value):
    """rank:pid@host,... (or host:pid,...) -> [pid, ...]"""
    return [int(w.split(":")[1].split("@")[0]) for w in value.split(",")] if value != "-" else []


def until(what, timeout=10):
    end = time.time() + timeout
    while time.time() < end:
        got = what()
        if got:
            return got
        time.sleep(0.1)
    return what()


def test_one_agent_for_the_nodes_ranks_and_none_left_after_the_job(hello, job):
    job.env["STASIS_LOG"] = "info"
    job.start(*launcher("openmpi", 4), hello["openmpi"], 20, SLEEP_MS)
    job.lines_until(r"rank 0 iteration 2")
    s = status(job)
    assert field(s, "ranks") and len(pids(field(s, "ranks"))) == 4, s
    [agent] = pids(field(s, "nodes"))
    # every rank is on its agent's board (docs/coordinator.md, "Stopping a
    # node's ranks at once"): told CHECKPOINT there, not by a line each
    for pid in pids(field(s, "ranks")):
        assert "memfd:stasis-node-board" in open(f"/proc/{pid}/maps").read(), pid
    assert job.checkpoint() == "ckpt-000001"
    rc, out, err = job.finish_job()
    assert rc == 0 and "PASS ranks=4 iterations=20" in out, out + err
    assert re.search(r"checkpoint ckpt-000001: 4 ranks on 1 nodes, .* messages to node agents 3, "
                     r"from them 2\n", err), err
    # every rank said BYE: none reported dead; the agent ended with them
    assert "died" not in err, err
    assert until(lambda: not os.path.exists(f"/proc/{agent}"), 10), f"node agent {agent} still runs"


def test_a_rank_killed_between_checkpoints_is_reported_at_once(hello, job):
    """mpirun --enable-recovery lets rank 0 run on after rank 1 died; the
    agent tells the coordinator when rank 1's connection closes, and the
    checkpoint does not wait 30 s for it."""
    job.start("mpirun.openmpi", "--enable-recovery", "-np", "2", hello["openmpi"], ITERS, SLEEP_MS)
    job.lines_until(r"rank 0 iteration 2")
    ranks = field(status(job), "ranks")
    victim = pids(ranks)[[w.split(":")[0] for w in ranks.split(",")].index("1")]
    os.kill(victim, signal.SIGKILL)
    lost = until(lambda: field(status(job), "lost") not in (None, "-") and field(status(job), "lost"))
    assert lost and f"1:{victim}@" in lost, status(job)
    t0 = time.time()
    r = job.stasis("checkpoint", "--dir", job.ck, check=False)
    took = time.time() - t0
    job.kill()
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert re.fullmatch(rf"stasis: checkpoint: checkpoint failed: 1 of 2 ranks of the job are "
                        rf"registered; rank 1 \(pid {victim} on \S+\): died: "
                        rf"its connection to the node agent on \S+ closed without a goodbye "
                        rf"\(killed, or crashed\)\n", r.stderr), r.stderr
    assert took < 10, f"the checkpoint waited {took:.1f} s for a rank known dead"


def test_the_agent_killed_during_a_checkpoint_fails_it_naming_its_node(hello, job):
    """node.agent.ckpt:2:kill: the agent dies when the second checkpoint
    begins, before its ranks hear of it. That checkpoint fails in one line
    naming the node, the ranks run on (without checkpoints) to their end,
    and a restart takes the first."""
    job.env["STASIS_FAULT"] = "node.agent.ckpt:2:kill"
    job.start(*launcher("openmpi", 2), hello["openmpi"], ITERS, SLEEP_MS, "-", job.no_sleep)
    job.lines_until(r"rank 0 iteration 2")
    first = job.checkpoint()
    r = job.stasis("checkpoint", "--dir", job.ck, check=False)
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert re.fullmatch(r"stasis: checkpoint: checkpoint failed: the node agent on (\S+) \(pid \d+; "
                        r"ranks [01], [01]\) ended during the checkpoint\n", r.stderr), r.stderr
    assert re.search(r"node agent on " + re.escape(os.uname().nodename) + " ", r.stderr), r.stderr
    r = job.stasis("checkpoint", "--dir", job.ck, check=False)   # and between checkpoints
    assert re.fullmatch(r"stasis: checkpoint: checkpoint failed: 0 of 2 ranks of the job are "
                        r"registered; rank [01] \(pid \d+ on \S+\), [01] \(pid \d+ on \S+\): died with "
                        r"its node agent on \S+ \(pid \d+\), whose connection closed\n",
                        r.stderr), r.stderr
    job.events_over()   # the ranks run on, and the restart, to their end at once
    rc, out, err = job.finish_job()
    assert rc == 0 and f"PASS ranks=2 iterations={ITERS}" in out, out + err
    del job.env["STASIS_FAULT"]
    job.restart()
    rc, out, err = job.finish_job()
    assert rc == 0 and f"PASS ranks=2 iterations={ITERS}" in out, out + err
    ls = job.stasis("ls", "--dir", job.ck).stdout
    assert re.search(rf"{first}\s+(CURRENT|COMPLETE)\s", ls), ls
    assert re.search(r"ckpt-000002\s+FAILED", ls), ls


def test_a_rank_back_after_a_checkpoint_timed_out_parks_for_the_next(hello, job):
    """rank_timeout = 2: rank 1 stopped (SIGSTOP) over a whole checkpoint,
    which fails at the timeout naming its node; continued during the next
    one, it reads the first one's verdict from its socket before it looks
    at its board, and parks for the second (docs/coordinator.md, "Stopping
    a node's ranks at once"). Taking the old verdict for the new one's, it
    ran on while counted parked, and every later checkpoint failed."""
    job.env["STASIS_RANK_TIMEOUT"] = "2"
    job.start(*launcher("openmpi", 2), hello["openmpi"], ITERS, SLEEP_MS, "-", job.no_sleep)
    job.lines_until(r"rank 0 iteration 2")
    ranks = field(status(job), "ranks")
    victim = pids(ranks)[[w.split(":")[0] for w in ranks.split(",")].index("1")]
    os.kill(victim, signal.SIGSTOP)
    try:
        r = job.stasis("checkpoint", "--dir", job.ck, check=False)
        assert r.returncode == 1 and "did not answer within 2 s" in r.stderr, r.stderr
        second = subprocess.Popen([BIN, "checkpoint", "--dir", str(job.ck)], env=job.env,
                                  text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(0.5)
    finally:
        os.kill(victim, signal.SIGCONT)
    out, err = second.communicate(timeout=60)
    assert second.returncode == 0 and "ckpt-000002" in out, out + err
    assert job.checkpoint() == "ckpt-000003"
    job.events_over()
    rc, out, err = job.finish_job()
    assert rc == 0 and f"PASS ranks=2 iterations={ITERS}" in out, out + err

"""Transparent MPI jobs across the simulated cluster's nodes (issue 21,
docs/cluster.md): `stasis run` on head of `mpirun.openmpi --host ...` or
`mpiexec.mpich -hosts ...`, the ranks on the compute nodes, the
coordinator reached at head's address (coord_address auto), Open MPI's
ranks given the job's variables (mca_base_env_list); checkpoints, SIGKILL
of the whole job, restarts on the same nodes, on a set where a spare
replaces a node, and under the other MPI.

MPICH over UCX/TCP sometimes hangs in MPI_Finalize with 3 or more ranks
across nodes (docs/cluster.md): its jobs here have 2 ranks on 2 nodes.
Needs root."""
import pytest

from cluster_common import STASIS as STASIS_BIN
from cluster_common import ClusterJob, build_in_global, cluster, launcher  # noqa: F401

ITERS = 40
SLEEP_MS = 100
# the jobs whose events all come while they are stopped (checkpoint, kill,
# restart): the cycles take their first few iterations (0.3 s each for
# p2p.c), the rest is waiting for their end
CYCLE_ITERS = 25


@pytest.fixture(scope="module")
def progs(cluster):
    return build_in_global(["hello", "p2p", "coll", "objects"])


def cycles(job, launchers):
    """For each launcher: checkpoint once rank 0 made progress, kill the
    job, restart it with that launcher (None: the stored one)."""
    for words in launchers:
        before = int(job.lines_until(r"rank 0 iteration \d+").split()[-1])
        job.checkpoint()
        job.kill()
        job.restart(words)
        after = int(job.lines_until(r"rank 0 iteration \d+").split()[-1])
        assert after >= before


@pytest.mark.parametrize("name,want", [("p2p", "messages="), ("coll", "checks="),
                                       ("objects", "checks=")])
def test_openmpi_four_nodes_two_cycles_and_a_spare(cluster, progs, name, want, tmp_path):
    job = ClusterJob(cluster, tmp_path)
    try:
        job.start(launcher("openmpi", "n1:1,n2:1,n3:1,n4:1", 4), progs[(name, "openmpi")],
                  CYCLE_ITERS, SLEEP_MS, *([job.no_sleep] if name == "p2p" else []))
        # the second restart without n4, as after its loss: two ranks on n1
        cycles(job, [None, launcher("openmpi", "n1:2,n2:1,n3:1", 4)])
        job.events_over()
        rc, out, err = job.finish()
        assert rc == 0 and f"PASS ranks=4 iterations={CYCLE_ITERS} {want}" in out, out + err
    finally:
        job.kill()


def test_mpich_across_nodes_then_open_mpi_elsewhere(cluster, progs, tmp_path):
    job = ClusterJob(cluster, tmp_path)
    try:
        job.start(launcher("mpich", "n1,n2", 2), progs[("p2p", "mpich")], CYCLE_ITERS, SLEEP_MS,
                  job.no_sleep)
        cycles(job, [launcher("mpich", "n3,n4", 2), launcher("openmpi", "n2:1,n4:1", 2)])
        job.events_over()
        rc, out, err = job.finish()
        assert rc == 0 and f"PASS ranks=2 iterations={CYCLE_ITERS} messages=" in out, out + err
    finally:
        job.kill()


@pytest.mark.parametrize("lower,mpi,n", [("openmpi", "pmix", 4), ("mpich", "pmi2", 2)])
def test_srun_job_restarted_in_another_allocation(cluster, progs, lower, mpi, n, tmp_path):
    """stasis run -- srun inside an allocation; the allocation ends (the
    job killed with it); the job restarts in a new allocation on other
    nodes, with the stored srun command."""
    job = ClusterJob(cluster, tmp_path)
    try:
        job.start(f"srun --mpi={mpi} -n {n}", progs[("p2p", lower)], CYCLE_ITERS, SLEEP_MS,
                  job.no_sleep, alloc=f"-N2 -n{n} -w n1,n2")
        job.lines_until(r"rank 0 iteration 3")
        job.checkpoint()
        job.kill()
        job.events_over()
        job.restart(alloc=f"-N2 -n{n} -w n3,n4")
        rc, out, err = job.finish(done=r"PASS .*" if lower == "mpich" else None)
        assert rc in ((0, None) if lower == "mpich" else (0,)), out + err
        assert f"PASS ranks={n} iterations={CYCLE_ITERS} messages=" in out, out + err
        assert "rank 0 iteration 0\n" not in out, out   # from the checkpoint, not from scratch
    finally:
        job.kill()


def test_srun_without_a_pmi_is_refused_in_one_line(cluster, progs, tmp_path):
    job = ClusterJob(cluster, tmp_path)
    try:
        job.start("srun -n 2", progs[("hello", "openmpi")], 5, 10, alloc="-N2 -n2")
        rc, out, err = job.finish(timeout=60)
        lines = [ln for ln in err.splitlines() if ln.startswith("stasis:")]
        assert rc != 0 and lines == ["stasis: srun started the ranks without a process manager "
                                     "interface MPI can use: run srun --mpi=pmix (Open MPI) or "
                                     "--mpi=pmi2 (MPICH)"], err
    finally:
        job.kill()


def test_batch_script_signal_checkpoint_then_requeue_resumes(cluster, progs, tmp_path):
    """One batch script, `exec stasis run --resume -- srun ...`: a USR1 to the
    batch shell (what `sbatch --signal=B:USR1@T` sends before the time
    limit; here sent at once with `scancel -b -s USR1`) takes a checkpoint
    and the job runs on; `scontrol requeue` kills it and Slurm starts the
    script again, which restarts the job from that checkpoint."""
    import re
    import time
    job = ClusterJob(cluster, tmp_path)
    link = job.dir / "p2p"
    link.symlink_to(progs[("p2p", "openmpi")])
    out = job.dir / "slurm.out"
    script = job.dir / "job.sh"
    script.write_text(f"""#!/bin/bash
#SBATCH -J {job.dir.name} -N2 -n2 --requeue --open-mode=append -o {out}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 STASIS_LOG=info
exec {STASIS_BIN} run --resume --dir {job.ck} -- srun --mpi=pmix -n 2 {link} 30 100 {job.no_sleep}
""")

    def wait_for(pattern, timeout=90):
        end = time.time() + timeout
        while time.time() < end:
            text = out.read_text() if out.exists() else ""
            if re.search(pattern, text, re.M):
                return text
            time.sleep(0.2)
        raise AssertionError(f"no {pattern!r} in the job's output: {text[-3000:]}")

    try:
        jid = cluster.exec("head", f"cd {job.dir}; sbatch --parsable {script}").stdout.strip()
        wait_for(r"^rank 0 iteration 3$")
        cluster.exec("head", f"scancel -b -s USR1 {jid}")
        wait_for(r"^stasis: checkpoint ckpt-000001 taken on SIGUSR1$")
        cluster.exec("head", f"scontrol requeue {jid}")
        wait_for(r"restarts from ckpt-000001")
        job.events_over()
        text = wait_for(r"^PASS ranks=2 iterations=30 messages=", timeout=150)
        assert "run --resume: job p2p has no established checkpoint: starting it" in text, text
        assert "run --resume: job p2p restarts from ckpt-000001" in text, text
        second = text.split("restarts from ckpt-000001")[1]
        assert "rank 0 iteration 0\n" not in second, text   # not from scratch
    finally:
        cluster.exec("head", f"scancel -n {job.dir.name}", check=False)
        job.kill()


def test_staging_across_nodes_and_a_wiped_node(cluster, progs, tmp_path):
    """Staging on 4 nodes: images in each node's local tmpfs, then copied to
    the global directory (--wait global), compressed by each node's agent
    (stage_compress, forwarded to the ranks and agents on every node); the
    job killed; n2 killed with its local directory wiped and booted again;
    the restart on the same nodes reads three node-local copies and n2's
    rank's compressed global copy, and the coordinator reads none of the
    global copies ahead (docs/split.md, "Restart")."""
    import json
    import pathlib
    import re
    from cluster_common import BASE, sh
    job = ClusterJob(cluster, tmp_path)
    job.env = {"STASIS_STAGING": "on", "STASIS_LOCAL_DIR": f"{BASE}/local", "STASIS_LOG": "info",
               "STASIS_STAGE_COMPRESS": "zstd"}
    try:
        job.start(launcher("openmpi", "n1:1,n2:1,n3:1,n4:1", 4), progs[("p2p", "openmpi")], ITERS,
                  SLEEP_MS, job.no_sleep)
        job.lines_until(r"rank 0 iteration 3")
        r = job.stasis("checkpoint", "--dir", job.ck, "--wait", "global")
        name = r.stdout.strip()
        assert name == "ckpt-000001", r.stdout + r.stderr
        # this job's copies, in <local_dir>/<job>.<stage id>/<checkpoint>/
        # (docs/split.md): another job's ckpt-000001 may be there too
        job_name = pathlib.Path(progs[("p2p", "openmpi")]).name
        mine = f"{job_name}.{(job.ck / job_name / 'stage.id').read_text()}"
        on = {n: sorted(p.name for p in (cluster.local(n) / mine / name).glob("rank-*.img"))
              for n in cluster.nodes}
        assert sum(len(v) for v in on.values()) == 4 and all(len(v) == 1 for v in on.values()), on
        for img in sorted(job.ck.glob(f"*/{name}/rank-*.img")):
            m = json.loads(job.stasis("inspect", "--json", str(img)).stdout)
            assert m["compression"] == "zstd:1" and m["totals"]["zstd_chunks"] > 0, (img, m)
        job.kill()
        sh("kill-node", "n2", "--wipe")
        sh("start-node", "n2")
        sh("wait-state", "n2", "^idle", 60, timeout=90)
        job.events_over()
        job.restart()
        rc, out, err = job.finish()
        assert rc == 0 and f"PASS ranks=4 iterations={ITERS} messages=" in out, out + err
        n2 = on["n2"][0]
        rank = int(n2[5:10])
        assert re.search(rf"rank {rank} reads the global copy \S+/{name}/{n2}", err), err
        assert len(re.findall(r"reads its node-local copy", err)) == 3, err
        assert re.search(rf"restart: reading \d+ files and 0 rank images of {name} ahead "
                         r"\(staged", err), err
    finally:
        job.kill()


def test_node_agents_carry_the_checkpoint_and_report_their_loss(cluster, progs, tmp_path):
    """4 nodes x 2 ranks under Open MPI: the coordinator sends each
    checkpoint's 3 messages (CHECKPOINT, WRITE, RESUME) to each node's
    agent and gets 2 back (PARKED, DONE), whatever the ranks per node (its
    STASIS_LOG=info line: 12 and 8, not 24 and 16); n2's agent killed
    alone, STATUS shows n2's ranks lost and the next checkpoint fails in
    one line naming n2; the ranks run on to PASS. STATUS names each rank's
    node (the nodes of the launcher's --host). The job's name has a space
    (STASIS_JOB, as every stasis command of the job sees it)."""
    import os
    import re
    import signal
    import time
    job = ClusterJob(cluster, tmp_path)
    job.env = {"STASIS_LOG": "info", "STASIS_JOB": "nightly run"}
    try:
        job.start(launcher("openmpi", "n1:2,n2:2,n3:2,n4:2", 8), progs[("hello", "openmpi")],
                  ITERS, SLEEP_MS, "-", job.no_sleep)
        job.lines_until(r"rank 0 iteration 3")
        assert job.checkpoint() == "ckpt-000001"
        status = job.stasis("status", "--dir", job.ck).stdout
        assert " job=nightly run launcher=" in status and "ranks=8/8" in status and \
            all(f"@{n}" in status for n in cluster.nodes), status
        assert (job.ck / "nightly run" / "ckpt-000001").is_dir(), list(job.ck.iterdir())
        agents = dict(w.split(":") for w in re.search(r" nodes=(\S+)", status).group(1).split(","))
        assert sorted(agents) == cluster.nodes, status
        os.kill(int(agents["n2"]), signal.SIGKILL)   # no PID namespace: the host reaches it
        end = time.time() + 10
        while time.time() < end and " lost=-" in job.stasis("status", "--dir", job.ck).stdout:
            time.sleep(0.2)
        lost = re.search(r" lost=(\S+)", job.stasis("status", "--dir", job.ck).stdout).group(1)
        assert sorted(w.split("@")[1] for w in lost.split(",")) == ["n2", "n2"], lost
        r = job.stasis("checkpoint", "--dir", job.ck, check=False)
        assert r.returncode == 1 and re.fullmatch(
            rf"stasis: checkpoint: checkpoint failed: 6 of 8 ranks of the job are registered; "
            rf"rank \d \(pid \d+ on n2\), \d \(pid \d+ on n2\): died with its node agent on n2 "
            rf"\(pid {agents['n2']}\), whose connection closed\n", r.stderr), r.stderr
        job.events_over()
        rc, out, err = job.finish()
        assert rc == 0 and f"PASS ranks=8 iterations={ITERS} total=" in out, out + err
        assert re.search(r"checkpoint ckpt-000001: 8 ranks on 4 nodes, .*, messages to node "
                         r"agents 12, from them 8\n", err), err
    finally:
        job.kill()

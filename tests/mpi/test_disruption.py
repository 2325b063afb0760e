"""Disruption matrix (after FTI's): heatdis is killed between checkpoints,
then, before the restart, files it left are damaged or deleted. The restart
must either resume from the newest checkpoint (iteration 200), or from an
older one (150) when the newest has no verified copy of some rank's data,
or refuse clearly (non-zero exit, no grid, a message naming what is
missing) - and whatever it resumes from, end with the grid, bit for bit,
of a run that was never interrupted. Which of the three happens is derived
for every case and level below (EXPECTED), never left open.

The killed run takes checkpoints ckpt-000001..4 at iterations 50..200 and
dies at 230, once every checkpoint's upgrade has finished (heatdis waits for
them before the kill). The global tier keeps all four (checkpoint.json; the
images too at level global); each node's cache keeps the newest
cache_keep = 2 (ckpt-000003 at 150 and ckpt-000004 at 200), at every level,
since every checkpoint is written there first; so "older" means 150.

Each (MPI, level) job is killed once; every case restarts a copy of it.
Open MPI runs the whole matrix, MPICH (busy polling, slow on two cores) a
subset covering each kind of outcome."""
import json
import shutil

import pytest

from conftest import NODES, RANKS, Heatdis

JOB = "heatdis"                         # conftest.Heatdis's default job name
ROWS, COLS, ITERATIONS = 64, 256, 400
EVERY = 50
KILL_RANK, KILL_ITERATION = 2, 230      # nodeB's first rank, between checkpoints 200 and 250
GRID = ["--rows-per-rank", ROWS, "--cols", COLS, "--iterations", ITERATIONS]
GRID_BYTES = RANKS * ROWS * COLS * 8
KILL = ["--kill-rank", KILL_RANK, "--kill-iteration", KILL_ITERATION]
CACHE_KEEP = 2                          # the default of the key cache_keep

NEWEST, OLDER = "ckpt-000004", "ckpt-000003"
NEWEST_AT, OLDER_AT = 200, 150
LEVELS = ["single", "partner", "rs", "global"]
NODE_OF = [node for node, ranks in NODES for _ in range(ranks)]     # rank -> node


def rank_file(kind, rank):
    return f"{kind}-{rank:05d}.img"


# ---- where the killed job's files are ----

def cache_dir(job, node):
    """A node's cache: <local_dir>/<node>/<job>/."""
    return job.local_dir(node) / node / JOB


def global_dir(job):
    return job.global_dir / JOB


def tiers(job):
    """Every tier's job directory: the global one and each node's cache."""
    return [global_dir(job)] + [cache_dir(job, node) for node, _ in NODES]


def own_image(job, level, ckpt, rank):
    """Rank's own image of ckpt in its node's cache, where every level writes
    it first (level global copies it to the global tier as well)."""
    return cache_dir(job, NODE_OF[rank]) / ckpt / rank_file("rank", rank)


def info(job, ckpt):
    return json.loads((global_dir(job) / ckpt / "checkpoint.json").read_text())


def rs_groups(nodes, group_size):
    """docs/redundancy.md, group layout: q = max(ceil(ranks / g), most ranks
    on a node) groups; nodes sorted by rank count (biggest first, ties by
    lowest rank), each node's ranks in order, dealt like cards."""
    order = sorted(dict.fromkeys(nodes), key=lambda n: (-nodes.count(n), nodes.index(n)))
    q = max(-(-len(nodes) // group_size), max(nodes.count(n) for n in order))
    seq = [r for n in order for r in range(len(nodes)) if nodes[r] == n]
    groups = [sorted(seq[i::q]) for i in range(q)]
    return sorted(groups)


def group_of(job, ckpt, rank):
    i = info(job, ckpt)
    groups = rs_groups(i["nodes"], i["group_size"])
    assert groups == [[0, 2], [1, 3]], f"unexpected rs layout {groups} for {i}"
    return next(g for g in groups if rank in g)


def flip_middle_byte(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def delete(path):
    assert path.exists(), f"{path} should exist before the test removes it"
    path.unlink()


# ---- the damage of each case ----

def corrupt_own(job, level):
    """(a) rank 2's own image of the newest checkpoint, one byte flipped."""
    flip_middle_byte(own_image(job, level, NEWEST, KILL_RANK))


def delete_own(job, level):
    """(b) rank 2's own image of the newest checkpoint deleted."""
    delete(own_image(job, level, NEWEST, KILL_RANK))


def swapped_own(job, level):
    """(a') rank 2's own image of the newest checkpoint replaced by rank 3's
    (same node, intact checksums): a copy filed under the wrong name must be
    refused like a damaged one."""
    shutil.copyfile(own_image(job, level, NEWEST, 3), own_image(job, level, NEWEST, KILL_RANK))


def partner_pair(job, level):
    """(c) rank 2's image and the one partner copy of it, newest checkpoint."""
    delete(own_image(job, level, NEWEST, KILL_RANK))
    copies = [cache_dir(job, node) / NEWEST / rank_file("partner", KILL_RANK) for node, _ in NODES]
    copies = [c for c in copies if c.exists()]
    # partner rule: nodeB's first rank sends its copy to nodeA's first rank
    assert copies == [cache_dir(job, "nodeA") / NEWEST / rank_file("partner", KILL_RANK)], copies
    delete(copies[0])


def rs_group_images(job, level):
    """(d') the own image of every member of rank 2's rs group, newest
    checkpoint (the group per checkpoint.json's nodes and group_size: ranks
    0 and 2); their parity stays."""
    for rank in group_of(job, NEWEST, KILL_RANK):
        delete(own_image(job, level, NEWEST, rank))


def rs_group(job, level):
    """(d) the whole of rank 2's rs group in the newest checkpoint: every
    member's own image and the parity it holds (what losing both nodes'
    copies of that checkpoint would cost)."""
    rs_group_images(job, level)
    for rank in group_of(job, NEWEST, KILL_RANK):
        for path in cache_dir(job, NODE_OF[rank]).glob(f"{NEWEST}/{rank_file('rs', rank)}"):
            path.unlink()


def named_for_rank(job, level):
    """(e) every file named for rank 2 - rank-00002.img, partner-00002.img,
    rs-00002.img - in every checkpoint of every tier."""
    gone = []
    for tier in tiers(job):
        for kind in ("rank", "partner", "rs"):
            for path in tier.glob(f"ckpt-*/{rank_file(kind, KILL_RANK)}"):
                path.unlink()
                gone.append(path)
    assert gone


def every_copy(job, level):
    """(e') every file that holds or encodes rank 2's data, in every
    checkpoint of every tier: the above plus the rs parity of its group."""
    named_for_rank(job, level)
    for tier in tiers(job):
        for rank in (0, 2):     # group_of: rank 2's rs group
            for path in tier.glob(f"ckpt-*/{rank_file('rs', rank)}"):
                path.unlink()


def corrupt_info(job, level):
    """(f) the newest checkpoint.json, one byte in its middle flipped (into a
    non-ASCII byte: no longer valid JSON)."""
    flip_middle_byte(global_dir(job) / NEWEST / "checkpoint.json")


def delete_info(job, level):
    """(f) the newest checkpoint.json deleted."""
    delete(global_dir(job) / NEWEST / "checkpoint.json")


DAMAGE = {f.__name__: f for f in (corrupt_own, swapped_own, delete_own, partner_pair, rs_group, rs_group_images,
                                  named_for_rank,
                                  every_copy, corrupt_info, delete_info)}

# What each restart must do: the iteration it resumes at, or ("refuse",
# words its message must contain when it is visible).
MISSING_2 = "no copy of rank 2's data"
EXPECTED = {
    # A verified own copy in the cache is the only one single has: the
    # newest checkpoint fails for rank 2, every rank moves to 150. Partner
    # fetches partner-00002.img from nodeA, rs rebuilds rank 2 from rank 0's
    # image and rs-00000.img (a group of 2 with parity 1 tolerates one
    # loss), global takes rank 2's copy in the global tier.
    ("corrupt_own", "single"): OLDER_AT,
    ("corrupt_own", "partner"): NEWEST_AT,
    ("corrupt_own", "rs"): NEWEST_AT,
    ("corrupt_own", "global"): NEWEST_AT,
    ("swapped_own", "single"): OLDER_AT,
    ("swapped_own", "partner"): NEWEST_AT,
    ("swapped_own", "rs"): NEWEST_AT,
    ("swapped_own", "global"): NEWEST_AT,
    ("delete_own", "single"): OLDER_AT,
    ("delete_own", "partner"): NEWEST_AT,
    ("delete_own", "rs"): NEWEST_AT,
    ("delete_own", "global"): NEWEST_AT,
    # Only partner makes partner copies: with both gone, 150.
    ("partner_pair", "partner"): OLDER_AT,
    # Ranks 0 and 2 both lose their own image of 200 (and at rs their
    # parity): rs loses both members of a group that tolerates one -> 150;
    # partner still has both copies (0's on nodeB, 2's on nodeA) -> 200;
    # global has them in the global tier -> 200; single has nothing else.
    ("rs_group", "single"): OLDER_AT,
    ("rs_group", "partner"): NEWEST_AT,
    ("rs_group", "rs"): OLDER_AT,
    ("rs_group", "global"): NEWEST_AT,
    # Only the two images, the parity kept: a group of n = 2 with m = 1 has
    # k = 1 data segment per column, so each member's parity column is an
    # encoding of the other member's whole image: both are rebuilt -> 200.
    ("rs_group_images", "rs"): NEWEST_AT,
    # Files named for rank 2 everywhere: partner-00002.img was the only
    # copy, so partner refuses like single and global; rs loses one member
    # (its image and its parity), which the group tolerates: 200.
    ("named_for_rank", "single"): ("refuse", MISSING_2, "this node's cache"),
    ("named_for_rank", "partner"): ("refuse", MISSING_2, "no partner copy survives"),
    ("named_for_rank", "rs"): NEWEST_AT,
    ("named_for_rank", "global"): ("refuse", MISSING_2, "the global directory"),
    # Every copy of rank 2's data gone: nothing to resume from.
    ("every_copy", "single"): ("refuse", MISSING_2, "this node's cache"),
    ("every_copy", "partner"): ("refuse", MISSING_2, "no partner copy survives"),
    ("every_copy", "rs"): ("refuse", "rank 2", "rs 1+1: 2 of 2 blocks missing"),
    ("every_copy", "global"): ("refuse", MISSING_2, "the global directory"),
}
# Without checkpoint.json, rank 0 cannot read the newest checkpoint's level
# and layout: every level moves to 150.
for _level in LEVELS:
    EXPECTED[("corrupt_info", _level)] = OLDER_AT
    EXPECTED[("delete_info", _level)] = OLDER_AT

# MPICH: what libstasis's recovery sends over MPI (comm_mpi.c) with each
# outcome: a partner copy fetched, an rs rebuild (newest), every rank
# agreeing on the older checkpoint, a refusal. (A global copy is a file
# read, and the older checkpoint's agreement is the same after partner
# copies as after rs groups.)
MPICH_SUBSET = {("corrupt_own", "partner"), ("delete_own", "rs"), ("rs_group", "rs"),
                ("every_copy", "rs")}

CASES = [pytest.param(mpi, case, level, id=f"{mpi}-{case}-{level}")
         for mpi in ("openmpi", "mpich")
         for case in DAMAGE for level in LEVELS
         if (case, level) in EXPECTED and (mpi == "openmpi" or (case, level) in MPICH_SUBSET)]


# ---- jobs shared by the cases ----

@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """Memoized per module: the killed job of an (MPI, level) that every
    case of it copies."""
    made = {}

    def killed(mpi, level):
        if (mpi, level) not in made:
            job = Heatdis(tmp_path_factory.mktemp(f"killed-{mpi}-{level}"), mpi)
            r = job.killed(*GRID, "--checkpoint-every", EVERY, "--level", level, *KILL,
                           "--output", "out.bin")
            assert not (job.root / "out.bin").exists(), r
            established = [c for c, s in job.checkpoints()[("global", JOB)]
                           if s in ("COMPLETE", "CURRENT")]
            assert established == [f"ckpt-{i:06d}" for i in range(1, 5)], f"{established}\n{r}"
            for node, _ in NODES:
                cached = sorted(p.name for p in cache_dir(job, node).glob("ckpt-*"))
                want = [OLDER, NEWEST][-CACHE_KEEP:]
                assert cached == want, f"{node}: {cached}\n{r}"
            made[(mpi, level)] = job
        return made[(mpi, level)]

    return killed


def refusal_lines(r):
    """heatdis's report of the stasis_recover error, and rank 0's warnings
    (the launcher may tear the job down before they are forwarded)."""
    return [l for l in (r.err + r.out).splitlines()
            if "stasis_recover" in l or f"cannot restart from {NEWEST}" in l]


@pytest.mark.parametrize("mpi, case, level", CASES)
def test_disruption(shared, reference, tmp_path, mpi, case, level):
    grid, done = reference(mpi, GRID)
    assert len(grid) == GRID_BYTES
    template = shared(mpi, level)
    shutil.copytree(template.root, tmp_path / "job", symlinks=True)
    job = Heatdis(tmp_path / "job", mpi)
    DAMAGE[case](job, level)

    r = job.run(*GRID, "--checkpoint-every", EVERY, "--level", level, *KILL, "--output", "out.bin")
    want = EXPECTED[(case, level)]
    if isinstance(want, tuple):
        assert r.rc != 0 and r.done is None, f"restarted, expected a refusal: {r}"
        assert r.restarted_at is None, r
        assert not (job.root / "out.bin").exists(), r
        for line in refusal_lines(r):
            for words in want[1:]:
                assert words in line, f"the message does not name what is missing ({words!r}): {r}"
        return
    assert r.rc == 0 and r.done is not None, f"expected a restart at {want}: {r}"
    assert r.restarted_at == want, f"restarted at {r.restarted_at}, expected {want}: {r}"
    assert (job.root / "out.bin").read_bytes() == grid, f"grid differs from the uninterrupted run: {r}"
    assert r.done == done, r

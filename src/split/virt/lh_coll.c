/* lh_coll.c - no collective half done at a checkpoint (docs/split.md,
 * "Collectives at a checkpoint").
 *
 * Every rank counts the collectives it starts on each communicator
 * (lh_coll_enter, called by every collective's lower side before it
 * starts; blocking collectives run as their non-blocking form and a wait
 * that returns STS_AGAIN, so no thread is ever stuck inside one, and those
 * with no non-blocking form pass a counted entry barrier first). Once
 * every rank is parked, the ranks run rounds (lh_coll_round, on each
 * rank's parked thread at its checkpoint thread's bidding): each
 * communicator's target is the largest count among its members (every
 * rank gives its count of each of its communicators, by the key its
 * members agreed on when it was made, in one exchange over the lower
 * half's own communicator: no second communicator per communicator, so
 * the program can make as many as natively); a rank below a
 * target on some communicator runs on, starting collectives, until it is
 * at its targets everywhere, and parks at the next collective's entry (or
 * as soon as it started the one that brought it there). A round in which
 * no rank was behind ends it: every member of every communicator started
 * the same collectives, so the ones still outstanding complete in the
 * drain, where every rank drives MPI. A rank behind that does not get to
 * its targets in a while may wait for a message that a rank held at a
 * collective's entry sends after it: then every rank runs for a while and
 * the held ones start that collective (a release, docs/protocol.md), which
 * only raises the targets. Not there by the deadline fails the checkpoint
 * on every rank, which all run on.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/err.h"
#include "common/fault.h"
#include "lh.h"
#include "lh_ledger.h"

/* MPICH's MPI_STATUSES_IGNORE is the address 1: gcc sees an access to it */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif

static int ensure(uint32_t comm)
{
	uint32_t cap = lh_lg->coll_cap ? lh_lg->coll_cap : 64;
	uint64_t *a, *b, *c, *d;

	if (comm < lh_lg->coll_cap)
		return 0;
	/* no communicator has that number (the upper half's for a value that
	 * is no handle: the real call refuses it), and cap would overflow */
	if (comm >= lh_lg->tables[STS_COMM].next)
		return -EINVAL;
	while (cap <= comm)
		cap *= 2;
	a = lg_realloc(lh_lg->coll_seq, cap * sizeof(*a));
	if (a)
		lh_lg->coll_seq = a;
	b = a ? lg_realloc(lh_lg->coll_target, cap * sizeof(*b)) : NULL;
	if (b)
		lh_lg->coll_target = b;
	c = b ? lg_realloc(lh_lg->key, cap * sizeof(*c)) : NULL;
	if (c)
		lh_lg->key = c;
	d = c ? lg_realloc(lh_lg->retired, cap * sizeof(*d)) : NULL;
	if (!d)
		return -ENOMEM;
	lh_lg->retired = d;
	memset(d + lh_lg->coll_cap, 0, (cap - lh_lg->coll_cap) * sizeof(*d));
	memset(a + lh_lg->coll_cap, 0, (cap - lh_lg->coll_cap) * sizeof(*a));
	memset(b + lh_lg->coll_cap, 0, (cap - lh_lg->coll_cap) * sizeof(*b));
	memset(c + lh_lg->coll_cap, 0, (cap - lh_lg->coll_cap) * sizeof(*c));
	lh_lg->coll_cap = cap;
	return 0;
}

static int behind(void)
{
	for (uint32_t c = 0; c < lh_lg->coll_cap; c++)
		if (lh_lg->coll_seq[c] < lh_lg->coll_target[c])
			return 1;
	return 0;
}

int lh_coll_behind(void)
{
	return behind();
}

static int hold(uint32_t comm)
{
	lh_lg->held = comm + 1;
	lh_info->ckpt_pending = 1;   /* park before starting it */
	return STS_AGAIN;
}

/* At SERIALIZED and MULTIPLE each thread of the rank may wait in a
 * collective of its own communicator, and one rank's threads are not in
 * one order: a thread goes on only where its communicator is behind, and
 * is held alone at the entry of any other (it parks, the rank's other
 * threads run on); a release lets each held thread start the collective
 * it is held at. The rank is at its targets when no communicator is
 * behind (run_until_parked, lh_agent.c), whichever threads got it there. */
static int thread_enter(uint32_t comm)
{
	struct sts_tls *me = lh_me;

	switch (lh_lg->advancing) {
	case LH_RUN_ADVANCE:
		if (lh_lg->coll_seq[comm] >= lh_lg->coll_target[comm]) {
			me->held = comm + 1;
			lh_hold_me();
			return STS_AGAIN;
		}
		break;
	case LH_RUN_RELEASE:
		if (me->held != comm + 1 && lh_lg->coll_seq[comm] >= lh_lg->coll_target[comm]) {
			me->held = comm + 1;
			lh_hold_me();
			return STS_AGAIN;
		}
		break;
	}
	me->held = 0;
	lh_lg->coll_seq[comm]++;
	return 0;
}

int lh_coll_enter(uint32_t comm)
{
	if (ensure(comm) != 0)
		return 0;   /* not counted: a later checkpoint may fail, never be wrong */
	if (lh_info->ntls > 1)
		return thread_enter(comm);
	switch (lh_lg->advancing) {
	case LH_RUN_ADVANCE:
		/* a checkpoint runs and this rank was let go to reach its targets */
		if (!behind())
			return hold(comm);
		lh_lg->coll_seq[comm]++;
		lh_lg->held = 0;
		if (!behind())
			lh_info->ckpt_pending = 1;   /* there now: park once it started */
		return 0;
	case LH_RUN_RELEASE:
		/* released: it starts the collective it was held at (raising the
		 * target for the others), or one it is behind on, and runs on
		 * until the next entry holds it or the release's time is up */
		if (lh_lg->held != comm + 1 && !behind())
			return hold(comm);
		lh_lg->held = 0;
		break;
	}
	lh_lg->coll_seq[comm]++;
	return 0;
}

int lh_coll_passed(uint32_t comm)
{
	if (!lh_lg->advancing)
		return 0;   /* no checkpoint, or not yet parked: every member goes in */
	if (lh_lg->go_blocking == comm + 1) {
		/* every member is held past the barrier: all go in now, then park */
		lh_lg->go_blocking = lh_lg->held_blocking = 0;
		lh_hold_me();
		return 0;
	}
	/* the others may be stopped: held here until they all are */
	lh_lg->held_blocking = comm + 1;
	lh_lg->held = 0;
	lh_hold_me();
	return STS_AGAIN;
}

/* Communicators the program holds whose key could not be agreed (an MPI
 * error, or no memory for its count): their collectives are not counted,
 * so a checkpoint is refused while the program holds one (refuse()), never
 * taken with one of them half done. uncounted[c]: 1 + the MPI error class;
 * uncounted_lost: ones with no room in it. Lower-half memory: a restart
 * agrees on every key again. */
static uint8_t *uncounted;
static uint32_t uncounted_cap, uncounted_live, uncounted_lost;

static void mark_uncounted(uint32_t comm, int ret)
{
	int cls = MPI_ERR_OTHER;

	if (comm >= uncounted_cap) {
		uint32_t cap = uncounted_cap ? uncounted_cap : 64;
		void *p;

		while (cap <= comm)
			cap *= 2;
		p = realloc(uncounted, cap);
		if (!p) {
			uncounted_lost++;
			return;
		}
		uncounted = p;
		memset(uncounted + uncounted_cap, 0, cap - uncounted_cap);
		uncounted_cap = cap;
	}
	MPI_Error_class(ret, &cls);
	if (!uncounted[comm])
		uncounted_live++;
	uncounted[comm] = (uint8_t)(cls < 254 ? cls + 1 : 255);
}

/* Each communicator's count at the end of the last checkpoint's rounds
 * (LH_ROUND_DONE, when every member had the same), or since it was made
 * (0 on every member): a rank tells the others in a round only of the
 * communicators whose count moved since (and of those it retired or is
 * held at a blocking collective of), so a round's exchange costs what
 * the program did since, not world size times communicators. A member
 * that said nothing of one is at that base, which no member's count is
 * below: the largest count said is the target. Lower-half memory: a
 * restarted or moved rank knows no base and tells of every one. */
static uint64_t *base;
static uint8_t *base_ok;
static uint32_t base_cap;

static int base_known(uint32_t c)
{
	return c < base_cap && base_ok[c] && base[c] == lh_lg->coll_seq[c];
}

static void base_set(uint32_t c, int ok)
{
	if (c >= base_cap) {
		uint32_t cap = base_cap ? base_cap : 64;
		void *a, *b;

		while (cap <= c)
			cap *= 2;
		a = realloc(base, cap * sizeof(*base));
		if (a)
			base = a;
		b = a ? realloc(base_ok, cap) : NULL;
		if (!b)
			return;   /* unknown: told of in every round */
		base_ok = b;
		memset(base_ok + base_cap, 0, cap - base_cap);
		base_cap = cap;
	}
	base[c] = lh_lg->coll_seq[c];
	base_ok[c] = (uint8_t)ok;
}

/* A communicator's key names it in the rounds, the same on every member
 * and on no other communicator while it lives: its first rank's world
 * rank and the creation number that rank gave it (lh_handles.c; kept in
 * the ledger, so a restart agrees on the same key). MPI_COMM_WORLD's is
 * KEY_WORLD. */
#define KEY_WORLD 1
#define KEY_SEQ_BITS 40

static uint64_t own_key(uint32_t comm)
{
	return ((uint64_t)(uint32_t)(lh_lg->world_rank + 1) << KEY_SEQ_BITS) |
	       (lh_lg->tables[STS_COMM].slot[comm].seq & ((UINT64_C(1) << KEY_SEQ_BITS) - 1));
}

/* The key of c, agreed by its members in its first collective: rank 0's
 * (MPI_Bcast); an intercommunicator's, the larger of its two groups'
 * first ranks' (each group's MPI_Allreduce result is the other group's:
 * the first brings the other's key, the second one's own back) */
static int agree_key(MPI_Comm c, uint32_t comm, uint64_t *key)
{
	int inter = 0, rank = 0, ret;
	uint64_t k, other = 0;

	MPI_Comm_test_inter(c, &inter);
	MPI_Comm_rank(c, &rank);
	k = rank == 0 ? own_key(comm) : 0;
	if (!inter) {
		ret = MPI_Bcast(&k, 1, MPI_UINT64_T, 0, c);
		*key = k;
		return ret;
	}
	ret = MPI_Allreduce(&k, &other, 1, MPI_UINT64_T, MPI_MAX, c);
	if (ret == MPI_SUCCESS)
		ret = MPI_Allreduce(&other, &k, 1, MPI_UINT64_T, MPI_MAX, c);
	*key = k > other ? k : other;
	return ret;
}

void lh_coll_comm_made(uint32_t comm)
{
	MPI_Comm c = (MPI_Comm)(LH_HCAST)lh_real(STS_COMM, comm);
	uint64_t key = 0;
	unsigned depth;
	int ret;

	if (ensure(comm) != 0) {
		mark_uncounted(comm, MPI_ERR_NO_MEM);
		return;
	}
	lh_lg->coll_seq[comm] = lh_lg->coll_target[comm] = 0;
	/* without the lock: the member another rank waits for may be another
	 * thread of this one (lh_lock_out), which may also grow the arrays */
	depth = lh_lock_out();
	ret = FAULT(SPLIT_COLL_DUP) != 0 ? MPI_ERR_OTHER : agree_key(c, comm, &key);
	lh_lock_back(depth);
	if (ret != MPI_SUCCESS) {
		mark_uncounted(comm, ret);
		return;
	}
	lh_lg->key[comm] = key;
	base_set(comm, 1);
}

int lh_coll_comm_retire(uint32_t comm)
{
	if (comm >= lh_lg->coll_cap || !lh_lg->key[comm])
		return 0;
	lh_lg->retired[comm] = 1;
	return 1;
}

int lh_coll_retired(uint32_t comm)
{
	return comm < lh_lg->coll_cap && lh_lg->retired[comm];
}

/* Farewells: as the program frees a counted communicator, this member
 * posts an MPI_Ibarrier on it and keeps the real one until it completes
 * (Open MPI's libnbc crashes in its progress when the communicator of a
 * pending barrier is freed). It completes once every member freed it:
 * none holds it any more, so the real one is freed and its retired record
 * goes then, at the next free or at MPI_Finalize, not at
 * the next checkpoint's round (before, a program that made and freed
 * communicators in a loop kept a record of each until then, and its
 * ledger and images grew without bound). A round may let go of one first
 * (another member's farewell completed, not this one's yet): the creation
 * number tells a record from a later one in the same slot. Lower-half
 * memory: a restart posts them again on the retired communicators it
 * makes (lh_state_rebuild). */
struct farewell {
	uint32_t comm;
	uint64_t seq;
	MPI_Comm real;
};
static struct farewell *bye;
static MPI_Request *bye_req;
static int *bye_done, nbye, bye_cap;

static void farewells_test(void)
{
	int done = 0, kept = 0;

	if (!nbye || MPI_Testsome(nbye, bye_req, &done, bye_done, MPI_STATUSES_IGNORE) !=
			     MPI_SUCCESS || done == MPI_UNDEFINED)
		return;
	for (int i = 0; i < done; i++) {
		struct farewell *f = &bye[bye_done[i]];
		const struct lh_slot *s = lh_slot_of(STS_COMM, f->comm);

		MPI_Comm_free(&f->real);
		if (s && s->seq == f->seq && lh_coll_retired(f->comm))
			lh_release_now(STS_COMM, f->comm);
	}
	for (int i = 0; i < nbye; i++) {
		if (bye_req[i] == MPI_REQUEST_NULL)
			continue;
		bye[kept] = bye[i];
		bye_req[kept++] = bye_req[i];
	}
	nbye = kept;
}

static int farewells_grow(void)
{
	int cap = bye_cap ? bye_cap * 2 : 64;
	void *a, *b, *c;

	if (nbye < bye_cap)
		return 0;
	a = realloc(bye, (size_t)cap * sizeof(*bye));
	if (a)
		bye = a;
	b = a ? realloc(bye_req, (size_t)cap * sizeof(*bye_req)) : NULL;
	if (b)
		bye_req = b;
	c = b ? realloc(bye_done, (size_t)cap * sizeof(*bye_done)) : NULL;
	if (!c)
		return -1;
	bye_done = c;
	bye_cap = cap;
	return 0;
}

int lh_coll_comm_freeing(uint32_t comm, MPI_Comm *real)
{
	farewells_test();
	/* (no memory: the record stays until a checkpoint's round, as before) */
	if (comm < STS_FIRST_USER || comm >= lh_lg->coll_cap || !lh_lg->key[comm] ||
	    farewells_grow() != 0 || MPI_Ibarrier(*real, &bye_req[nbye]) != MPI_SUCCESS)
		return 0;
	bye[nbye++] = (struct farewell){ comm, lh_lg->tables[STS_COMM].slot[comm].seq, *real };
	*real = MPI_COMM_NULL;
	return 1;
}

void lh_coll_farewells_end(void)
{
	struct timespec ms = { 0, 1000000 };

	for (int i = 0; nbye && i < 10000; i++) {   /* 10 s: a member died? */
		farewells_test();
		if (nbye)
			nanosleep(&ms, NULL);
	}
}

void lh_coll_comm_gone(uint32_t comm)
{
	if (comm < uncounted_cap && uncounted[comm]) {
		uncounted[comm] = 0;
		uncounted_live--;
	}
	if (comm >= lh_lg->coll_cap)
		return;
	lh_lg->key[comm] = 0;
	lh_lg->coll_seq[comm] = lh_lg->coll_target[comm] = lh_lg->retired[comm] = 0;
	if (comm < base_cap)
		base_ok[comm] = 0;
}

static uint64_t key_of(uint32_t c)
{
	return c == 1 ? KEY_WORLD : lh_lg->key[c];
}

/* What a rank says of one communicator in a round: its key, its count,
 * whether it still holds it, and whether it is not held past the entry
 * barrier of a blocking collective on it. Per communicator, the round's
 * answer (io): the largest count said (the target, unless this rank's own
 * is larger), whether some member said it still holds it, how many said
 * they are held past the barrier (all of its members: they go in
 * together), and how many said they retired it. */
struct tally {
	uint64_t key, count, held, open;
};
static uint64_t (*io)[4];
static uint32_t io_cap;

static int by_key(const void *a, const void *b)
{
	uint64_t x = ((const struct tally *)a)->key, y = ((const struct tally *)b)->key;

	return x < y ? -1 : x > y;
}

/* the answer for key out of every rank's tallies, sorted by key */
static void answer(const struct tally *all, size_t n, uint64_t key, uint64_t out[4])
{
	size_t lo = 0, hi = n;

	while (lo < hi) {   /* the first tally with this key */
		size_t mid = lo + (hi - lo) / 2;

		if (all[mid].key < key)
			lo = mid + 1;
		else
			hi = mid;
	}
	out[0] = out[1] = out[2] = out[3] = 0;
	for (; lo < n && all[lo].key == key; lo++) {
		out[0] = all[lo].count > out[0] ? all[lo].count : out[0];
		out[1] |= all[lo].held;
		out[2] += !all[lo].open;
		out[3] += !all[lo].held;
	}
}

/* A rank that cannot take part in a round (no memory for its tallies, or
 * STASIS_FAULT=split.coll.round) says so in a collective every rank makes,
 * so that all skip the rest of the round together and fail the checkpoint
 * in the same line, naming it and why (before, it skipped the exchange
 * and left the others waiting in MPI_Allgather for good). */
struct round_fault {
	int rank;               /* the world rank that failed, or -1 */
	char why[156];
};
static struct round_fault failure;

static int fail_here(const char *why)
{
	failure.rank = lh_lg->world_rank;
	snprintf(failure.why, sizeof(failure.why), "%s", why);
	return 1;
}

/* collective over ctl: whether any rank failed (mine: this one), and if
 * so the first one's rank and cause in failure on every rank. v[1..]: more
 * flags to combine (MPI_MAX) in the same reduction. */
static int any_failed(MPI_Comm ctl, int mine, int *v, int nv)
{
	int me = 0, size = 0, in[4] = { 0 }, out[4] = { 0 };

	MPI_Comm_rank(ctl, &me);
	MPI_Comm_size(ctl, &size);
	in[0] = mine ? size - me : 0;   /* the largest: the first that failed */
	for (int i = 0; i < nv && i < 3; i++)
		in[i + 1] = v[i];
	if (MPI_Allreduce(in, out, 1 + nv, MPI_INT, MPI_MAX, ctl) != MPI_SUCCESS) {
		fail_here("MPI_Allreduce failed");
		return 1;
	}
	for (int i = 0; i < nv && i < 3; i++)
		v[i] = out[i + 1];
	if (!out[0])
		return 0;
	if (MPI_Bcast(&failure, (int)sizeof(failure), MPI_BYTE, size - out[0], ctl) != MPI_SUCCESS)
		fail_here("MPI_Bcast failed");
	return 1;
}

/* this rank's tallies: one per communicator it belongs to whose count
 * moved from its base (or with none), retired ones (a member that freed
 * one gives its final count: the others may be behind on it) and the one
 * it is held at a blocking collective of; NULL when there is no memory
 * for them */
static struct tally *tallies(int *n)
{
	struct tally *mine;
	const char *only = getenv("STASIS_FAULT_RANK");

	if (io_cap < lh_lg->coll_cap) {   /* a rank that ran on made communicators */
		void *p = realloc(io, lh_lg->coll_cap * sizeof(*io));

		if (p) {
			io = p;
			io_cap = lh_lg->coll_cap;
		}
	}
	if ((!only || atoi(only) == lh_lg->world_rank) && FAULT(SPLIT_COLL_ROUND))
		return NULL;
	mine = malloc(lh_lg->coll_cap * sizeof(*mine));
	if (!mine || io_cap < lh_lg->coll_cap) {
		free(mine);
		return NULL;
	}
	*n = 0;
	for (uint32_t c = 1; c < lh_lg->coll_cap; c++) {
		if (c == 2 || (c > 2 && !lh_lg->key[c]))
			continue;
		if (base_known(c) && !lh_lg->retired[c] && lh_lg->held_blocking != c + 1)
			continue;   /* at the base every member shares */
		mine[(*n)++] = (struct tally){ key_of(c), lh_lg->coll_seq[c], !lh_lg->retired[c],
					       lh_lg->held_blocking != c + 1 };
	}
	return mine;
}

/* Whether key is among keys[n] (sorted) */
static int has_key(const uint64_t *keys, size_t n, uint64_t key)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (keys[mid] == key)
			return 1;
		if (keys[mid] < key)
			lo = mid + 1;
		else
			hi = mid;
	}
	return 0;
}

static int by_value(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Every rank's n values of its own gathered over ctl into *all (*total
 * of them), counts and displs of size ranks: 0, or 1 when some rank
 * failed (failure says which and why, on every rank) */
static int gather(MPI_Comm ctl, const void *mine, int n, int *counts, int *displs, void **all,
		  int *total)
{
	int size = 0;

	MPI_Comm_size(ctl, &size);
	*total = 0;
	if (MPI_Allgather(&n, 1, MPI_INT, counts, 1, MPI_INT, ctl) != MPI_SUCCESS)
		return fail_here("MPI_Allgather failed");
	for (int r = 0; r < size; r++) {
		displs[r] = *total;
		*total += counts[r];
	}
	*all = malloc(((size_t)*total + 4) * sizeof(uint64_t));
	if (any_failed(ctl, !*all ? fail_here("no memory for the others' tallies") : 0, NULL, 0))
		return 1;
	if (MPI_Allgatherv(mine, n, MPI_UINT64_T, *all, counts, displs, MPI_UINT64_T, ctl) !=
	    MPI_SUCCESS)
		return fail_here("MPI_Allgatherv failed");
	return 0;
}

/* The targets of every communicator this rank belongs to, from the
 * tallies every rank gathered over ctl (base_known: the ones that moved).
 * A retired one no member holds any more goes on every member after the
 * round (all saw the same answer): a member that still holds one another
 * retired says so in a second exchange, when it did not in the first
 * (usually none: one MPI_Allreduce says so). Collective over ctl: 0, 1
 * when some rank failed (failure says which and why, on every rank), or
 * -1 when the program holds a communicator whose collectives some rank
 * cannot count (refuse()). */
static int targets(MPI_Comm ctl)
{
	int size = 0, n = 0, total = 0, nheld = 0, *counts = NULL, *displs = NULL, ret = 1, v[1];
	struct tally *mine, *all = NULL;
	uint64_t *held = NULL, *holders = NULL;

	MPI_Comm_size(ctl, &size);
	failure.rank = -1;
	mine = ensure(2) == 0 ? tallies(&n) : NULL;
	counts = calloc((size_t)size, sizeof(*counts));
	displs = calloc((size_t)size, sizeof(*displs));
	held = malloc(lh_lg->coll_cap * sizeof(*held));
	v[0] = uncounted_live + uncounted_lost > 0;
	if (any_failed(ctl, !mine || !counts || !displs || !held ?
			    fail_here("no memory for its tallies") : 0, v, 1))
		goto out_free;
	if (v[0]) {
		ret = -1;
		goto out_free;
	}
	if (lh_log_on(LOG_DEBUG))
		lh_log(LOG_DEBUG, "rank %d: a round of collective counts: %d of its communicators "
		       "moved", lh_lg->world_rank, n);
	if (gather(ctl, mine, n * 4, counts, displs, (void **)&all, &total))
		goto out_free;
	qsort(all, (size_t)total / 4, sizeof(*all), by_key);
	for (uint32_t c = 1; c < lh_lg->coll_cap; c++) {
		if (c == 2 || (c != 1 && !lh_lg->key[c]))
			continue;
		answer(all, (size_t)total / 4, key_of(c), io[c]);
		lh_lg->coll_target[c] = io[c][0] > lh_lg->coll_seq[c] ? io[c][0] : lh_lg->coll_seq[c];
		/* held, not said, and some member said it retired it */
		if (c > 2 && !lh_lg->retired[c] && !io[c][1] && io[c][3])
			held[nheld++] = lh_lg->key[c];
	}
	v[0] = nheld > 0;
	if (any_failed(ctl, 0, v, 1))
		goto out_free;
	nheld = v[0] ? nheld : 0;
	if (v[0] && gather(ctl, held, nheld, counts, displs, (void **)&holders, &total))
		goto out_free;
	if (!v[0])
		total = 0;
	if (total)
		qsort(holders, (size_t)total, sizeof(*holders), by_value);
	for (uint32_t c = STS_FIRST_USER; c < lh_lg->coll_cap; c++)
		if (lh_lg->retired[c] && !io[c][1] && !has_key(holders, (size_t)total, lh_lg->key[c]))
			lh_release_now(STS_COMM, c);
	ret = 0;
out_free:
	free(holders);
	free(held);
	free(all);
	free(displs);
	free(counts);
	free(mine);
	return ret;
}

/* this rank is held past the entry barrier of a blocking collective, and
 * so is every member of its communicator: they go in together */
static int members_of(uint32_t c)
{
	MPI_Comm r = (MPI_Comm)(LH_HCAST)lh_real(STS_COMM, c);
	int n = 0, inter = 0, remote = 0;

	MPI_Comm_size(r, &n);
	MPI_Comm_test_inter(r, &inter);
	if (inter)
		MPI_Comm_remote_size(r, &remote);
	return n + remote;
}

static int go_together(void)
{
	uint32_t c = lh_lg->held_blocking - 1;

	if (lh_lg->held_blocking == 0 || lh_lg->held_blocking == LH_BLOCKING_NONE ||
	    c >= lh_lg->coll_cap || c >= io_cap || (c != 1 && !lh_lg->key[c]) ||
	    io[c][2] < (uint64_t)members_of(c))
		return 0;   /* (no key: not in the round, io[c] is not this one's) */
	lh_lg->go_blocking = lh_lg->held_blocking;
	return 1;
}

/* communicator c as the program knows it: its size and members, as world
 * ranks ("2 ranks: world ranks 0, 1"; the first 8, then "..."), not the
 * lower half's number for it */
static void members(uint32_t c, char *out, size_t len)
{
	int size = 0, n;
	size_t at;

	MPI_Comm_size((MPI_Comm)(LH_HCAST)lh_real(STS_COMM, c), &size);
	n = snprintf(out, len, "%d rank%s: world rank%s", size, size == 1 ? "" : "s",
		     size == 1 ? "" : "s");
	at = n > 0 && (size_t)n < len ? (size_t)n : len - 1;
	for (int r = 0; r < size && r <= 8 && at < len - 1; r++) {
		n = r == 8 ? snprintf(out + at, len - at, ", ...")
			   : snprintf(out + at, len - at, "%s %d", r ? "," : "", lh_world_of(c, r));
		at += n > 0 && (size_t)n < len - at ? (size_t)n : len - 1 - at;
	}
}

/* Some rank holds a communicator whose collectives it does not count
 * (targets() found it, on every rank: every rank skips the exchange,
 * whose answers would miss it): the checkpoint's error. */
static int refuse(void)
{
	char what[MPI_MAX_ERROR_STRING], who[128];
	int len = 0;

	if (uncounted_live + uncounted_lost == 0)
		return err_set(-ENOTSUP, "rank %d: another rank holds a communicator whose "
			       "collectives it cannot count", lh_lg->world_rank);
	for (uint32_t c = STS_FIRST_USER; c < uncounted_cap; c++) {
		if (!uncounted[c])
			continue;
		if (MPI_Error_string(uncounted[c] - 1, what, &len) != MPI_SUCCESS)
			snprintf(what, sizeof(what), "MPI error class %d", uncounted[c] - 1);
		members(c, who, sizeof(who));
		return err_set(-ENOTSUP, "rank %d: no checkpoint while the program holds a "
			       "communicator of %s whose collectives the lower half cannot "
			       "count (%s)", lh_lg->world_rank, who, what);
	}
	return err_set(-ENOTSUP, "rank %d: no checkpoint while the program holds a communicator "
		       "whose collectives the lower half cannot count (out of memory)",
		       lh_lg->world_rank);
}

int lh_coll_round(MPI_Comm ctl, int *failed, int stuck)
{
	int mine[3], all[3], go, exchanged = targets(ctl), refused = 0;

	if (exchanged < 0)
		refused = refuse();
	if (exchanged)
		*failed = 1;
	go = !*failed && go_together();
	mine[0] = !*failed && (go || behind());
	mine[1] = *failed;
	/* held at a blocking collective while behind: it cannot get there
	 * before the others come to that collective too (a release) */
	mine[2] = stuck || (!*failed && lh_lg->held_blocking && !go && behind());
	if (MPI_Allreduce(mine, all, 3, MPI_INT, MPI_MAX, ctl) != MPI_SUCCESS)
		all[1] = 1;
	if (!all[1] && all[0])
		return all[2] ? LH_ROUND_RELEASE : mine[0] ? LH_ROUND_ADVANCE : LH_ROUND_AGAIN;
	lh_lg->held = lh_lg->held_blocking = lh_lg->go_blocking = 0;
	memset(lh_lg->coll_target, 0, lh_lg->coll_cap * sizeof(uint64_t));
	for (uint32_t c = 1; !all[1] && c < lh_lg->coll_cap; c++)
		if (c != 2 && (c == 1 || lh_lg->key[c]))
			base_set(c, 1);   /* every member at the same count */
	if (refused)
		return refused;
	if (exchanged > 0)
		return err_set(-EIO, "rank %d: rank %d failed in a round of the collective "
			       "counts: %s", lh_lg->world_rank, failure.rank, failure.why);
	if (all[1])
		return err_set(-ETIMEDOUT, "rank %d: the ranks did not reach a common point "
			       "between collectives within %d s (a rank behind waits for "
			       "a rank that is stopped?)", lh_lg->world_rank,
			       LH_QUIESCE_TIMEOUT_MS / 1000);
	return LH_ROUND_DONE;
}

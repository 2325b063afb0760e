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
 * communicator's target is the largest count among its members (an
 * MPI_Iallreduce on the lower half's duplicate of it); a rank below a
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
	c = b ? lg_realloc(lh_lg->shadow, cap * sizeof(*c)) : NULL;
	if (c)
		lh_lg->shadow = c;
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

int lh_coll_blocking(uint32_t comm)
{
	if (comm == 2)   /* MPI_COMM_SELF's never waits */
		return 0;
	if (comm != LH_BLOCKING_NONE)
		return lh_coll_entry(comm);
	if (!lh_lg->advancing)
		return 0;
	/* one on a file while the other members are stopped: inside, this
	 * thread would wait for them with no way out to park */
	lh_lg->held_blocking = LH_BLOCKING_NONE;
	lh_lg->held = 0;
	lh_hold_me();
	return STS_AGAIN;
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

static int post_release(uint32_t comm);

/* Communicators the program holds whose duplicate could not be made (MPI
 * out of context ids, or of memory): their collectives are not counted, so
 * a checkpoint is refused while the program holds one (refuse()), never
 * taken with one of them half done. uncounted[c]: 1 + the MPI error class;
 * uncounted_lost: ones with no room in it. Lower-half memory: a restart
 * makes every duplicate again. */
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

void lh_coll_comm_made(uint32_t comm)
{
	MPI_Comm sh = MPI_COMM_NULL;

	if (ensure(comm) != 0) {
		mark_uncounted(comm, MPI_ERR_NO_MEM);
		return;
	}
	lh_coll_poll();   /* the context ids of those every member freed come back */
	MPI_Comm c = (MPI_Comm)(LH_HCAST)lh_real(STS_COMM, comm);
	int inter = 0, ret;
	unsigned depth;

	lh_lg->coll_seq[comm] = lh_lg->coll_target[comm] = 0;
	/* an intercommunicator's counts are reduced over both groups: its
	 * duplicate is the merged intracommunicator. Made without the lock:
	 * the member another rank waits for may be another thread of this one
	 * (lh_lock_out), which may also grow the arrays */
	MPI_Comm_test_inter(c, &inter);
	depth = lh_lock_out();
	if (FAULT(SPLIT_COLL_DUP) != 0)
		ret = MPI_ERR_OTHER;
	else
		ret = inter ? MPI_Intercomm_merge(c, 0, &sh) : MPI_Comm_dup(c, &sh);
	lh_lock_back(depth);
	if (ret != MPI_SUCCESS) {
		mark_uncounted(comm, ret);
		return;
	}
	lh_lg->shadow[comm] = LH_HVAL(sh);
	if (lh_lg->retired[comm])   /* made again at a restart: its release too */
		post_release(comm);
}

/* A retired communicator's release: the reduction a round would make on
 * its duplicate (this rank's final count, "not held", "not blocked"),
 * posted when the program frees it. It completes when every member posted
 * one too (every member freed it: the communicator goes on each member at
 * once, lh_coll_poll) or made a round with it (a checkpoint consumes it in
 * place of its own reduction and posts it again, targets()); so each
 * member makes the same reductions on the duplicate in the same order.
 * Kept in the lower half's memory: a restart posts it again
 * (lh_coll_comm_made). Not posted (out of memory, an MPI error): retired
 * until a checkpoint finds every member freed it, as before. */
struct release {
	MPI_Request r;
	uint64_t io[3];
};
static struct release **rel;
static uint32_t rel_cap, rel_live;

static int post_release(uint32_t comm)
{
	MPI_Comm sh = (MPI_Comm)(LH_HCAST)lh_lg->shadow[comm];
	struct release *x = comm < rel_cap ? rel[comm] : NULL;

	if (comm >= rel_cap) {
		uint32_t cap = rel_cap ? rel_cap : 64;
		void *p;

		while (cap <= comm)
			cap *= 2;
		p = realloc(rel, cap * sizeof(*rel));
		if (!p)
			return -ENOMEM;
		rel = p;
		memset(rel + rel_cap, 0, (cap - rel_cap) * sizeof(*rel));
		rel_cap = cap;
	}
	if (!x && !(x = malloc(sizeof(*x))))
		return -ENOMEM;
	x->io[0] = lh_lg->coll_seq[comm];
	x->io[1] = 0;
	x->io[2] = 1;
	if (MPI_Iallreduce(MPI_IN_PLACE, x->io, 3, MPI_UINT64_T, MPI_MAX, sh, &x->r) != MPI_SUCCESS) {
		free(x);
		rel[comm] = NULL;
		return -EIO;
	}
	if (!rel[comm])
		rel_live++;
	rel[comm] = x;
	return 0;
}

/* the release of comm is done (or never was): forget it */
static void drop_release(uint32_t comm)
{
	if (comm >= rel_cap || !rel[comm])
		return;
	free(rel[comm]);
	rel[comm] = NULL;
	rel_live--;
}

void lh_coll_poll(void)
{
	for (uint32_t c = STS_FIRST_USER; rel_live && c < rel_cap; c++) {
		int done = 0;

		if (!rel[c] || MPI_Test(&rel[c]->r, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || !done)
			continue;
		if (rel[c]->io[1]) {   /* no round runs outside a checkpoint: cannot be */
			post_release(c);
			continue;
		}
		drop_release(c);
		lh_release_now(STS_COMM, c);
	}
}

/* MPI_Finalize: the releases complete first (the MPI would otherwise
 * finalize with their requests outstanding: UCX warns of each). Freeing a
 * communicator is collective, so once every rank is here every member
 * posted its release; one some members never freed stays pending, after
 * a second. */
void lh_coll_finalize(MPI_Comm world)
{
	uint64_t end;

	if (MPI_Barrier(world) != MPI_SUCCESS)
		return;
	end = lh_now_ms() + 1000;
	for (lh_coll_poll(); rel_live && lh_now_ms() < end; lh_coll_poll())
		;
}

int lh_coll_comm_retire(uint32_t comm)
{
	if (comm >= lh_lg->coll_cap || !lh_lg->shadow[comm])
		return 0;
	lh_lg->retired[comm] = 1;
	post_release(comm);
	lh_coll_poll();
	return 1;
}

int lh_coll_retired(uint32_t comm)
{
	return comm < lh_lg->coll_cap && lh_lg->retired[comm];
}

void lh_coll_comm_gone(uint32_t comm)
{
	MPI_Comm sh;

	if (comm < uncounted_cap && uncounted[comm]) {
		uncounted[comm] = 0;
		uncounted_live--;
	}
	if (comm >= lh_lg->coll_cap || !lh_lg->shadow[comm])
		return;
	if (comm < rel_cap && rel[comm]) {
		int done = 0;

		/* (a release still pending, which every path here completed
		 * first: its memory stays the MPI's) */
		MPI_Test(&rel[comm]->r, &done, MPI_STATUS_IGNORE);
		if (done)
			free(rel[comm]);
		rel[comm] = NULL;
		rel_live--;
	}
	sh = (MPI_Comm)(LH_HCAST)lh_lg->shadow[comm];
	MPI_Comm_free(&sh);
	lh_lg->shadow[comm] = 0;
	lh_lg->coll_seq[comm] = lh_lg->coll_target[comm] = lh_lg->retired[comm] = 0;
}

/* The targets of every communicator this rank belongs to, retired ones
 * included (a member that freed one takes part with its final count, so
 * every member takes part in every round on it); io[c][1]: some member
 * still holds communicator c; io[c][2] == 0: every member is held past the
 * entry barrier of a blocking collective on c. */
static uint64_t (*io)[3];   /* per communicator: count, held, not blocked */
static uint32_t io_cap;

static int targets(MPI_Comm ctl)
{
	MPI_Request *r = calloc(lh_lg->coll_cap + 1, sizeof(*r));
	int n = 0, ret = MPI_SUCCESS;

	if (io_cap < lh_lg->coll_cap) {   /* a rank that ran on made communicators */
		void *p = realloc(io, lh_lg->coll_cap * sizeof(*io));

		if (p) {
			io = p;
			io_cap = lh_lg->coll_cap;
		}
	}
	if (!r || io_cap < lh_lg->coll_cap) {
		free(r);
		return MPI_ERR_NO_MEM;
	}
	for (uint32_t c = 1; c < lh_lg->coll_cap && ret == MPI_SUCCESS; c++) {
		MPI_Comm sh = c == 1 ? ctl : (MPI_Comm)(LH_HCAST)lh_lg->shadow[c];

		if (c == 2 || (c > 2 && !lh_lg->shadow[c]))
			continue;
		if (c < rel_cap && rel[c]) {   /* its release is this rank's part */
			r[n++] = rel[c]->r;
			rel[c]->r = MPI_REQUEST_NULL;
			continue;
		}
		io[c][0] = lh_lg->coll_seq[c];
		io[c][1] = !lh_lg->retired[c];
		io[c][2] = lh_lg->held_blocking != c + 1;
		ret = MPI_Iallreduce(MPI_IN_PLACE, io[c], 3, MPI_UINT64_T, MPI_MAX, sh, &r[n++]);
	}
	if (ret == MPI_SUCCESS)
		ret = MPI_Waitall(n, r, MPI_STATUSES_IGNORE);
	for (uint32_t c = STS_FIRST_USER; c < rel_cap && ret != MPI_SUCCESS; c++)
		if (rel[c] && rel[c]->r == MPI_REQUEST_NULL) {
			rel[c] = NULL;   /* its memory stays the MPI's: retired */
			rel_live--;
		}
	for (uint32_t c = 1; c < lh_lg->coll_cap && ret == MPI_SUCCESS; c++) {
		if (c == 2 || (c != 1 && !lh_lg->shadow[c]))
			continue;
		if (c < rel_cap && rel[c])
			memcpy(io[c], rel[c]->io, sizeof(io[c]));
		lh_lg->coll_target[c] = io[c][0];
		if (!lh_lg->retired[c])
			continue;
		/* every member freed it: it goes on every member after this
		 * round (all saw the same answer; none is behind on it, so none
		 * makes another reduction on it); else the release again */
		if (!io[c][1]) {
			drop_release(c);
			lh_release_now(STS_COMM, c);
		} else if (c < rel_cap && rel[c]) {
			post_release(c);
		}
	}
	free(r);
	return ret;
}

/* this rank is held past the entry barrier of a blocking collective, and
 * so is every member of its communicator: they go in together */
static int go_together(void)
{
	uint32_t c = lh_lg->held_blocking - 1;

	if (lh_lg->held_blocking == 0 || lh_lg->held_blocking == LH_BLOCKING_NONE ||
	    c >= lh_lg->coll_cap || c >= io_cap || (c != 1 && !lh_lg->shadow[c]) || io[c][2])
		return 0;   /* (no duplicate: no round on it, io[c] is not this one's) */
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
 * (collective over ctl: then every rank skips the reductions, which would
 * not be the same on all members): the checkpoint's error, or 0. */
static int refuse(MPI_Comm ctl)
{
	int mine = uncounted_live + uncounted_lost > 0, any = 0, len = 0;
	char what[MPI_MAX_ERROR_STRING], who[128];

	if (MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, ctl) != MPI_SUCCESS || !any)
		return 0;
	if (!mine)
		return err_set(-ENOTSUP, "rank %d: another rank holds a communicator whose "
			       "collectives it cannot count", lh_lg->world_rank);
	for (uint32_t c = STS_FIRST_USER; c < uncounted_cap; c++) {
		if (!uncounted[c])
			continue;
		if (MPI_Error_string(uncounted[c] - 1, what, &len) != MPI_SUCCESS)
			snprintf(what, sizeof(what), "MPI error class %d", uncounted[c] - 1);
		members(c, who, sizeof(who));
		return err_set(-ENOTSUP, "rank %d: no checkpoint while the program holds a "
			       "communicator of %s that the lower half could not duplicate to "
			       "count its collectives (%s)", lh_lg->world_rank, who, what);
	}
	return err_set(-ENOTSUP, "rank %d: no checkpoint while the program holds a communicator "
		       "the lower half could not duplicate to count its collectives (out of memory)",
		       lh_lg->world_rank);
}

int lh_coll_round(MPI_Comm ctl, int *failed, int stuck)
{
	int mine[3], all[3], go, refused = refuse(ctl);

	if (refused || ensure(2) != 0 || targets(ctl) != MPI_SUCCESS)
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
	if (refused)
		return refused;
	if (all[1])
		return err_set(-ETIMEDOUT, "rank %d: the ranks did not reach a common point "
			       "between collectives within %d s (a rank behind waits for "
			       "a rank that is stopped?)", lh_lg->world_rank,
			       LH_QUIESCE_TIMEOUT_MS / 1000);
	return LH_ROUND_DONE;
}

/* lh_win.c - one-sided communication across a checkpoint (docs/split.md,
 * "Windows").
 *
 * A window's memory is the program's (MPI_Win_create over upper-half
 * memory; MPI_Win_allocate is MPI_Win_create over memory the upper half
 * allocates, uh_win.c), so the image saves it. The lower half makes the
 * real window on a duplicate of the program's communicator that it
 * records like any communicator (its hidden communicator: rebuilt at
 * restart, its collectives counted), and keeps a passive-target epoch
 * open on it for the window's whole life (MPI_Win_lock_all). The
 * program's fence is a collective with no non-blocking form on the hidden
 * communicator: past its counted entry barrier (which parks,
 * lh_coll_blocking) MPI_Win_flush_all (every RMA operation this rank
 * started is complete at origin and target), MPI_Win_sync, MPI_Barrier,
 * MPI_Win_sync; a flush may need its target to drive MPI, and every
 * member is inside the fence until all flushed. At a checkpoint every
 * rank flushes every window, then a barrier, then it writes its image: no
 * operation is in flight in any image (docs/protocol.md, "One-sided
 * communication"). A restart makes the window again over the same memory
 * on the rebuilt hidden communicator and opens its epoch again.
 *
 * MPI_Win_allocate_shared: the node's segment is a file of /dev/shm that
 * rank 0 creates and every member maps MAP_SHARED over the reservation the
 * upper half made in its arena (uh_win.c), unlinked once all mapped; the
 * window is MPI_Win_create over this rank's part. Rank 0's image saves the
 * segment once, the others' only its name (lh_image.c); a restart maps the
 * file again, rank 0 fills it, and the rebuild unlinks it again once every
 * member has it (docs/split.md, "Shared-memory windows").
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include "lh.h"
#include "lh_ledger.h"

struct rec_win {
	void *base;
	sts_aint size;
	int disp_unit;
	uint32_t comm;          /* the hidden communicator (neutral) */
	/* the program's locks: a second real window over 1 + 2 * nranks words
	 * of ledger memory per rank: the lock word (0 free, readers, or
	 * LOCK_WRITER), then per rank o the posts o made to this rank and the
	 * completions o made of its access epochs to this rank (PSCW); the
	 * locks this rank holds, per target (0, STS_LOCK_EXCLUSIVE,
	 * STS_LOCK_SHARED) */
	uint64_t lockwin;       /* the real one */
	int64_t *word;
	uint8_t *held;
	int nranks;
	/* PSCW: the posts and completions this rank has consumed, per rank
	 * (2 * nranks), its exposure epoch's origins and its access epoch's
	 * targets (1 each), whether one is open */
	int64_t *seen;
	uint8_t *post_to, *start_of;
	int posted, started;
	/* a window of MPI_Win_create_dynamic: the memory attached to it, in
	 * the order attached (made again so at restart: the program's
	 * addresses, its displacements, are the same there) */
	int dynamic;
	struct rec_attach {
		void *base;
		sts_aint size;
	} *att;
	uint32_t natt, att_cap;
	/* a window of MPI_Win_allocate_shared: the node's segment (every
	 * member's part), the file it was mapped from, and whether this rank
	 * made it (rank 0 of the window) */
	void *seg;
	sts_aint seg_len;
	int seg_owner;
	char seg_name[64];
};

#define LOCK_WRITER (INT64_MIN / 2)

static MPI_Win real_win(uint32_t n)
{
	return (MPI_Win)(LH_HCAST)lh_real(STS_WIN, n);
}

static void rec_free(struct rec_win *r)
{
	lg_free(r->word);
	lg_free(r->held);
	lg_free(r->seen);
	lg_free(r->post_to);
	lg_free(r->start_of);
	lg_free(r->att);
	lg_free(r);
}

/* the lock words' window, its passive epoch open (collective over c) */
static int lock_window(struct rec_win *r, MPI_Comm c)
{
	MPI_Win lw;
	int ret = MPI_Win_create(r->word, (MPI_Aint)((1 + 2 * (size_t)r->nranks) * sizeof(*r->word)),
				 sizeof(*r->word), MPI_INFO_NULL, c, &lw);

	if (ret == MPI_SUCCESS) {
		ret = MPI_Win_lock_all(MPI_MODE_NOCHECK, lw);
		if (ret != MPI_SUCCESS)
			MPI_Win_free(&lw);
	}
	if (ret == MPI_SUCCESS)
		r->lockwin = LH_HVAL(lw);
	return ret;
}

static struct rec_win *rec_of(uint32_t win)
{
	struct lh_slot *s = lh_slot_of(STS_WIN, win);

	return s ? s->rec : NULL;
}

/* 0 if every member of c is on this node, else MPI_ERR_COMM (said once) */
static int one_node(MPI_Comm c, const char *when)
{
	MPI_Comm node;
	int n = 0, nn = 0, ret = MPI_Comm_split_type(c, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);

	if (ret != MPI_SUCCESS)
		return ret;
	MPI_Comm_size(c, &n);
	MPI_Comm_size(node, &nn);
	MPI_Comm_free(&node);
	if (nn == n)
		return MPI_SUCCESS;
	fprintf(stderr, "stasis: rank %d: MPI_Win_allocate_shared: %d of the window's %d ranks are "
		"on another node%s: a shared-memory window needs them on one\n",
		lh_info->world_rank, n - nn, n, when);
	return MPI_ERR_COMM;
}

/* The node's segment for a window of MPI_Win_allocate_shared over dup:
 * rank 0 creates the file, every member maps it over its reservation m,
 * rank 0 unlinks it once all did (the mappings keep it). */
static int seg_map(struct rec_win *r, MPI_Comm dup, const struct sts_shared_mem *m)
{
	int me = 0, fd = -1, ok, ret = one_node(dup, "");

	if (ret != MPI_SUCCESS)
		return ret;
	MPI_Comm_rank(dup, &me);
	r->seg_owner = me == 0;
	if (r->seg_owner) {
		uint32_t rnd = 0;

		if (getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd))
			rnd = (uint32_t)(uintptr_t)r;
		snprintf(r->seg_name, sizeof(r->seg_name), "/dev/shm/stasis-win-%d-%08x",
			 (int)getpid(), rnd);
		fd = open(r->seg_name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd < 0 || ftruncate(fd, (off_t)m->len) != 0) {
			fprintf(stderr, "stasis: rank %d: MPI_Win_allocate_shared: cannot make %s: %s\n",
				lh_info->world_rank, r->seg_name, strerror(errno));
			if (fd >= 0)
				unlink(r->seg_name);
			r->seg_name[0] = 0;
		}
	}
	ret = MPI_Bcast(r->seg_name, sizeof(r->seg_name), MPI_CHAR, 0, dup);
	if (ret != MPI_SUCCESS || !r->seg_name[0]) {
		if (fd >= 0)
			close(fd);
		return ret != MPI_SUCCESS ? ret : MPI_ERR_NO_MEM;
	}
	if (fd < 0)
		fd = open(r->seg_name, O_RDWR | O_CLOEXEC);
	ok = fd >= 0 && mmap(m->base, (size_t)m->len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
			     fd, 0) == m->base;
	if (!ok)
		fprintf(stderr, "stasis: rank %d: MPI_Win_allocate_shared: cannot map %s: %s\n",
			lh_info->world_rank, r->seg_name, strerror(errno));
	if (fd >= 0)
		close(fd);
	ret = MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, dup);
	if (r->seg_owner)
		unlink(r->seg_name);
	if (ret == MPI_SUCCESS && !ok)
		ret = MPI_ERR_NO_MEM;
	r->seg = m->base;
	r->seg_len = m->len;
	return ret;
}

static int make(void *base, sts_aint size, int disp_unit, uint32_t info, uint32_t comm,
		int dynamic, const struct sts_shared_mem *shm, uint32_t *win)
{
	MPI_Comm c, dup = MPI_COMM_NULL;
	MPI_Info in;
	struct rec_win *r;
	MPI_Win w;
	unsigned depth;
	int ret = lh_coll_blocking(comm);

	if (ret)
		return ret;
	c = (MPI_Comm)(LH_HCAST)lh_real(STS_COMM, comm);
	in = (MPI_Info)(LH_HCAST)lh_real(STS_INFO, info);
	r = lg_calloc(sizeof(*r));
	if (!r)
		return lh_err(MPI_ERR_NO_MEM);
	MPI_Comm_size(c, &r->nranks);
	r->word = lg_calloc((1 + 2 * (size_t)r->nranks) * sizeof(*r->word));
	r->held = lg_calloc((size_t)r->nranks);
	r->seen = lg_calloc(2 * (size_t)r->nranks * sizeof(*r->seen));
	r->post_to = lg_calloc((size_t)r->nranks);
	r->start_of = lg_calloc((size_t)r->nranks);
	ret = r->word && r->held && r->seen && r->post_to && r->start_of ? MPI_SUCCESS :
	      MPI_ERR_NO_MEM;
	/* the real calls wait for the other members, one of which may be
	 * another thread of this rank: without the lock (lh_lock_out) */
	depth = lh_lock_out();
	if (ret == MPI_SUCCESS)
		ret = MPI_Comm_dup(c, &dup);
	if (ret == MPI_SUCCESS && shm) {
		ret = seg_map(r, dup, shm);
		base = (char *)shm->base + shm->offset;
	}
	if (ret == MPI_SUCCESS && dynamic)
		ret = MPI_Win_create_dynamic(in, dup, &w);
	else if (ret == MPI_SUCCESS)
		ret = MPI_Win_create(base, (MPI_Aint)size, disp_unit, in, dup, &w);
	if (ret == MPI_SUCCESS) {
		ret = MPI_Win_lock_all(MPI_MODE_NOCHECK, w);
		if (ret != MPI_SUCCESS)
			MPI_Win_free(&w);
	}
	if (ret == MPI_SUCCESS) {
		ret = lock_window(r, dup);
		if (ret != MPI_SUCCESS) {
			MPI_Win_unlock_all(w);
			MPI_Win_free(&w);
		}
	}
	if (ret != MPI_SUCCESS && dup != MPI_COMM_NULL)
		MPI_Comm_free(&dup);
	lh_lock_back(depth);
	if (ret != MPI_SUCCESS) {
		rec_free(r);
		return lh_err(ret);
	}
	r->base = base;
	r->size = size;
	r->disp_unit = disp_unit;
	r->comm = lh_alloc(STS_COMM, LH_HVAL(dup));
	r->dynamic = dynamic;
	*win = lh_alloc(STS_WIN, LH_HVAL(w));
	lh_slot_of(STS_WIN, *win)->rec = r;
	return 0;
}

int lh_Win_create(void *base, sts_aint size, int disp_unit, uint32_t info, uint32_t comm,
		  uint32_t *win)
{
	return make(base, size, disp_unit, info, comm, 0, NULL, win);
}

int lh_Win_create_dynamic(uint32_t info, uint32_t comm, uint32_t *win)
{
	return make(NULL, 0, 1, info, comm, 1, NULL, win);
}

int lh_Win_allocate_shared(sts_aint size, int disp_unit, uint32_t info, uint32_t comm,
			   void *baseptr, uint32_t *win)
{
	return make(NULL, size, disp_unit, info, comm, 0, baseptr, win);
}

int lh_win_segment(uint64_t start, uint64_t end, const char **name, uint64_t *offset,
		   uint64_t *len, int *owner)
{
	const struct lh_table *t = &lh_lg->tables[STS_WIN];

	for (uint32_t n = STS_FIRST_USER; n < t->next; n++) {
		const struct rec_win *r = t->slot[n].rec;
		uint64_t a = r ? (uint64_t)(uintptr_t)r->seg : 0;

		if (!a || start < a || end > a + (uint64_t)r->seg_len)
			continue;
		*name = r->seg_name;
		*offset = start - a;
		*len = (uint64_t)r->seg_len;
		*owner = r->seg_owner;
		return 1;
	}
	return 0;
}

/* base, size and displacement unit as the program gave them (a shared
 * window's: this rank's part; a dynamic one's: MPI_BOTTOM, 0 and 1), the
 * flavor of the lower half's call (MPI_Win_allocate is MPI_Win_create
 * here: uh_win.c tells it apart), the real window's memory model */
int lh_win_attr(uint32_t win, int which, sts_aint *value)
{
	const struct rec_win *r = rec_of(win);
	int *model = NULL, flag = 0, ret;

	if (!r)
		return lh_err(MPI_ERR_WIN);
	switch (which) {
	case STS_WATTR_BASE:
		*value = (sts_aint)(uintptr_t)r->base;
		return 0;
	case STS_WATTR_SIZE:
		*value = r->size;
		return 0;
	case STS_WATTR_DISP_UNIT:
		*value = r->disp_unit;
		return 0;
	case STS_WATTR_FLAVOR:
		*value = r->dynamic ? STS_WIN_FLAVOR_DYNAMIC :
			 r->seg ? STS_WIN_FLAVOR_SHARED : STS_WIN_FLAVOR_CREATE;
		return 0;
	case STS_WATTR_MODEL:
		ret = MPI_Win_get_attr(real_win(win), MPI_WIN_MODEL, &model, &flag);
		if (ret != MPI_SUCCESS)
			return lh_err(ret);
		*value = flag && *model == MPI_WIN_UNIFIED ? STS_WIN_MODEL_UNIFIED :
			 STS_WIN_MODEL_SEPARATE;
		return 0;
	}
	return lh_err(MPI_ERR_KEYVAL);
}

int lh_Win_attach(uint32_t win, void *base, sts_aint size)
{
	struct rec_win *r = rec_of(win);
	int ret;

	if (!r)
		return lh_err(MPI_ERR_WIN);
	if (r->natt == r->att_cap) {
		uint32_t cap = r->att_cap ? 2 * r->att_cap : 8;
		struct rec_attach *a = lg_realloc(r->att, cap * sizeof(*a));

		if (!a)
			return lh_err(MPI_ERR_NO_MEM);
		r->att = a;
		r->att_cap = cap;
	}
	ret = MPI_Win_attach(real_win(win), base, (MPI_Aint)size);
	if (ret == MPI_SUCCESS)
		r->att[r->natt++] = (struct rec_attach){ base, size };
	return lh_err(ret);
}

int lh_Win_detach(uint32_t win, const void *base)
{
	struct rec_win *r = rec_of(win);
	int ret;

	if (!r)
		return lh_err(MPI_ERR_WIN);
	ret = MPI_Win_detach(real_win(win), base);
	for (uint32_t i = 0; ret == MPI_SUCCESS && i < r->natt; i++)
		if (r->att[i].base == base) {
			memmove(&r->att[i], &r->att[i + 1], (r->natt - i - 1) * sizeof(*r->att));
			r->natt--;
			break;
		}
	return lh_err(ret);
}

int lh_Win_fence(int assert, uint32_t win)
{
	struct lh_slot *s = lh_slot_of(STS_WIN, win);
	const struct rec_win *r = s ? s->rec : NULL;
	MPI_Win w = real_win(win);
	int ret;

	(void)assert;   /* hints only: the real epoch is passive */
	if (!r)
		return lh_err(MPI_ERR_WIN);
	/* every member is at the fence before any flushes (a flush may need
	 * its target to drive MPI), and none parks until all flushed */
	ret = lh_coll_blocking(r->comm);
	if (ret)
		return ret;
	MPI_Comm c = (MPI_Comm)(LH_HCAST)lh_real(STS_COMM, r->comm);
	unsigned depth = lh_lock_out();   /* the barrier waits for the others */

	ret = MPI_Win_flush_all(w);
	if (ret == MPI_SUCCESS)
		ret = MPI_Win_sync(w);
	if (ret == MPI_SUCCESS)
		ret = MPI_Barrier(c);
	if (ret == MPI_SUCCESS)
		ret = MPI_Win_sync(w);
	lh_lock_back(depth);
	return lh_err(ret);
}

int lh_Win_free(uint32_t *win)
{
	struct lh_slot *s = lh_slot_of(STS_WIN, *win);
	struct rec_win *r = s ? s->rec : NULL;
	MPI_Win w = real_win(*win);
	MPI_Comm c;
	int ret;

	if (!r)
		return lh_err(MPI_ERR_WIN);
	ret = lh_coll_blocking(r->comm);   /* MPI_Win_free is collective */
	if (ret)
		return ret;
	MPI_Win lw = (MPI_Win)(LH_HCAST)r->lockwin;
	unsigned depth = lh_lock_out();   /* the frees wait for the others */

	ret = MPI_Win_unlock_all(w);
	if (ret == MPI_SUCCESS)
		ret = MPI_Win_free(&w);
	if (ret == MPI_SUCCESS)
		ret = MPI_Win_unlock_all(lw);
	if (ret == MPI_SUCCESS)
		ret = MPI_Win_free(&lw);
	lh_lock_back(depth);
	if (ret != MPI_SUCCESS)
		return lh_err(ret);
	/* the hidden communicator goes at once, not retired until the next
	 * checkpoint (lh_release): every member passed the entry
	 * barrier and frees it before it can park, so none still counts on it.
	 * (Retired, a program making and freeing windows used up MPICH's 2048
	 * context ids between two checkpoints.) */
	c = (MPI_Comm)(LH_HCAST)lh_real(STS_COMM, r->comm);
	MPI_Comm_free(&c);
	lh_release_now(STS_COMM, r->comm);
	s->rec = NULL;
	rec_free(r);
	lh_release(STS_WIN, *win);
	*win = 0;
	return 0;
}

int lh_win_quiesce(MPI_Comm ctl)
{
	const struct lh_table *t = &lh_lg->tables[STS_WIN];
	int ret = MPI_SUCCESS;

	for (uint32_t n = STS_FIRST_USER; n < t->next && ret == MPI_SUCCESS; n++)
		if (t->slot[n].rec) {
			const struct rec_win *r = t->slot[n].rec;

			ret = MPI_Win_flush_all((MPI_Win)(LH_HCAST)t->slot[n].real);
			if (ret == MPI_SUCCESS)
				ret = MPI_Win_flush_all((MPI_Win)(LH_HCAST)r->lockwin);
		}
	/* every rank's operations are complete at their targets before any
	 * rank goes on to write its image */
	if (ret == MPI_SUCCESS)
		ret = MPI_Barrier(ctl);
	for (uint32_t n = STS_FIRST_USER; n < t->next && ret == MPI_SUCCESS; n++)
		if (t->slot[n].rec)
			ret = MPI_Win_sync((MPI_Win)(LH_HCAST)t->slot[n].real);
	return ret;
}

int lh_win_progress(MPI_Comm ctl)
{
	int flag;

	return MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, ctl, &flag, MPI_STATUS_IGNORE);
}

int lh_win_rebuild(struct lh_slot *s)
{
	const struct rec_win *r = s->rec;
	MPI_Comm c = (MPI_Comm)(LH_HCAST)lh_real(STS_COMM, r->comm);
	MPI_Win w;
	int ret = MPI_SUCCESS;

	/* a shared window's segment: every member mapped the file again
	 * (lh_image.c) and rank 0 filled it before any goes on; the file goes */
	if (r->seg) {
		ret = one_node(c, " after the restart");
		if (ret == MPI_SUCCESS)
			ret = MPI_Barrier(c);
		if (ret == MPI_SUCCESS && r->seg_owner)
			unlink(r->seg_name);
	}
	if (ret == MPI_SUCCESS)
		ret = r->dynamic ? MPI_Win_create_dynamic(MPI_INFO_NULL, c, &w)
				 : MPI_Win_create(r->base, (MPI_Aint)r->size, r->disp_unit,
						  MPI_INFO_NULL, c, &w);

	for (uint32_t i = 0; r->dynamic && ret == MPI_SUCCESS && i < r->natt; i++)
		ret = MPI_Win_attach(w, r->att[i].base, (MPI_Aint)r->att[i].size);
	if (ret == MPI_SUCCESS)
		ret = MPI_Win_lock_all(MPI_MODE_NOCHECK, w);
	if (ret == MPI_SUCCESS)
		s->real = LH_HVAL(w);
	if (ret == MPI_SUCCESS)   /* its words came back with the ledger */
		ret = lock_window(s->rec, (MPI_Comm)(LH_HCAST)lh_real(STS_COMM, r->comm));
	return ret;
}

/* ---- the program's passive-target epochs ----
 *
 * The real epoch is always open (lock_all at creation), so the program's
 * MPI_Win_lock and MPI_Win_lock_all are locks of the lower half's own: a
 * reader-writer word per target in the lock window, taken with
 * MPI_Compare_and_swap (exclusive: LOCK_FREE to LOCK_WRITER) or
 * MPI_Fetch_and_op (shared: +1, given back if a writer holds it), each
 * flushed; a lock taken stays in the target's word, which the target's
 * image saves, so a program that is inside an epoch at a checkpoint is
 * inside it again after a restart. Waiting for a lock is a loop that
 * parks when a checkpoint comes (the holder may be parked). Unlocking
 * flushes the program's operations to the target, then gives the word
 * back. */

/* word i of target's lock window through op, flushed: its old value */
static int word_at(const struct rec_win *r, int target, int i, int64_t add, MPI_Op op,
		   int64_t *old)
{
	MPI_Win lw = (MPI_Win)(LH_HCAST)r->lockwin;
	int ret = MPI_Fetch_and_op(&add, old, MPI_INT64_T, target, i, op, lw);

	return ret == MPI_SUCCESS ? MPI_Win_flush(target, lw) : ret;
}

static int word_op(const struct rec_win *r, int target, int64_t add, int64_t *old)
{
	return word_at(r, target, 0, add, MPI_SUM, old);
}

static int my_rank(const struct rec_win *r)
{
	int me = 0;

	MPI_Comm_rank((MPI_Comm)(LH_HCAST)lh_real(STS_COMM, r->comm), &me);
	return me;
}

/* one try: 1 taken, 0 not, or an MPI error code (negative) */
static int try_lock(const struct rec_win *r, int target, int type)
{
	MPI_Win lw = (MPI_Win)(LH_HCAST)r->lockwin;
	int64_t old = 0, want = LOCK_WRITER, free_ = 0;
	int ret;

	if (type == STS_LOCK_EXCLUSIVE) {
		ret = MPI_Compare_and_swap(&want, &free_, &old, MPI_INT64_T, target, 0, lw);
		if (ret == MPI_SUCCESS)
			ret = MPI_Win_flush(target, lw);
		return ret != MPI_SUCCESS ? -ret : old == 0;
	}
	ret = word_op(r, target, 1, &old);
	if (ret == MPI_SUCCESS && old < 0)
		ret = word_op(r, target, -1, &old) ?: -1;   /* a writer holds it */
	return ret == -1 ? 0 : ret != MPI_SUCCESS ? -ret : 1;
}

static int take(struct rec_win *r, int target, int type)
{
	unsigned polls = 0;

	for (;;) {
		int got = try_lock(r, target, type);

		if (got < 0)
			return lh_err(-got);
		if (got) {
			r->held[target] = (uint8_t)type;
			return 0;
		}
		if (lh_info->ckpt_pending)
			return STS_AGAIN;   /* parks; called again, it tries again */
		if (++polls % 16 == 0)
			sched_yield();
		lh_tls_yield();
	}
}

static int give(struct rec_win *r, MPI_Win w, int target)
{
	int64_t old;
	int ret = MPI_Win_flush(target, w);

	if (ret == MPI_SUCCESS)
		ret = word_op(r, target, r->held[target] == STS_LOCK_EXCLUSIVE ? -LOCK_WRITER : -1,
			      &old);
	if (ret == MPI_SUCCESS)
		r->held[target] = 0;
	return ret;
}

int lh_Win_lock(int lock_type, int rank, int assert, uint32_t win)
{
	struct rec_win *r = rec_of(win);

	(void)assert;   /* hints: the lock is taken anyway */
	if (!r)
		return lh_err(MPI_ERR_WIN);
	if (rank < 0 || rank >= r->nranks)
		return lh_err(MPI_ERR_RANK);
	if (lock_type != STS_LOCK_EXCLUSIVE && lock_type != STS_LOCK_SHARED)
		return lh_err(MPI_ERR_LOCKTYPE);
	if (r->held[rank])
		return lh_err(MPI_ERR_RMA_SYNC);
	return take(r, rank, lock_type);
}

int lh_Win_unlock(int rank, uint32_t win)
{
	struct rec_win *r = rec_of(win);

	if (!r)
		return lh_err(MPI_ERR_WIN);
	if (rank < 0 || rank >= r->nranks)
		return lh_err(MPI_ERR_RANK);
	if (!r->held[rank])
		return lh_err(MPI_ERR_RMA_SYNC);
	return lh_err(give(r, real_win(win), rank));
}

int lh_Win_lock_all(int assert, uint32_t win)
{
	struct rec_win *r = rec_of(win);

	(void)assert;
	if (!r)
		return lh_err(MPI_ERR_WIN);
	/* in rank order (no two ranks wait for each other's half); called
	 * again after a park, it goes on from the first not yet taken */
	for (int t = 0; t < r->nranks; t++) {
		int ret = r->held[t] ? 0 : take(r, t, STS_LOCK_SHARED);

		if (ret)
			return ret;
	}
	return 0;
}

int lh_Win_unlock_all(uint32_t win)
{
	struct rec_win *r = rec_of(win);
	MPI_Win w = real_win(win);
	int ret = MPI_SUCCESS;

	if (!r)
		return lh_err(MPI_ERR_WIN);
	for (int t = 0; t < r->nranks && ret == MPI_SUCCESS; t++)
		if (r->held[t])
			ret = give(r, w, t);
	return lh_err(ret);
}

/* ---- post, start, complete, wait (PSCW) ----
 *
 * Made of the same always-open epoch and the lock window's counters: a
 * post adds 1 to each origin's "posted by me" word, a start waits until
 * each target's post word passed what it consumed, a complete flushes
 * the program's operations to each target and then adds 1 to the
 * target's "completed by me" word, a wait (or test) waits until each
 * origin's completion word passed what it consumed. Counters and what
 * was consumed live in ledger memory: an epoch open at a checkpoint is
 * open after the restart, and a notice sent before it is found after it.
 * Every wait is a loop of reads that parks when a checkpoint comes. */

enum { SLOT_POST = 1, SLOT_DONE };

static int64_t *slot_seen(struct rec_win *r, int kind, int rank)
{
	return &r->seen[(kind - 1) * r->nranks + rank];
}

static int notify(const struct rec_win *r, int target, int kind)
{
	int64_t old;

	return word_at(r, target, 1 + (kind - 1) * r->nranks + my_rank(r), 1, MPI_SUM, &old);
}

/* 1: a notice of kind from rank is there (consumed), 0: not yet, or a
 * negative MPI error code */
static int noticed(struct rec_win *r, int kind, int rank)
{
	int64_t v = 0;
	int ret = word_at(r, my_rank(r), 1 + (kind - 1) * r->nranks + rank, 0, MPI_NO_OP, &v);

	if (ret != MPI_SUCCESS)
		return -ret;
	if (v <= *slot_seen(r, kind, rank))
		return 0;
	++*slot_seen(r, kind, rank);
	return 1;
}

/* the members of group g as ranks of the window's communicator, marked in
 * set (0 or an MPI error code) */
static int members(const struct rec_win *r, uint32_t g, uint8_t *set)
{
	MPI_Group wg, pg = (MPI_Group)(LH_HCAST)lh_real(STS_GROUP, g);
	int n = 0, ret = MPI_Group_size(pg, &n);
	int *a = malloc(2 * (size_t)(n > 0 ? n : 1) * sizeof(int));

	if (!a)
		return MPI_ERR_NO_MEM;
	for (int i = 0; i < n; i++)
		a[i] = i;
	if (ret == MPI_SUCCESS)
		ret = MPI_Comm_group((MPI_Comm)(LH_HCAST)lh_real(STS_COMM, r->comm), &wg);
	if (ret == MPI_SUCCESS) {
		ret = MPI_Group_translate_ranks(pg, n, a, wg, a + n);
		MPI_Group_free(&wg);
	}
	for (int i = 0; i < n && ret == MPI_SUCCESS; i++)
		if (a[n + i] == MPI_UNDEFINED)
			ret = MPI_ERR_GROUP;
	if (ret == MPI_SUCCESS) {
		memset(set, 0, (size_t)r->nranks);
		for (int i = 0; i < n; i++)
			set[a[n + i]] = 1;
	}
	free(a);
	return ret;
}

/* wait for a notice of kind from every rank of set not yet marked done
 * (2 in set: consumed); called again after a park, it goes on */
static int await_all(struct rec_win *r, int kind, uint8_t *set, int once, int *flag)
{
	unsigned polls = 0;

	for (;;) {
		int left = 0;

		for (int o = 0; o < r->nranks; o++) {
			int got = set[o] == 1 ? noticed(r, kind, o) : 0;

			if (got < 0)
				return lh_err(-got);
			if (got)
				set[o] = 2;
			left += set[o] == 1;
		}
		if (!left || once) {
			if (flag)
				*flag = !left;
			return 0;
		}
		if (lh_info->ckpt_pending)
			return STS_AGAIN;
		if (++polls % 16 == 0)
			sched_yield();
		lh_tls_yield();
	}
}

int lh_Win_post(uint32_t group, int assert, uint32_t win)
{
	struct rec_win *r = rec_of(win);
	int ret;

	(void)assert;
	if (!r)
		return lh_err(MPI_ERR_WIN);
	if (r->posted)
		return lh_err(MPI_ERR_RMA_SYNC);
	ret = members(r, group, r->post_to);
	/* the program's local stores before the post are visible to the
	 * origins' operations after their start */
	if (ret == MPI_SUCCESS)
		ret = MPI_Win_sync(real_win(win));
	for (int o = 0; o < r->nranks && ret == MPI_SUCCESS; o++)
		if (r->post_to[o])
			ret = notify(r, o, SLOT_POST);
	if (ret == MPI_SUCCESS)
		r->posted = 1;
	return lh_err(ret);
}

int lh_Win_start(uint32_t group, int assert, uint32_t win)
{
	struct rec_win *r = rec_of(win);
	int ret;

	(void)assert;
	if (!r)
		return lh_err(MPI_ERR_WIN);
	if (r->started == 0) {
		ret = members(r, group, r->start_of);
		if (ret != MPI_SUCCESS)
			return lh_err(ret);
		r->started = 1;   /* 1: waiting for the posts; 2: open */
	} else if (r->started == 2) {
		return lh_err(MPI_ERR_RMA_SYNC);
	}
	ret = await_all(r, SLOT_POST, r->start_of, 0, NULL);
	if (ret == 0)
		r->started = 2;
	return ret;
}

int lh_Win_complete(uint32_t win)
{
	struct rec_win *r = rec_of(win);
	MPI_Win w = real_win(win);
	int ret = MPI_SUCCESS;

	if (!r)
		return lh_err(MPI_ERR_WIN);
	if (r->started != 2)
		return lh_err(MPI_ERR_RMA_SYNC);
	for (int t = 0; t < r->nranks && ret == MPI_SUCCESS; t++)
		if (r->start_of[t]) {
			ret = MPI_Win_flush(t, w);
			if (ret == MPI_SUCCESS)
				ret = notify(r, t, SLOT_DONE);
			if (ret == MPI_SUCCESS)
				r->start_of[t] = 0;   /* called again, it is not told twice */
		}
	if (ret == MPI_SUCCESS)
		r->started = 0;
	return lh_err(ret);
}

static int end_exposure(struct rec_win *r, uint32_t win, int once, int *flag)
{
	int f = 0, ret;

	if (!r)
		return lh_err(MPI_ERR_WIN);
	if (!r->posted)
		return lh_err(MPI_ERR_RMA_SYNC);
	ret = await_all(r, SLOT_DONE, r->post_to, once, &f);
	if (ret == 0 && f) {
		r->posted = 0;
		ret = lh_err(MPI_Win_sync(real_win(win)));
	}
	if (flag)
		*flag = f;
	return ret;
}

int lh_Win_wait(uint32_t win)
{
	return end_exposure(rec_of(win), win, 0, NULL);
}

int lh_Win_test(uint32_t win, int *flag)
{
	return end_exposure(rec_of(win), win, 1, flag);
}

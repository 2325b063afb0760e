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
 */
#include <stdint.h>

#include "lh.h"
#include "lh_ledger.h"

struct rec_win {
	void *base;
	sts_aint size;
	int disp_unit;
	uint32_t comm;          /* the hidden communicator (neutral) */
};

static MPI_Win real_win(uint32_t n)
{
	return (MPI_Win)(LH_HCAST)lh_real(STS_WIN, n);
}

int lh_Win_create(void *base, sts_aint size, int disp_unit, uint32_t info, uint32_t comm,
		  uint32_t *win)
{
	struct rec_win *r;
	MPI_Comm dup;
	MPI_Win w;
	uint32_t hc;
	int ret = lh_coll_blocking(comm);

	if (ret)
		return ret;
	r = lg_calloc(sizeof(*r));
	if (!r)
		return lh_err(MPI_ERR_NO_MEM);
	ret = MPI_Comm_dup((MPI_Comm)(LH_HCAST)lh_real(STS_COMM, comm), &dup);
	if (ret != MPI_SUCCESS) {
		lg_free(r);
		return lh_err(ret);
	}
	hc = lh_alloc(STS_COMM, LH_HVAL(dup));
	ret = MPI_Win_create(base, (MPI_Aint)size, disp_unit,
			     (MPI_Info)(LH_HCAST)lh_real(STS_INFO, info), dup, &w);
	if (ret == MPI_SUCCESS) {
		ret = MPI_Win_lock_all(MPI_MODE_NOCHECK, w);
		if (ret != MPI_SUCCESS)
			MPI_Win_free(&w);
	}
	if (ret != MPI_SUCCESS) {
		MPI_Comm_free(&dup);
		lh_release(STS_COMM, hc);
		lg_free(r);
		return lh_err(ret);
	}
	*r = (struct rec_win){ base, size, disp_unit, hc };
	*win = lh_alloc(STS_WIN, LH_HVAL(w));
	lh_slot_of(STS_WIN, *win)->rec = r;
	return 0;
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
	ret = MPI_Win_flush_all(w);
	if (ret == MPI_SUCCESS)
		ret = MPI_Win_sync(w);
	if (ret == MPI_SUCCESS)
		ret = MPI_Barrier((MPI_Comm)(LH_HCAST)lh_real(STS_COMM, r->comm));
	if (ret == MPI_SUCCESS)
		ret = MPI_Win_sync(w);
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
	ret = MPI_Win_unlock_all(w);
	if (ret == MPI_SUCCESS)
		ret = MPI_Win_free(&w);
	if (ret != MPI_SUCCESS)
		return lh_err(ret);
	c = (MPI_Comm)(LH_HCAST)lh_real(STS_COMM, r->comm);
	MPI_Comm_free(&c);
	lh_release(STS_COMM, r->comm);
	lh_release(STS_WIN, *win);   /* frees the record */
	*win = 0;
	return 0;
}

int lh_win_quiesce(MPI_Comm ctl)
{
	const struct lh_table *t = &lh_lg->tables[STS_WIN];
	int ret = MPI_SUCCESS;

	for (uint32_t n = STS_FIRST_USER; n < t->next && ret == MPI_SUCCESS; n++)
		if (t->slot[n].rec)
			ret = MPI_Win_flush_all((MPI_Win)(LH_HCAST)t->slot[n].real);
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
	MPI_Win w;
	int ret = MPI_Win_create(r->base, (MPI_Aint)r->size, r->disp_unit, MPI_INFO_NULL,
				 (MPI_Comm)(LH_HCAST)lh_real(STS_COMM, r->comm), &w);

	if (ret == MPI_SUCCESS)
		ret = MPI_Win_lock_all(MPI_MODE_NOCHECK, w);
	if (ret == MPI_SUCCESS)
		s->real = LH_HVAL(w);
	return ret;
}

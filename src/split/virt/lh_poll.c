/* lh_poll.c - testing a real request in a loop, as cheaply as the MPI's own
 * wait (docs/split.md, "Waiting never blocks a checkpoint").
 *
 * Every call of the split process that waits is a loop of MPI_Test, so a
 * checkpoint can stop it. Open MPI's MPI_Test costs two full memory fences
 * on each turn, where its own MPI_Wait spins on the request's completion
 * word and opal_progress() alone: on an 8-byte ping-pong those fences were
 * a quarter of the receiver's time. With Open MPI, lh_test therefore reads
 * the completion word itself and, once it is set, calls MPI_Wait, which
 * returns at once and frees the request without MPI_Test's fence (as Open
 * MPI's MPI_Wait does after its own spin); a request that is not an
 * active one goes to MPI_Test.
 *
 * The word's place is what Open MPI 4's ompi_request_t puts after its free
 * list item, its type and its status; lh_poll_init checks it on a request of
 * its own before trusting it (pending, then complete after a message to
 * itself, and Open MPI's static complete request reads complete). Anything
 * else, or MPICH, and lh_test is MPI_Test.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "lh.h"

#ifdef OPEN_MPI
#define REQ_COMPLETE_OFF LH_REQ_COMPLETE_OFF
#define REQ_STATUS_OFF 0x40     /* req_status: MPI_SOURCE, */
#define REQ_TAG_OFF 0x44        /* MPI_TAG, MPI_ERROR, _cancelled, _ucount */
#define REQ_ERROR_OFF 0x48
#define REQ_UCOUNT_OFF 0x50

int lh_poll_fast;
static int done_ok;             /* the status's fields where lh_poll_init found them */

static inline void *word(MPI_Request r, size_t off)
{
	return *(void *volatile *)((char *)r + off);
}

enum { NOT_ACTIVE, PENDING, COMPLETE };

/* an active request's completion word, after one turn of progress if it
 * was not set */
static inline int word_state(MPI_Request r)
{
	if (!lh_req_active(r))
		return NOT_ACTIVE;
	if (lh_req_complete(r))
		return COMPLETE;
	opal_progress();
	return lh_req_complete(r) ? COMPLETE : PENDING;
}

int lh_test_word(MPI_Request *r, int *flag, MPI_Status *st)
{
	/* Open MPI's complete request of a send it sent at once (and of a
	 * message to or from MPI_PROC_NULL) is static: nothing of it to free,
	 * so its status is read here as MPI_Wait reads it (all but MPI_ERROR,
	 * which it leaves), without the call: about 2 ns of CPU an Isend and
	 * its Wait (Open MPI 4.1.4: PROC_NULL, ANY_TAG, not cancelled, 0
	 * bytes, the request null after) */
	if (done_ok && lh_sent_at_once(*r)) {
		const MPI_Status *rs = (const MPI_Status *)((char *)*r + REQ_STATUS_OFF);

		if (st != MPI_STATUS_IGNORE) {
			st->MPI_SOURCE = rs->MPI_SOURCE;
			st->MPI_TAG = rs->MPI_TAG;
			st->_cancelled = rs->_cancelled;
			st->_ucount = rs->_ucount;
		}
		*flag = 1;
		*r = MPI_REQUEST_NULL;
		return MPI_SUCCESS;
	}
	switch (word_state(*r)) {
	case NOT_ACTIVE:
		return MPI_Test(r, flag, st);
	case PENDING:
		*flag = 0;
		return MPI_SUCCESS;
	}
	*flag = 1;
	return MPI_Wait(r, st);
}

/* A blocking receive's request, complete without error and counted, that
 * lh_test_done leaves to be freed later (MPI_Wait costs ~30 cycles on the
 * way from a message's arrival to the program's next call): freed by the
 * next lh_done_free, before one more is kept. One per lower-half TLS: at
 * SERIALIZED and MULTIPLE every calling thread has its own (lh_tls.c), so
 * it is the thread's, and no other thread frees it under it (before, one
 * for the process and none at MULTIPLE: each receive's MPI_Wait came
 * before its thread's return). A thread's still kept at MPI_Finalize is
 * a completed request, which the MPI lets go of. */
static __thread MPI_Request done_req;

int lh_test_done(MPI_Request *r, int *flag)
{
	if (!done_ok)
		return lh_test(r, flag, MPI_STATUS_IGNORE);
	switch (word_state(*r)) {
	case NOT_ACTIVE:
		return MPI_Test(r, flag, MPI_STATUS_IGNORE);
	case PENDING:
		*flag = 0;
		return MPI_SUCCESS;
	}
	*flag = 1;
	if (*(volatile int *)((char *)*r + REQ_ERROR_OFF) != MPI_SUCCESS)
		return MPI_Wait(r, MPI_STATUS_IGNORE);
	lh_done_free();
	done_req = *r;
	*r = MPI_REQUEST_NULL;
	return MPI_SUCCESS;
}

void lh_done_free(void)
{
	if (done_req) {
		MPI_Wait(&done_req, MPI_STATUS_IGNORE);
		done_req = NULL;
	}
}

int lh_poll_init(void)
{
	MPI_Request r;
	char out[2] = { 1, 2 }, in[2];
	int ok, done;

	if (!opal_progress || !&ompi_request_empty ||
	    word(&ompi_request_empty, REQ_COMPLETE_OFF) != (void *)1)
		goto slow;
	if (MPI_Irecv(in, 2, MPI_BYTE, 0, 7, MPI_COMM_SELF, &r) != MPI_SUCCESS)
		goto slow;
	ok = word(r, REQ_COMPLETE_OFF) == NULL && lh_req_active(r);
	if (MPI_Send(out, 2, MPI_BYTE, 0, 7, MPI_COMM_SELF) != MPI_SUCCESS) {
		MPI_Cancel(&r);
		MPI_Wait(&r, MPI_STATUS_IGNORE);
		goto slow;
	}
	ok = ok && word(r, REQ_COMPLETE_OFF) == (void *)1;
	done = ok && *(volatile int *)((char *)r + REQ_TAG_OFF) == 7 &&
	       *(volatile int *)((char *)r + REQ_ERROR_OFF) == MPI_SUCCESS &&
	       *(volatile size_t *)((char *)r + REQ_UCOUNT_OFF) == 2;
	if (MPI_Wait(&r, MPI_STATUS_IGNORE) != MPI_SUCCESS || !ok)
		goto slow;
	lh_poll_fast = 1;
	done_ok = done;
slow:
	return lh_poll_fast;
}
#else
int lh_poll_init(void)
{
	return 0;
}

int lh_test_done(MPI_Request *r, int *flag)
{
	return lh_test(r, flag, MPI_STATUS_IGNORE);
}

void lh_done_free(void)
{
}
#endif

int lh_wait_idle(MPI_Request *req)
{
	struct timespec ts = { 0, 200 * 1000 };
	int done = 0, ret;

	while ((ret = MPI_Test(req, &done, MPI_STATUS_IGNORE)) == MPI_SUCCESS && !done)
		nanosleep(&ts, NULL);
	return ret;
}

#ifdef OPEN_MPI
extern bool opal_progress_set_yield_when_idle(bool yield) __attribute__((weak));

static int yield_before = -1;   /* Open MPI's choice while lh_yield_idle(1) holds */

void lh_yield_idle(int on)
{
	if (!opal_progress_set_yield_when_idle)
		return;
	if (on && yield_before < 0)
		yield_before = opal_progress_set_yield_when_idle(true);
	else if (!on && yield_before >= 0)
		opal_progress_set_yield_when_idle(yield_before != 0);
	if (!on)
		yield_before = -1;
}
#else
void lh_yield_idle(int on)
{
	(void)on;   /* MPICH has no such switch at run time */
}
#endif

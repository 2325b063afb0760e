/* lh_p2p.c - point-to-point calls and requests in the lower half
 * (functions.list: lower; docs/split.md, "Messages in flight").
 *
 * Every request is a neutral handle with a record in the ledger (kind,
 * envelope, state, status), so that a checkpoint can complete what is in
 * flight and a restart can post again what is not:
 * - sends are counted per world rank of the destination when posted,
 *   receives per world rank of the source when MPI delivers them;
 * - a call that waits (Recv, Send, Sendrecv, Probe, Wait, Waitall, ...)
 *   is a loop of its non-blocking form; when a checkpoint begins it
 *   returns STS_AGAIN with its requests kept in the ledger's continuation,
 *   the upper wrapper parks on its way out and calls again, and the call
 *   goes on with the same requests, in this MPI or in a fresh one;
 * - a blocking Send/Recv/Sendrecv keeps its real requests to itself and
 *   enters them in the ledger only when a checkpoint catches it (blk_*);
 * - at the checkpoint the rank's parked main thread drains (lh_p2p_drain,
 *   a job of the checkpoint thread): the
 *   ranks exchange their send counts, every rank receives what it was sent
 *   into the drain buffer (or MPI completes a receive the program posted),
 *   and every send completes;
 * - every receive-side call looks in the drain buffer before MPI: Recv,
 *   Irecv, Sendrecv, Probe, Iprobe, Mprobe, Improbe (an Mprobe'd message is
 *   received at once into the ledger, so a message handle survives a
 *   restart too).
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/err.h"
#include "lh.h"
#include "lh_ledger.h"

#define ANY_TAG (-1)            /* MPI_ANY_TAG in both ABIs */

enum { OP_RECV = 1, OP_SEND, OP_SENDRECV, OP_REPLACE, OP_COLL, OP_WAITALL, OP_ENTRY };

static inline MPI_Comm rcomm(uint32_t c)
{
	return (MPI_Comm)(LH_HCAST)lh_real(STS_COMM, c);
}

static inline MPI_Datatype rtype(uint32_t t)
{
	return (MPI_Datatype)(LH_HCAST)lh_real(STS_DATATYPE, t);
}

static inline int ckpt_pending(void)
{
	return __atomic_load_n(&lh_info->ckpt_pending, __ATOMIC_RELAXED) != 0;
}

/* The end of a turn of a loop that waits and found nothing: 1 when a
 * checkpoint began. Every POLLS_PER_YIELD turns the CPU is offered to
 * whoever else wants it: a wait is a loop of tests, and MPICH's test
 * never yields, so ranks sharing CPUs (4 ranks on 2) spun away whole
 * time slices that the rank they wait for needed (Open MPI's
 * opal_progress yields by itself when the job is oversubscribed). */
#define POLLS_PER_YIELD 256

static inline int idle(unsigned *polls)
{
	if (++*polls % POLLS_PER_YIELD == 0)
		sched_yield();
	if (lh_info->ntls > 1)   /* one thread: nobody to let the lock go to */
		lh_tls_yield();
	return ckpt_pending();
}

static inline void count(uint64_t *v, uint32_t comm, int rank, int delta)
{
	/* MPI_COMM_WORLD (neutral 1) inline: every message of most programs */
	int w = comm == 1 && (unsigned)rank < (unsigned)lh_lg->world_size ? rank
							       : lh_world_of(comm, rank);

	if (w >= 0)
		v[w] += (uint64_t)(int64_t)delta;
}

static void status_set(struct sts_status *st, int source, int tag, int error, long long bytes)
{
	if (st) {
		st->source = source;
		st->tag = tag;
		st->error = error;
		st->cancelled = 0;
		st->count = bytes;
	}
}

/* ---- the drain buffer ---- */

static struct lh_msg *drain_find(uint32_t comm, int src, int tag, struct lh_msg **prev)
{
	struct lh_msg *p = NULL;

	for (struct lh_msg *m = lh_lg->drain_head; m; p = m, m = m->next)
		if (m->comm == comm && (src == STS_ANY_SOURCE || m->source == src) &&
		    (tag == ANY_TAG || m->tag == tag)) {
			*prev = p;
			return m;
		}
	return NULL;
}

static void drain_unlink(struct lh_msg *m, struct lh_msg *prev)
{
	if (prev)
		prev->next = m->next;
	else
		lh_lg->drain_head = m->next;
	if (lh_lg->drain_tail == m)
		lh_lg->drain_tail = prev;
	lh_lg->drain_n--;
	lh_lg->drain_bytes -= m->bytes;
}

/* A buffered message into the program's buffer, as MPI would: through the
 * datatype's type map (the message came as bytes, which on one machine are
 * the packed form), MPI_ERR_TRUNCATE when it does not fit. */
static int deliver(const struct lh_msg *m, void *buf, int cnt, uint32_t dt, struct sts_status *st)
{
	MPI_Datatype t = rtype(dt);
	int size = 0, pos = 0, ret = MPI_Type_size(t, &size);
	uint64_t cap = (uint64_t)(cnt > 0 ? cnt : 0) * (uint64_t)size;
	uint64_t take = m->bytes < cap ? m->bytes : cap;
	int n = size ? (int)(take / (uint64_t)size) : 0;

	if (ret == MPI_SUCCESS && n > 0)
		ret = MPI_Unpack(m->data, (int)take, &pos, buf, n, t, MPI_COMM_SELF);
	if (ret == MPI_SUCCESS && m->bytes > cap)
		ret = MPI_ERR_TRUNCATE;
	status_set(st, m->source, m->tag, lh_err(ret), (long long)take);
	return ret;
}

/* ---- requests ---- */

static struct lh_req *req_rec(uint32_t n, struct lh_slot **slot)
{
	struct lh_slot *s = lh_slot_of(STS_REQUEST, n);

	if (slot)
		*slot = s;
	return s ? s->rec : NULL;
}

/* a new request of kind for real; 0 when the ledger is full */
static uint32_t req_new(MPI_Request real, uint32_t kind)
{
	uint32_t n = lh_alloc(STS_REQUEST, LH_HVAL(real));
	struct lh_req *q = req_rec(n, NULL);

	if (!q) {
		lh_release(STS_REQUEST, n);
		return 0;
	}
	q->kind = kind;
	return n;
}

/* Test a pending request in MPI: 1 when it completed (now DONE, counted) */
static int progress(struct lh_slot *s)
{
	struct lh_req *q = s->rec;
	MPI_Request r = (MPI_Request)(LH_HCAST)s->real;
	MPI_Status rs;
	int flag = 0, ret;

	memset(&rs, 0, sizeof(rs));
	ret = lh_test(&r, &flag, &rs);
	if (ret == MPI_SUCCESS && !flag)
		return 0;
	s->real = LH_HVAL(r);
	lh_status_out(&rs, &q->status);
	if (ret != MPI_SUCCESS)
		q->status.error = lh_err(ret);
	if (q->kind == REQ_RECV && !q->status.cancelled && q->status.source >= 0)
		count(lh_lg->recv_from, q->comm, q->status.source, 1);
	if (q->kind == REQ_SEND) {
		lh_lg->pending_sends--;
		if (q->status.cancelled)
			count(lh_lg->sent_to, q->comm, q->peer, -1);
	}
	if (q->kind == REQ_OTHER && !(q->errh & STS_ERRH_FILE))   /* MPI-IO's count its bytes */
		status_set(&q->status, STS_ANY_SOURCE, ANY_TAG, q->status.error, 0);
	q->state = REQ_DONE;
	return 1;
}

int lh_req_detached_done(uint32_t n)
{
	struct lh_slot *s = lh_slot_of(STS_REQUEST, n);
	struct lh_req *q = s ? s->rec : NULL;

	if (!q || !q->detached || q->kind != REQ_OTHER || q->state != REQ_PENDING || !progress(s))
		return 0;
	lh_release(STS_REQUEST, n);
	return 1;
}

/* whose handler raises request q's error (lh_me->err_on): its record's
 * errh, else its communicator (a send's or receive's), else (no such
 * request) MPI_COMM_WORLD */
static uint32_t errh_of(const struct lh_req *q)
{
	return !q ? 1 : q->errh ? q->errh : q->comm;
}

/* Is request *pn complete? 1: yes, its status in *st (when st), its error
 * class in *err, and unless keep it is freed (*pn = 0); 0: not yet. */
static int req_test(uint32_t *pn, struct sts_status *st, int keep, int *err)
{
	struct lh_slot *s;
	struct lh_req *q = req_rec(*pn, &s);

	*err = 0;
	if (*pn == 0) {
		status_set(st, STS_ANY_SOURCE, ANY_TAG, 0, 0);
		return 1;
	}
	if (!q) {
		*err = lh_err(MPI_ERR_REQUEST);
		lh_me->err_on = errh_of(q);
		return 1;
	}
	if (q->state == REQ_PENDING && !progress(s))
		return 0;
	if (q->state == REQ_INACTIVE) {   /* as a null request */
		status_set(st, STS_ANY_SOURCE, ANY_TAG, 0, 0);
		return 1;
	}
	if (st)
		*st = q->status;
	*err = q->status.error;
	if (__builtin_expect(*err != 0, 0))
		lh_me->err_on = errh_of(q);
	if (!keep && q->persist) {
		/* seen complete: inactive again, under the same handle */
		q->state = REQ_INACTIVE;
		s->real = lh_lg->tables[STS_REQUEST].slot[0].real;
	} else if (!keep) {
		lh_release(STS_REQUEST, *pn);
		*pn = 0;
	}
	return 1;
}

/* an active request: not null, not a persistent one at rest (MPI-3.1
 * 3.7.5: Waitany, Testany, Waitsome, Testsome skip the others) */
static int req_active(uint32_t n)
{
	struct lh_req *q = n ? req_rec(n, NULL) : NULL;

	return n && (!q || q->state != REQ_INACTIVE);
}

void lh_req_raises_on(uint32_t req, uint32_t obj)
{
	struct lh_req *q = req_rec(req, NULL);

	if (q)
		q->errh = obj;
}

/* what a receive (or a persistent request) is posted with */
static void req_envelope(struct lh_req *q, void *buf, int cnt, uint32_t dt, int peer, int tag,
			 uint32_t comm)
{
	q->buf = buf;
	q->count = cnt;
	q->datatype = dt;
	q->peer = peer;
	q->tag = tag;
	q->comm = comm;
}

/* a receive's request (r: the real one, or null) into the ledger: its
 * neutral handle, or 0 when the ledger is full (r cancelled) */
static uint32_t recv_track(MPI_Request r, void *buf, int cnt, uint32_t dt, int src, int tag,
			   uint32_t comm)
{
	uint32_t n = req_new(r, REQ_RECV);
	struct lh_req *q = req_rec(n, NULL);

	if (!q) {
		if (r != MPI_REQUEST_NULL) {
			MPI_Cancel(&r);
			MPI_Request_free(&r);
		}
		return 0;
	}
	req_envelope(q, buf, cnt, dt, src, tag, comm);
	q->seq = lh_slot_of(STS_REQUEST, n)->seq;
	return n;
}

/* Post receive q (its envelope set) of slot s: from MPI_PROC_NULL it
 * completes at once, as in MPI; a message the drain buffer holds completes
 * it at once (counted when drained); otherwise MPI_Irecv. */
static int recv_start(struct lh_slot *s, struct lh_req *q)
{
	struct lh_msg *prev = NULL, *m;
	MPI_Request r;
	int ret;

	if (q->peer == STS_PROC_NULL) {
		status_set(&q->status, STS_PROC_NULL, ANY_TAG, 0, 0);
		q->state = REQ_DONE;
		return MPI_SUCCESS;
	}
	m = lh_lg->drain_head ? drain_find(q->comm, q->peer, q->tag, &prev) : NULL;
	if (m) {
		deliver(m, q->buf, q->count, q->datatype, &q->status);
		drain_unlink(m, prev);
		lg_free(m);
		q->state = REQ_DONE;
		return MPI_SUCCESS;
	}
	ret = MPI_Irecv(q->buf, q->count, rtype(q->datatype), lh_rank_in(q->peer), q->tag,
			rcomm(q->comm), &r);
	if (ret != MPI_SUCCESS)
		return ret;
	s->real = LH_HVAL(r);
	q->state = REQ_PENDING;
	return MPI_SUCCESS;
}

static int post_recv(void *buf, int cnt, uint32_t dt, int src, int tag, uint32_t comm, uint32_t *req)
{
	struct lh_slot *s;
	struct lh_req *q;
	int ret;

	*req = recv_track(MPI_REQUEST_NULL, buf, cnt, dt, src, tag, comm);
	q = req_rec(*req, &s);
	if (!q)
		return MPI_ERR_NO_MEM;
	ret = recv_start(s, q);
	if (ret != MPI_SUCCESS) {
		lh_release(STS_REQUEST, *req);
		*req = 0;
	}
	return ret;
}

int lh_Bsend(const void *buf, int cnt, uint32_t dt, int dest, int tag, uint32_t comm);

/* ---- buffered sends ----
 * MPI_Bsend, MPI_Ibsend and a started MPI_Bsend_init send a copy that the
 * lower half packs (MPI_Pack, sent as MPI_PACKED: the same bytes on one
 * machine), as a standard send: counted, tracked and completed by the
 * drain like any other, so nothing of a buffered send is left inside the
 * MPI at a checkpoint and nothing needs attaching again at a restart. The
 * copy is kept with its request (lh_keep) until the request is let go of.
 * The program's attached buffer stays its own (uh_core.c): it is not used,
 * nor its size checked. */
static void *bsend_copy;        /* the copy the last buffered send_start made */
static uint32_t *bsends;        /* MPI_Bsend's requests not seen complete */
static size_t nbsends, bsends_cap;

static int pack_copy(const void *buf, int cnt, MPI_Datatype t, uint32_t comm, int *bytes)
{
	int size = 0, ret = MPI_Pack_size(cnt, t, rcomm(comm), &size);

	*bytes = 0;
	if (ret != MPI_SUCCESS)
		return ret;
	bsend_copy = malloc(size > 0 ? (size_t)size : 1);
	if (!bsend_copy)
		return MPI_ERR_NO_MEM;
	ret = MPI_Pack(buf, cnt, t, bsend_copy, size, bytes, rcomm(comm));
	if (ret != MPI_SUCCESS) {
		free(bsend_copy);
		bsend_copy = NULL;
	}
	return ret;
}

/* mode: 0 standard, 1 synchronous, 2 ready, 3 buffered (the copy in
 * bsend_copy); counted as sent. Inline, as send_blocking: on the way from a
 * blocking send's call to its message (mode is a constant there) */
static inline __attribute__((always_inline))
int send_start(int mode, const void *buf, int cnt, MPI_Datatype t, int dest, int tag,
	       uint32_t comm, MPI_Request *r)
{
	int d = lh_rank_in(dest), ret, bytes = 0;

	if (mode == 3 && (ret = pack_copy(buf, cnt, t, comm, &bytes)) != MPI_SUCCESS)
		return ret;
	ret = mode == 1 ? MPI_Issend(buf, cnt, t, d, tag, rcomm(comm), r) :
	      mode == 2 ? MPI_Irsend(buf, cnt, t, d, tag, rcomm(comm), r) :
	      mode == 3 ? MPI_Isend(bsend_copy, bytes, MPI_PACKED, d, tag, rcomm(comm), r) :
			  MPI_Isend(buf, cnt, t, d, tag, rcomm(comm), r);
	if (ret != MPI_SUCCESS && mode == 3) {
		free(bsend_copy);
		bsend_copy = NULL;
	}
	if (ret != MPI_SUCCESS)
		return ret;
	lh_lg->pending_sends++;
	if (dest >= 0)
		count(lh_lg->sent_to, comm, dest, 1);
	return MPI_SUCCESS;
}

/* a started send's request into the ledger: its neutral handle, or 0 when
 * the ledger is full (the send goes on, uncounted: the drain may miss it) */
static uint32_t send_track(MPI_Request r, int dest, int tag, uint32_t comm)
{
	uint32_t n = req_new(r, REQ_SEND);
	struct lh_req *q = req_rec(n, NULL);

	if (!q) {
		lh_lg->pending_sends--;
		if (dest >= 0)
			count(lh_lg->sent_to, comm, dest, -1);
		return 0;
	}
	q->peer = dest;
	q->tag = tag;
	q->comm = comm;
	return n;
}

static int post_send(int mode, const void *buf, int cnt, MPI_Datatype t, int dest, int tag,
		     uint32_t comm, uint32_t *req)
{
	MPI_Request r;
	int ret = send_start(mode, buf, cnt, t, dest, tag, comm, &r);

	if (ret != MPI_SUCCESS)
		return ret;
	*req = send_track(r, dest, tag, comm);
	if (mode == 3) {
		if (*req)
			lh_keep(*req, bsend_copy);
		else
			free(bsend_copy);   /* MPI still sends it: it leaks, the ledger is full */
		bsend_copy = NULL;
	}
	return *req ? MPI_SUCCESS : MPI_ERR_NO_MEM;
}

/* ---- the continuation of a call that returned STS_AGAIN ---- */

static uint64_t key_of(uint32_t op, uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
	uint64_t h = op * 0x9e3779b97f4a7c15ull;

	h = (h ^ a) * 0x100000001b3ull;
	h = (h ^ b) * 0x100000001b3ull;
	h = (h ^ c) * 0x100000001b3ull;
	return (h ^ d) * 0x100000001b3ull;
}

/* this thread's continuation (a new one: make), or NULL */
static struct lh_cont *cont_of(int make)
{
	uint64_t who = lh_me->uh_fs;

	for (uint32_t i = 0; i < LH_CONTS; i++)
		if (lh_lg->cont[i].op && lh_lg->cont[i].owner == who)
			return &lh_lg->cont[i];
	for (uint32_t i = 0; make && i < LH_CONTS; i++)
		if (!lh_lg->cont[i].op) {
			lh_lg->cont[i].owner = who;
			lh_lg->nconts++;
			return &lh_lg->cont[i];
		}
	return NULL;
}

static int cont_take(uint32_t op, uint64_t key, uint32_t req[2], void **tmp)
{
	struct lh_cont *c = lh_lg->nconts ? cont_of(0) : NULL;

	if (!c || c->op != op || c->key != key)
		return 0;
	req[0] = c->req[0];
	req[1] = c->req[1];
	if (tmp)
		*tmp = c->tmp;
	c->op = 0;
	lh_lg->nconts--;
	return 1;
}

static int cont_park(uint32_t op, uint64_t key, const uint32_t req[2], void *tmp)
{
	struct lh_cont *c = cont_of(1);

	if (!c)   /* more threads caught in a call than LH_MAX_THREADS */
		return lh_err(MPI_ERR_INTERN);
	c->op = op;
	c->key = key;
	c->req[0] = req[0];
	c->req[1] = req[1];
	c->tmp = tmp;
	return STS_AGAIN;
}

/* Wait for req[0] and req[1] (0: none); status of req[0] */
static int wait2(uint32_t op, uint64_t key, uint32_t r[2], struct sts_status *st, void *tmp)
{
	unsigned polls = 0;
	int err = 0, e;

	for (;;) {
		if (r[0] && req_test(&r[0], st, 0, &e))
			err = err ? err : e;
		if (r[1] && req_test(&r[1], NULL, 0, &e))
			err = err ? err : e;
		if (!r[0] && !r[1])
			break;
		if (idle(&polls))
			return cont_park(op, key, r, tmp);
	}
	lg_free(tmp);
	return err;
}

/* ---- the calls ---- */

int lh_Isend(const void *buf, int cnt, uint32_t dt, int dest, int tag, uint32_t comm, uint32_t *req)
{
	return lh_err(post_send(0, buf, cnt, rtype(dt), dest, tag, comm, req));
}

int lh_Issend(const void *buf, int cnt, uint32_t dt, int dest, int tag, uint32_t comm, uint32_t *req)
{
	return lh_err(post_send(1, buf, cnt, rtype(dt), dest, tag, comm, req));
}

int lh_Irsend(const void *buf, int cnt, uint32_t dt, int dest, int tag, uint32_t comm, uint32_t *req)
{
	return lh_err(post_send(2, buf, cnt, rtype(dt), dest, tag, comm, req));
}

/* MPI_Bsend's requests that completed: let go of (with their copies) */
static void bsends_reap(void)
{
	for (size_t i = 0; i < nbsends;) {
		struct lh_slot *s;
		struct lh_req *q = req_rec(bsends[i], &s);
		uint32_t n;

		if (q && q->state == REQ_PENDING && !progress(s)) {
			i++;
			continue;
		}
		n = bsends[i];
		lh_release(STS_REQUEST, n);   /* lh_bsend_gone takes it out */
		if (i < nbsends && bsends[i] == n)   /* no request any more */
			bsends[i] = bsends[--nbsends];
	}
}

void lh_bsend_gone(uint32_t req)
{
	for (size_t i = 0; i < nbsends; i++)
		if (bsends[i] == req) {
			bsends[i] = bsends[--nbsends];
			return;
		}
}

int lh_Bsend(const void *buf, int cnt, uint32_t dt, int dest, int tag, uint32_t comm)
{
	uint32_t n = 0;
	struct lh_req *q;
	int ret;

	bsends_reap();
	if (nbsends == bsends_cap) {
		size_t cap = bsends_cap ? 2 * bsends_cap : 64;
		uint32_t *b = realloc(bsends, cap * sizeof(*b));

		if (!b)
			return lh_err(MPI_ERR_NO_MEM);
		bsends = b;
		bsends_cap = cap;
	}
	ret = post_send(3, buf, cnt, rtype(dt), dest, tag, comm, &n);
	if (ret != MPI_SUCCESS)
		return lh_err(ret);
	q = req_rec(n, NULL);
	if (q)
		q->detached = 1;   /* complete at once for the program; the drain finishes it */
	bsends[nbsends++] = n;
	return 0;
}

/* complete at once, with a copy on its way as MPI_Bsend's (MPI-3.1 3.7.2:
 * an MPI_Ibsend completes once the message is buffered) */
int lh_Ibsend(const void *buf, int cnt, uint32_t dt, int dest, int tag, uint32_t comm, uint32_t *req)
{
	struct lh_req *q;
	int ret = lh_Bsend(buf, cnt, dt, dest, tag, comm);

	if (ret)
		return ret;
	*req = req_new(MPI_REQUEST_NULL, REQ_OTHER);
	q = req_rec(*req, NULL);
	if (!q)
		return lh_err(MPI_ERR_NO_MEM);
	q->comm = comm;
	q->state = REQ_DONE;
	status_set(&q->status, STS_ANY_SOURCE, ANY_TAG, 0, 0);
	return 0;
}

/* Every MPI_Bsend delivered and its request freed (MPI_Buffer_detach,
 * MPI-3.1 3.6.1; MPI_Finalize, as MPICH's own flushes its buffer); waits
 * the way every call does, parking for a checkpoint: 0 or STS_AGAIN */
int lh_bsends_flush(void)
{
	unsigned polls = 0;

	for (;;) {
		bsends_reap();
		if (!nbsends)
			return 0;
		if (idle(&polls))
			return STS_AGAIN;
	}
}

int lh_Buffer_detach(void *buffer, int *size)
{
	(void)buffer;
	(void)size;
	return lh_bsends_flush();
}

int lh_Irecv(void *buf, int cnt, uint32_t dt, int src, int tag, uint32_t comm, uint32_t *req)
{
	return lh_err(post_recv(buf, cnt, dt, src, tag, comm, req));
}

/* ---- persistent requests ----
 * MPI_Send_init and the others make a record (a send's or a receive's,
 * persist set) and no real request: it is inactive. MPI_Start posts its
 * operation as MPI_Isend or MPI_Irecv would (a receive the drain buffer can
 * satisfy completes from it), the real request under the same neutral
 * handle; once the program has seen it complete (Wait, Test, ...) it is
 * inactive again. At a checkpoint an active one is a pending send or
 * receive like any other; a restart posts an active receive again and has
 * nothing to do for an inactive one (docs/split.md, "Messages in flight"). */

/* mode: as send_start's; the arguments checked by the real MPI's own
 * init, whose request is freed at once */
static int init_req(uint32_t kind, int mode, const void *buf, int cnt, uint32_t dt, int peer,
		    int tag, uint32_t comm, uint32_t *req)
{
	MPI_Datatype t = rtype(dt);
	MPI_Comm c = rcomm(comm);
	int p = lh_rank_in(peer), ret;
	MPI_Request r;
	struct lh_req *q;

	ret = kind == REQ_RECV ? MPI_Recv_init((void *)buf, cnt, t, p, tag, c, &r) :
	      mode == 1 ? MPI_Ssend_init(buf, cnt, t, p, tag, c, &r) :
	      mode == 2 ? MPI_Rsend_init(buf, cnt, t, p, tag, c, &r) :
			  MPI_Send_init(buf, cnt, t, p, tag, c, &r);
	if (ret != MPI_SUCCESS)
		return ret;
	MPI_Request_free(&r);
	*req = req_new(MPI_REQUEST_NULL, kind);
	q = req_rec(*req, NULL);
	if (!q)
		return MPI_ERR_NO_MEM;
	q->persist = 1 + (uint32_t)mode;
	q->state = REQ_INACTIVE;
	req_envelope(q, (void *)buf, cnt, dt, peer, tag, comm);
	return MPI_SUCCESS;
}

int lh_Bsend_init(const void *buf, int cnt, uint32_t dt, int dest, int tag, uint32_t comm,
		  uint32_t *req)
{
	return lh_err(init_req(REQ_SEND, 3, buf, cnt, dt, dest, tag, comm, req));
}

int lh_Send_init(const void *buf, int cnt, uint32_t dt, int dest, int tag, uint32_t comm,
		 uint32_t *req)
{
	return lh_err(init_req(REQ_SEND, 0, buf, cnt, dt, dest, tag, comm, req));
}

int lh_Ssend_init(const void *buf, int cnt, uint32_t dt, int dest, int tag, uint32_t comm,
		  uint32_t *req)
{
	return lh_err(init_req(REQ_SEND, 1, buf, cnt, dt, dest, tag, comm, req));
}

int lh_Rsend_init(const void *buf, int cnt, uint32_t dt, int dest, int tag, uint32_t comm,
		  uint32_t *req)
{
	return lh_err(init_req(REQ_SEND, 2, buf, cnt, dt, dest, tag, comm, req));
}

int lh_Recv_init(void *buf, int cnt, uint32_t dt, int src, int tag, uint32_t comm, uint32_t *req)
{
	return lh_err(init_req(REQ_RECV, 0, buf, cnt, dt, src, tag, comm, req));
}

int lh_Start(uint32_t *req)
{
	struct lh_slot *s;
	struct lh_req *q = req_rec(*req, &s);
	MPI_Request r = MPI_REQUEST_NULL;
	int ret;

	lh_me->err_on = errh_of(q);
	if (!q || !q->persist || q->state != REQ_INACTIVE)
		return lh_err(MPI_ERR_REQUEST);   /* not persistent, or already active */
	/* posted now: a restart posts active receives again in this order */
	s->seq = ++lh_lg->seq;
	q->seq = s->seq;
	status_set(&q->status, STS_ANY_SOURCE, ANY_TAG, 0, 0);
	if (q->kind == REQ_SEND && q->persist == 4) {
		/* buffered: a copy goes as MPI_Bsend's does, the request is
		 * complete (MPI-3.1 3.9: once the message is buffered) */
		ret = lh_Bsend(q->buf, q->count, q->datatype, q->peer, q->tag, q->comm);
		if (ret)
			return ret;
		s->real = LH_HVAL(MPI_REQUEST_NULL);
		q->state = REQ_DONE;
		return 0;
	}
	if (q->kind == REQ_SEND) {
		ret = send_start((int)q->persist - 1, q->buf, q->count, rtype(q->datatype), q->peer,
				 q->tag, q->comm, &r);
		if (ret != MPI_SUCCESS)
			return lh_err(ret);
		s->real = LH_HVAL(r);
		q->state = REQ_PENDING;
		return 0;
	}
	return lh_err(recv_start(s, q));
}

/* ---- blocking calls ----
 * A blocking send or receive starts its non-blocking form and tests the real
 * request itself: no ledger record, no continuation key, unless a checkpoint
 * begins before it completes. Then its requests go into the ledger as
 * Isend/Irecv would have made them (blk_adopt) and the call returns
 * STS_AGAIN with its continuation, like every other call that waits. */
struct blk {
	MPI_Request r;
	uint32_t kind;          /* REQ_SEND, REQ_RECV; 0: done (or none) */
	void *buf;
	int count, peer, tag;
	uint32_t datatype, comm;
};

/* 1 when b completed (counted; its status in *st when st, error class in *err) */
static int blk_test(struct blk *b, struct sts_status *st, int *err)
{
	MPI_Status rs;
	struct sts_status ns;
	int flag = 0, ret;

	if (b->kind == REQ_SEND) {
		ret = lh_sent_at_once(b->r) ? (flag = 1, MPI_SUCCESS)
					    : lh_test(&b->r, &flag, MPI_STATUS_IGNORE);
		if (ret == MPI_SUCCESS && !flag)
			return 0;
		lh_lg->pending_sends--;
		*err = lh_err(ret);
		b->kind = 0;
		return 1;
	}
	if (!st && b->peer >= 0) {   /* the source known, the status not wanted */
		ret = lh_test_done(&b->r, &flag);
		if (ret == MPI_SUCCESS && !flag)
			return 0;
		/* in error too: truncated, the message was taken */
		count(lh_lg->recv_from, b->comm, b->peer, 1);
		*err = lh_err(ret);
		b->kind = 0;
		return 1;
	}
	memset(&rs, 0, sizeof(rs));
	ret = lh_test(&b->r, &flag, &rs);
	if (ret == MPI_SUCCESS && !flag)
		return 0;
	lh_status_out(&rs, &ns);
	if (ret != MPI_SUCCESS)
		ns.error = lh_err(ret);
	if (!ns.cancelled && ns.source >= 0)
		count(lh_lg->recv_from, b->comm, ns.source, 1);
	if (st)
		*st = ns;
	*err = ns.error;
	b->kind = 0;
	return 1;
}

/* b's request into the ledger: its neutral handle (0: done, or no room) */
static uint32_t blk_adopt(const struct blk *b)
{
	if (b->kind == REQ_SEND)
		return send_track(b->r, b->peer, b->tag, b->comm);
	if (b->kind == REQ_RECV)
		return recv_track(b->r, b->buf, b->count, b->datatype, b->peer, b->tag, b->comm);
	return 0;
}

/* Wait for b[0] and b[1] (status of b[0]); at a checkpoint, their
 * continuation op under the key key(args) */
static int blk_wait(struct blk b[2], struct sts_status *st, uint32_t op,
		    uint64_t (*key)(const void *args), const void *args)
{
	unsigned polls = 0;
	int err = 0, e;

	for (;;) {
		if (b[0].kind && blk_test(&b[0], st, &e))
			err = err ? err : e;
		if (b[1].kind && blk_test(&b[1], NULL, &e))
			err = err ? err : e;
		if (!b[0].kind && !b[1].kind)
			return err;
		if (idle(&polls)) {
			uint32_t r[2] = { blk_adopt(&b[0]), blk_adopt(&b[1]) };

			return cont_park(op, key(args), r, NULL);
		}
	}
}

/* Open MPI's ways below (a send sent at once, a receive's spin on its
 * completion word); MPICH has neither, and its blocking calls take the
 * general ways (through the fast ways, which did nothing more there than
 * order the code differently, its ping-pong was 15 ns slower: 9
 * alternated rounds, 2026-11-27) */
#ifdef OPEN_MPI
#define BLK_FAST 1
#else
#define BLK_FAST 0
#endif

/* A blocking receive's turns while it is pending, as tight as Open MPI's
 * own MPI_Wait (its completion word, opal_progress) with idle()'s duties
 * on each turn: blk_wait's turn (blk_test, lh_test_done, their frames)
 * was longer, which delayed seeing a message and came on every one-way
 * message of a ping-pong. 1 when b completed (for blk_test to complete,
 * as before) or a checkpoint began (blk_wait parks); 0, at once, with
 * MPICH or when the word is not trusted: blk_wait's turns then. */
static inline int blk_spin(const struct blk *b)
{
#ifdef OPEN_MPI
	unsigned polls = 0;

	if (!lh_poll_fast || !lh_req_active(b->r))
		return 0;
	while (!lh_req_complete(b->r)) {
		opal_progress();
		if (lh_req_complete(b->r) || idle(&polls))
			break;
	}
	return 1;
#else
	(void)b;
	return 0;
#endif
}

/* b a send to dest (its request from send_start). Only the fields a send
 * uses are set, here and in blk_recv: zeroing the two blk of a call (96
 * bytes, a rep stos) was a tenth of what the lower half adds to a blocking
 * call */
static inline void blk_send(struct blk *b, int dest, int tag, uint32_t comm)
{
	b->kind = REQ_SEND;
	b->peer = dest;
	b->tag = tag;
	b->comm = comm;
}

static int blk_recv(struct blk *b, void *buf, int cnt, uint32_t dt, int src, int tag, uint32_t comm)
{
	int ret;

	lh_done_free();
	ret = MPI_Irecv(buf, cnt, rtype(dt), lh_rank_in(src), tag, rcomm(comm), &b->r);

	b->kind = ret == MPI_SUCCESS ? REQ_RECV : 0;
	b->buf = buf;
	b->count = cnt;
	b->datatype = dt;
	b->peer = src;
	b->tag = tag;
	b->comm = comm;
	return ret;
}

/* a continuation of op under this call's key: its requests in r */
static inline int continued(uint32_t op, uint64_t (*key)(const void *args), const void *args,
			    uint32_t r[2])
{
	return lh_lg->nconts && cont_take(op, key(args), r, NULL);
}

/* the drain buffer has a message for (comm, src, tag), or src is
 * MPI_PROC_NULL: the receive completes at once, the ledger's way */
static inline int recv_at_once(uint32_t comm, int src, int tag)
{
	struct lh_msg *prev;

	return src == STS_PROC_NULL || (lh_lg->drain_head && drain_find(comm, src, tag, &prev));
}

struct p2p_args {
	const void *sbuf;
	void *rbuf;
	int scnt, rcnt, dest, src, stag, rtag;
	uint32_t stype, rtype, comm, mode;
};

static uint64_t send_key(const void *p)
{
	const struct p2p_args *a = p;

	return key_of(OP_SEND + (a->mode << 8), (uint64_t)(uintptr_t)a->sbuf,
		      ((uint64_t)(uint32_t)a->scnt << 32) | a->stype,
		      ((uint64_t)(uint32_t)a->dest << 32) | (uint32_t)a->stag, a->comm);
}

/* a blocking send's wait for b[0] (started), its key's arguments built
 * only now: most sends complete at once (below) */
static inline __attribute__((always_inline))
int send_wait(struct blk b[2], int mode, const void *buf, int cnt, uint32_t dt, int dest,
	      int tag, uint32_t comm)
{
	struct p2p_args a = { .sbuf = buf, .scnt = cnt, .stype = dt, .dest = dest, .stag = tag,
			      .comm = comm, .mode = (uint32_t)mode };

	return blk_wait(b, NULL, OP_SEND + ((uint32_t)mode << 8), send_key, &a);
}

/* a blocking send the general way: its own continuation first, if a
 * checkpoint left one (every send above MPICH) */
static int send_continued(int mode, const void *buf, int cnt, uint32_t dt, int dest, int tag,
			  uint32_t comm)
{
	struct p2p_args a = { .sbuf = buf, .scnt = cnt, .stype = dt, .dest = dest, .stag = tag,
			      .comm = comm, .mode = (uint32_t)mode };
	uint32_t op = OP_SEND + ((uint32_t)mode << 8), r[2] = { 0, 0 };
	struct blk b[2];
	int ret;

	if (continued(op, send_key, &a, r))
		return wait2(op, send_key(&a), r, NULL, NULL);
	blk_send(&b[0], dest, tag, comm);
	b[1].kind = 0;
	ret = send_start(mode, buf, cnt, rtype(dt), dest, tag, comm, &b[0].r);
	if (ret != MPI_SUCCESS)
		return lh_err(ret);
	return send_wait(b, mode, buf, cnt, dt, dest, tag, comm);
}

/* A send that Open MPI sent at once (lh_sent_at_once) returns without
 * blk_wait, as blk_wait's first turn would have (counted by send_start,
 * no longer pending); the arguments of a continuation's key are written
 * only on the way to a wait: stores on the way to every message before */
static inline __attribute__((always_inline))
int send_blocking(int mode, const void *buf, int cnt, uint32_t dt, int dest, int tag,
		  uint32_t comm)
{
	struct blk b[2];
	int ret;

	if (!BLK_FAST || __builtin_expect(lh_lg->nconts != 0, 0))
		return send_continued(mode, buf, cnt, dt, dest, tag, comm);
	blk_send(&b[0], dest, tag, comm);
	b[1].kind = 0;
	ret = send_start(mode, buf, cnt, rtype(dt), dest, tag, comm, &b[0].r);
	if (ret != MPI_SUCCESS)
		return lh_err(ret);
	if (lh_sent_at_once(b[0].r)) {
		lh_lg->pending_sends--;
		return 0;
	}
	return send_wait(b, mode, buf, cnt, dt, dest, tag, comm);
}

int lh_Send(const void *buf, int cnt, uint32_t dt, int dest, int tag, uint32_t comm)
{
	return send_blocking(0, buf, cnt, dt, dest, tag, comm);
}

int lh_Ssend(const void *buf, int cnt, uint32_t dt, int dest, int tag, uint32_t comm)
{
	return send_blocking(1, buf, cnt, dt, dest, tag, comm);
}

int lh_Rsend(const void *buf, int cnt, uint32_t dt, int dest, int tag, uint32_t comm)
{
	return send_blocking(2, buf, cnt, dt, dest, tag, comm);
}

static uint64_t recv_key(const void *p)
{
	const struct p2p_args *a = p;

	return key_of(OP_RECV, (uint64_t)(uintptr_t)a->rbuf, ((uint64_t)(uint32_t)a->rcnt << 32) | a->rtype,
		      ((uint64_t)(uint32_t)a->src << 32) | (uint32_t)a->rtag, a->comm);
}

/* a blocking receive's wait for b[0] (posted), its key's arguments built
 * only now */
static inline __attribute__((always_inline))
int recv_wait(struct blk b[2], void *buf, int cnt, uint32_t dt, int src, int tag,
	      uint32_t comm, struct sts_status *st)
{
	struct p2p_args a = { .rbuf = buf, .rcnt = cnt, .rtype = dt, .src = src, .rtag = tag,
			      .comm = comm };

	return blk_wait(b, st, OP_RECV, recv_key, &a);
}

/* a blocking receive the general way: a continuation pending, the drain
 * buffer holding messages, from MPI_PROC_NULL (and every one above MPICH) */
static int recv_other(void *buf, int cnt, uint32_t dt, int src, int tag, uint32_t comm,
		      struct sts_status *st)
{
	struct p2p_args a = { .rbuf = buf, .rcnt = cnt, .rtype = dt, .src = src, .rtag = tag,
			      .comm = comm };
	uint32_t r[2] = { 0, 0 };
	struct blk b[2];
	int ret;

	b[1].kind = 0;
	if (continued(OP_RECV, recv_key, &a, r))
		return wait2(OP_RECV, recv_key(&a), r, st, NULL);
	if (recv_at_once(comm, src, tag)) {
		if ((ret = post_recv(buf, cnt, dt, src, tag, comm, &r[0])) != MPI_SUCCESS)
			return lh_err(ret);
		return wait2(OP_RECV, recv_key(&a), r, st, NULL);
	}
	if ((ret = blk_recv(&b[0], buf, cnt, dt, src, tag, comm)) != MPI_SUCCESS)
		return lh_err(ret);
	return recv_wait(b, buf, cnt, dt, src, tag, comm, st);
}

int lh_Recv(void *buf, int cnt, uint32_t dt, int src, int tag, uint32_t comm, struct sts_status *st)
{
	struct blk b[2];
	int ret, err;

	if (!BLK_FAST ||
	    __builtin_expect(lh_lg->nconts || lh_lg->drain_head || src == STS_PROC_NULL, 0))
		return recv_other(buf, cnt, dt, src, tag, comm, st);
	b[1].kind = 0;
	if ((ret = blk_recv(&b[0], buf, cnt, dt, src, tag, comm)) != MPI_SUCCESS)
		return lh_err(ret);
	if (blk_spin(&b[0]) && blk_test(&b[0], st, &err))
		return err;
	return recv_wait(b, buf, cnt, dt, src, tag, comm, st);
}

static uint64_t sendrecv_key(const void *p)
{
	const struct p2p_args *a = p;

	return key_of(OP_SENDRECV, (uint64_t)(uintptr_t)a->sbuf ^ ((uint64_t)(uintptr_t)a->rbuf << 1),
		      ((uint64_t)(uint32_t)a->scnt << 32) | (uint32_t)a->rcnt,
		      ((uint64_t)(uint32_t)a->dest << 32) | (uint32_t)a->src,
		      ((uint64_t)a->comm << 32) ^ ((uint64_t)(uint32_t)a->stag << 16) ^ (uint32_t)a->rtag);
}

int lh_Sendrecv(const void *sbuf, int scnt, uint32_t stype, int dest, int stag, void *rbuf,
		int rcnt, uint32_t rtype_, int src, int rtag, uint32_t comm, struct sts_status *st)
{
	struct p2p_args a = { .sbuf = sbuf, .rbuf = rbuf, .scnt = scnt, .rcnt = rcnt, .dest = dest,
			      .src = src, .stag = stag, .rtag = rtag, .stype = stype,
			      .rtype = rtype_, .comm = comm };
	uint32_t r[2] = { 0, 0 };
	struct blk b[2];
	int ret;

	blk_send(&b[1], dest, stag, comm);

	if (continued(OP_SENDRECV, sendrecv_key, &a, r))
		return wait2(OP_SENDRECV, sendrecv_key(&a), r, st, NULL);
	if (recv_at_once(comm, src, rtag)) {
		ret = post_recv(rbuf, rcnt, rtype_, src, rtag, comm, &r[0]);
		if (ret == MPI_SUCCESS)
			ret = post_send(0, sbuf, scnt, rtype(stype), dest, stag, comm, &r[1]);
		if (ret != MPI_SUCCESS)
			return lh_err(ret);
		return wait2(OP_SENDRECV, sendrecv_key(&a), r, st, NULL);
	}
	if ((ret = blk_recv(&b[0], rbuf, rcnt, rtype_, src, rtag, comm)) != MPI_SUCCESS)
		return lh_err(ret);
	if ((ret = send_start(0, sbuf, scnt, rtype(stype), dest, stag, comm, &b[1].r)) != MPI_SUCCESS) {
		/* the receive is posted: MPI finishes it, as a freed request */
		struct lh_req *q = req_rec(blk_adopt(&b[0]), NULL);

		if (q)
			q->detached = 1;
		return lh_err(ret);
	}
	return blk_wait(b, st, OP_SENDRECV, sendrecv_key, &a);
}

int lh_Sendrecv_replace(void *buf, int cnt, uint32_t dt, int dest, int stag, int src, int rtag,
			uint32_t comm, struct sts_status *st)
{
	uint64_t key = key_of(OP_REPLACE, (uint64_t)(uintptr_t)buf, ((uint64_t)(uint32_t)cnt << 32) | dt,
			      ((uint64_t)(uint32_t)dest << 32) | (uint32_t)src,
			      ((uint64_t)comm << 32) ^ ((uint64_t)(uint32_t)stag << 16) ^ (uint32_t)rtag);
	uint32_t r[2] = { 0, 0 };
	void *tmp = NULL;
	int ret, size = 0, pos = 0;

	if (!cont_take(OP_REPLACE, key, r, &tmp)) {
		/* the outgoing data packed aside first: the receive overwrites buf */
		ret = MPI_Pack_size(cnt, rtype(dt), MPI_COMM_SELF, &size);
		if (ret == MPI_SUCCESS && !(tmp = lg_alloc((size_t)size + 1)))
			ret = MPI_ERR_NO_MEM;
		if (ret == MPI_SUCCESS)
			ret = MPI_Pack(buf, cnt, rtype(dt), tmp, size, &pos, MPI_COMM_SELF);
		if (ret == MPI_SUCCESS)
			ret = post_send(0, tmp, pos, MPI_PACKED, dest, stag, comm, &r[1]);
		if (ret == MPI_SUCCESS)
			ret = post_recv(buf, cnt, dt, src, rtag, comm, &r[0]);
		if (ret != MPI_SUCCESS) {
			if (!r[1])
				lg_free(tmp);
			else   /* the send went: let it finish before its buffer goes */
				wait2(0, 0, r, NULL, tmp);
			return lh_err(ret);
		}
	}
	return wait2(OP_REPLACE, key, r, st, tmp);
}

static int iprobe(int src, int tag, uint32_t comm, int *flag, struct sts_status *st)
{
	struct lh_msg *prev, *m = lh_lg->drain_head ? drain_find(comm, src, tag, &prev) : NULL;
	MPI_Status rs;
	int ret;

	if (m) {
		*flag = 1;
		status_set(st, m->source, m->tag, 0, (long long)m->bytes);
		return MPI_SUCCESS;
	}
	memset(&rs, 0, sizeof(rs));
	ret = MPI_Iprobe(lh_rank_in(src), tag, rcomm(comm), flag, &rs);
	if (ret == MPI_SUCCESS && *flag && st)
		lh_status_out(&rs, st);
	return ret;
}

int lh_Iprobe(int src, int tag, uint32_t comm, int *flag, struct sts_status *st)
{
	return lh_err(iprobe(src, tag, comm, flag, st));
}

int lh_Probe(int src, int tag, uint32_t comm, struct sts_status *st)
{
	unsigned polls = 0;
	int flag = 0, ret;

	for (;;) {
		ret = iprobe(src, tag, comm, &flag, st);
		if (ret != MPI_SUCCESS || flag)
			return lh_err(ret);
		if (idle(&polls))
			return STS_AGAIN;
	}
}

/* A matched message: received now into the ledger and bound to a neutral
 * message handle, so that Mrecv finds it after a restart too. */
static int improbe(int src, int tag, uint32_t comm, int *flag, uint32_t *msg, struct sts_status *st)
{
	struct lh_msg *prev, *m = lh_lg->drain_head ? drain_find(comm, src, tag, &prev) : NULL;
	MPI_Message rm = MPI_MESSAGE_NULL;
	MPI_Status rs;
	MPI_Count bytes = 0;
	int ret;

	*flag = 0;
	if (m) {
		drain_unlink(m, prev);
	} else {
		memset(&rs, 0, sizeof(rs));
		ret = MPI_Improbe(lh_rank_in(src), tag, rcomm(comm), flag, &rm, &rs);
		if (ret != MPI_SUCCESS || !*flag)
			return ret;
		if (rm == MPI_MESSAGE_NO_PROC) {
			*msg = lh_find(STS_MESSAGE, LH_HVAL(rm));
			status_set(st, STS_PROC_NULL, ANY_TAG, 0, 0);
			return MPI_SUCCESS;
		}
		MPI_Get_elements_x(&rs, MPI_BYTE, &bytes);
		m = lg_alloc(sizeof(*m) + (size_t)bytes);
		if (!m)
			return MPI_ERR_NO_MEM;   /* the message stays matched in MPI, lost */
		m->next = NULL;
		m->comm = comm;
		m->source = lh_rank_out(rs.MPI_SOURCE);
		m->tag = rs.MPI_TAG;
		m->bytes = (uint64_t)bytes;
		ret = MPI_Mrecv(m->data, (int)bytes, MPI_BYTE, &rm, MPI_STATUS_IGNORE);
		if (ret != MPI_SUCCESS) {
			lg_free(m);
			return ret;
		}
		count(lh_lg->recv_from, comm, m->source, 1);
	}
	*flag = 1;
	*msg = lh_alloc(STS_MESSAGE, (uint64_t)(uintptr_t)m);
	lh_slot_of(STS_MESSAGE, *msg)->rec = m;
	status_set(st, m->source, m->tag, 0, (long long)m->bytes);
	return MPI_SUCCESS;
}

int lh_Improbe(int src, int tag, uint32_t comm, int *flag, uint32_t *msg, struct sts_status *st)
{
	return lh_err(improbe(src, tag, comm, flag, msg, st));
}

int lh_Mprobe(int src, int tag, uint32_t comm, uint32_t *msg, struct sts_status *st)
{
	unsigned polls = 0;
	int flag = 0, ret;

	for (;;) {
		ret = improbe(src, tag, comm, &flag, msg, st);
		if (ret != MPI_SUCCESS || flag)
			return lh_err(ret);
		if (idle(&polls))
			return STS_AGAIN;
	}
}

static int mrecv(void *buf, int cnt, uint32_t dt, uint32_t *msg, struct sts_status *st)
{
	struct lh_slot *s = lh_slot_of(STS_MESSAGE, *msg);
	int ret;

	if (*msg && *msg == lh_find(STS_MESSAGE, LH_HVAL(MPI_MESSAGE_NO_PROC))) {
		status_set(st, STS_PROC_NULL, ANY_TAG, 0, 0);
		*msg = 0;
		return MPI_SUCCESS;
	}
	if (!s || !s->rec)
		return MPI_ERR_REQUEST;
	ret = deliver(s->rec, buf, cnt, dt, st);
	lh_release(STS_MESSAGE, *msg);
	*msg = 0;
	return ret;
}

int lh_Mrecv(void *buf, int cnt, uint32_t dt, uint32_t *msg, struct sts_status *st)
{
	return lh_err(mrecv(buf, cnt, dt, msg, st));
}

int lh_Imrecv(void *buf, int cnt, uint32_t dt, uint32_t *msg, uint32_t *req)
{
	struct sts_status st;
	struct lh_req *q;
	int ret = mrecv(buf, cnt, dt, msg, &st);

	if (ret != MPI_SUCCESS && ret != MPI_ERR_TRUNCATE)
		return lh_err(ret);
	*req = req_new(MPI_REQUEST_NULL, REQ_RECV);
	if (!*req)
		return lh_err(MPI_ERR_NO_MEM);
	q = req_rec(*req, NULL);
	q->status = st;
	q->state = REQ_DONE;
	return 0;
}

int lh_Wait(uint32_t *req, struct sts_status *st)
{
	unsigned polls = 0;
	int err;

	for (;;) {
		if (req_test(req, st, 0, &err))
			return err;
		if (idle(&polls))
			return STS_AGAIN;
	}
}

int lh_Test(uint32_t *req, int *flag, struct sts_status *st)
{
	int err;

	*flag = req_test(req, st, 0, &err);
	return err;
}

int lh_Request_get_status(uint32_t req, int *flag, struct sts_status *st)
{
	int err;

	*flag = req_test(&req, st, 1, &err);
	return err;
}

int lh_Request_free(uint32_t *req)
{
	struct lh_slot *s;
	struct lh_req *q = req_rec(*req, &s);

	lh_me->err_on = errh_of(q);
	if (!q)
		return lh_err(MPI_ERR_REQUEST);
	if (q->state != REQ_PENDING)
		lh_release(STS_REQUEST, *req);
	else
		q->detached = 1;   /* MPI finishes it; the drain lets it go */
	*req = 0;
	return 0;
}

int lh_Cancel(uint32_t *req)
{
	struct lh_slot *s;
	struct lh_req *q = req_rec(*req, &s);
	MPI_Request r;

	lh_me->err_on = errh_of(q);
	if (!q)
		return lh_err(MPI_ERR_REQUEST);
	if (q->state != REQ_PENDING)
		return 0;
	r = (MPI_Request)(LH_HCAST)s->real;
	return lh_err(MPI_Cancel(&r));
}

/* ---- blocking collectives: their non-blocking form and a wait
 * (lh_gen.c calls these; lh_coll.c) ---- */

int lh_coll_begin(uint32_t comm, uint64_t key, uint32_t *req)
{
	uint32_t r[2] = { 0, 0 };

	if (cont_take(OP_COLL, key, r, NULL)) {
		*req = r[0];
		return 1;
	}
	return lh_coll_enter(comm);
}

uint32_t lh_coll_started(MPI_Request r)
{
	return req_new(r, REQ_OTHER);
}

int lh_coll_wait(uint64_t key, uint32_t *req)
{
	unsigned polls = 0;
	uint32_t r[2] = { *req, 0 };
	int err;

	for (;;) {
		if (req_test(&r[0], NULL, 0, &err))
			return err;
		if (idle(&polls))
			return cont_park(OP_COLL, key, r, NULL);
	}
}

/* A collective with no non-blocking form on comm (a communicator made, a
 * file opened, collective MPI-IO on the file's own communicator: lh_io.c)
 * starts only once every member is at its entry: first an
 * MPI_Ibarrier on comm, counted and waited for like a blocking collective
 * (it parks). Past it, every member has come to the call, so none may park
 * before going in: one that did would leave the others waiting inside the
 * real call, where they cannot park (docs/protocol.md, "Blocking
 * collectives"). So a checkpoint that finds this rank waiting for the
 * barrier gives it ENTRY_GRACE_MS to see it complete before it parks (a
 * member that saw it complete went in), and lh_coll_passed decides what a
 * rank past it does while a checkpoint lets it run. r[1]: past it. */
#define ENTRY_GRACE_MS 200

int lh_coll_entry(uint32_t comm)
{
	uint64_t key = key_of(OP_ENTRY, comm, 0, 0, 0), since = 0;
	uint32_t r[2] = { 0, 0 };
	unsigned polls = 0;
	int err = 0, ret;

	if (!cont_take(OP_ENTRY, key, r, NULL)) {
		MPI_Request q;

		ret = lh_coll_enter(comm);
		if (ret)
			return ret;
		ret = MPI_Ibarrier((MPI_Comm)(LH_HCAST)lh_real(STS_COMM, comm), &q);
		if (ret != MPI_SUCCESS)
			return lh_err(ret);
		r[0] = req_new(q, REQ_OTHER);
	}
	while (!r[1]) {
		if (req_test(&r[0], NULL, 0, &err)) {
			if (err)
				return err;
			r[1] = 1;
		} else if (idle(&polls)) {
			uint64_t now = lh_now_ms();

			if (lh_lg->advancing || (since && now - since >= ENTRY_GRACE_MS))
				return cont_park(OP_ENTRY, key, r, NULL);
			since = since ? since : now;
		}
	}
	return lh_coll_passed(comm) ? cont_park(OP_ENTRY, key, r, NULL) : 0;
}

/* A blocking collective's entry (lh_ledger.h): on comm, its barrier
 * above; on a file while a checkpoint lets this rank run, held. */
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

/* ---- arrays of requests (sts_hand_ops); a null or inactive request's
 * status is left as the upper half set it (empty), a completed one's
 * written once ---- */

int lh_waitall(int n, uint32_t *reqs, struct sts_status *st)
{
	uint64_t key = key_of(OP_WAITALL, (uint64_t)(uintptr_t)reqs, (uint64_t)n, 0, 0);
	uint32_t kept[2] = { 0, 1 }, on;
	unsigned polls = 0;
	int err, e, left;

	/* an error of a request it completed before a checkpoint stopped it:
	 * kept in the ledger, which the restart brings back */
	cont_take(OP_WAITALL, key, kept, NULL);
	err = (int)kept[0];
	on = kept[1];
	for (;;) {
		left = 0;
		for (int i = 0; i < n; i++) {
			/* a persistent request this call (or the one a checkpoint
			 * stopped) completed is inactive now: its status stays */
			if (!req_active(reqs[i]))
				continue;
			if (!req_test(&reqs[i], st ? &st[i] : NULL, 0, &e))
				left++;
			else if (e && !err) {
				err = e;
				on = lh_me->err_on;
			}
		}
		if (!left) {
			lh_me->err_on = on;
			return err;
		}
		if (idle(&polls)) {
			kept[0] = (uint32_t)err;
			kept[1] = on;
			return err ? cont_park(OP_WAITALL, key, kept, NULL) : STS_AGAIN;
		}
	}
}

int lh_testall(int n, uint32_t *reqs, int *flag, struct sts_status *st)
{
	uint32_t on = 1;
	int err = 0, e;

	/* MPI: either every request completes here, or none is touched */
	*flag = 1;
	for (int i = 0; i < n; i++)
		if (reqs[i] && !req_test(&reqs[i], NULL, 1, &e))
			*flag = 0;
	if (!*flag)
		return 0;
	for (int i = 0; i < n; i++)
		if (req_active(reqs[i]) && req_test(&reqs[i], st ? &st[i] : NULL, 0, &e) && e && !err) {
			err = e;
			on = lh_me->err_on;
		}
	lh_me->err_on = on;
	return err;
}

static int any(int n, uint32_t *reqs, int *index, int *flag, struct sts_status *st)
{
	int active = 0, e;

	*flag = 0;
	*index = MPI_UNDEFINED;
	for (int i = 0; i < n; i++) {
		if (!req_active(reqs[i]))
			continue;
		active++;
		if (req_test(&reqs[i], st, 0, &e)) {
			*flag = 1;
			*index = i;
			return e;
		}
	}
	if (!active)
		*flag = 1;
	return 0;
}

int lh_waitany(int n, uint32_t *reqs, int *index, struct sts_status *st)
{
	unsigned polls = 0;
	int flag, err;

	for (;;) {
		err = any(n, reqs, index, &flag, st);
		if (flag)
			return err;
		if (idle(&polls))
			return STS_AGAIN;
	}
}

int lh_testany(int n, uint32_t *reqs, int *index, int *flag, struct sts_status *st)
{
	return any(n, reqs, index, flag, st);
}

static int some(int n, uint32_t *reqs, int *outcount, int *indices, struct sts_status *st)
{
	uint32_t on = 1;
	int active = 0, err = 0, e;

	*outcount = 0;
	for (int i = 0; i < n; i++) {
		if (!req_active(reqs[i]))
			continue;
		active++;
		if (req_test(&reqs[i], st ? &st[*outcount] : NULL, 0, &e)) {
			indices[(*outcount)++] = i;
			if (e && !err) {
				err = e;
				on = lh_me->err_on;
			}
		}
	}
	if (!active)
		*outcount = MPI_UNDEFINED;
	lh_me->err_on = on;
	return err;
}

int lh_waitsome(int n, uint32_t *reqs, int *outcount, int *indices, struct sts_status *st)
{
	unsigned polls = 0;
	int err;

	for (;;) {
		err = some(n, reqs, outcount, indices, st);
		if (*outcount != 0)
			return err;
		if (idle(&polls))
			return STS_AGAIN;
	}
}

int lh_testsome(int n, uint32_t *reqs, int *outcount, int *indices, struct sts_status *st)
{
	return some(n, reqs, outcount, indices, st);
}

/* ---- the drain (docs/split.md, "Messages in flight") ---- */

/* every message waiting on comm, into the drain buffer */
static int drain_comm(uint32_t comm)
{
	MPI_Comm c = rcomm(comm);
	MPI_Status rs;
	MPI_Count bytes = 0;
	int flag = 1, got = 0;

	while (flag) {
		struct lh_msg *m;

		if (MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, c, &flag, &rs) != MPI_SUCCESS || !flag)
			break;
		MPI_Get_elements_x(&rs, MPI_BYTE, &bytes);
		m = lg_alloc(sizeof(*m) + (size_t)bytes);
		if (!m)
			return err_set(-ENOMEM, "rank %d: no room for a message of %lld bytes in flight",
				       lh_lg->world_rank, (long long)bytes);
		m->next = NULL;
		m->comm = comm;
		m->source = lh_rank_out(rs.MPI_SOURCE);
		m->tag = rs.MPI_TAG;
		m->bytes = (uint64_t)bytes;
		if (MPI_Recv(m->data, (int)bytes, MPI_BYTE, rs.MPI_SOURCE, rs.MPI_TAG, c,
			     MPI_STATUS_IGNORE) != MPI_SUCCESS) {
			lg_free(m);
			return err_set(-EIO, "rank %d: cannot receive a message in flight from rank %d",
				       lh_lg->world_rank, rs.MPI_SOURCE);
		}
		if (lh_lg->drain_tail)
			lh_lg->drain_tail->next = m;
		else
			lh_lg->drain_head = m;
		lh_lg->drain_tail = m;
		lh_lg->drain_n++;
		lh_lg->drain_bytes += m->bytes;
		count(lh_lg->recv_from, comm, m->source, 1);
		got++;
	}
	return got;
}

int lh_p2p_drain(MPI_Comm ctl, int timeout_ms)
{
	int size = lh_lg->world_size, ret = 0;
	uint64_t *expect = calloc((size_t)size, sizeof(*expect)), deadline = lh_now_ms() + (uint64_t)timeout_ms;
	struct lh_table *reqs = &lh_lg->tables[STS_REQUEST], *comms = &lh_lg->tables[STS_COMM];

	if (!expect)
		return err_set(-ENOMEM, "out of memory");
	/* what every rank sent to this one, from their frozen counts */
	if (MPI_Alltoall(lh_lg->sent_to, 1, MPI_UINT64_T, expect, 1, MPI_UINT64_T, ctl) != MPI_SUCCESS) {
		free(expect);
		return err_set(-EIO, "rank %d: the exchange of message counts failed", lh_lg->world_rank);
	}
	for (;;) {
		int short_of = -1;
		unsigned colls = 0;

		/* a posted receive MPI matches completes into the program's buffer;
		 * a collective every member started completes */
		for (uint32_t n = STS_FIRST_USER; n < reqs->next; n++) {
			struct lh_slot *s = &reqs->slot[n];
			struct lh_req *q = s->rec;

			if (!q || q->state != REQ_PENDING)
				continue;
			if (progress(s)) {
				if (q->detached)
					lh_release(STS_REQUEST, n);
			} else if (q->kind == REQ_OTHER) {
				colls++;
			}
		}
		for (uint32_t c = 1; c < comms->next && ret >= 0; c = c == 2 ? STS_FIRST_USER : c + 1)
			if (c <= 2 || (comms->slot[c].rec && comms->slot[c].real != comms->slot[0].real &&
				       lh_world_of(c, 0) >= 0))
				ret = drain_comm(c);
		if (ret < 0)
			break;
		for (int w = 0; w < size && short_of < 0; w++)
			if (lh_lg->recv_from[w] < expect[w])
				short_of = w;
		if (short_of < 0 && lh_lg->pending_sends == 0 && !colls)
			break;
		if (lh_now_ms() > deadline) {
			ret = short_of >= 0
			      ? err_set(-ETIMEDOUT, "rank %d: %llu message(s) from rank %d did not arrive "
					"within %d s of the checkpoint", lh_lg->world_rank,
					(unsigned long long)(expect[short_of] - lh_lg->recv_from[short_of]),
					short_of, timeout_ms / 1000)
			      : lh_lg->pending_sends
			      ? err_set(-ETIMEDOUT, "rank %d: %u send(s) did not complete within %d s of "
					"the checkpoint", lh_lg->world_rank, lh_lg->pending_sends,
					timeout_ms / 1000)
			      : err_set(-ETIMEDOUT, "rank %d: %u collective(s) did not complete within %d s "
					"of the checkpoint", lh_lg->world_rank, colls, timeout_ms / 1000);
			break;
		}
	}
	free(expect);
	return ret < 0 ? ret : 0;
}

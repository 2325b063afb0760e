/* lh_handles.c - neutral handles to the real MPI's and back.
 *
 * One table per kind, in the ledger (lh_ledger.h): slot n holds the real
 * handle of neutral handle n, its creation number and its record.
 * Predefined entries are filled at start from the names in the real
 * mpi.h; entries from STS_FIRST_USER on are handed out as the program
 * creates objects and taken back when it frees them. After a restart the
 * tables come back with the ledger and lh_state_rebuild fills in the new
 * MPI's handles. */
#include <stdlib.h>
#include <string.h>

#include "lh.h"
#include "lh_ledger.h"
#include "lh_spare.h"

#define STS_PREDEF_VALUE(name) LH_HVAL(name)
#include "predef.c"

struct lh_object_hooks lh_hooks;   /* lh_ledger.h; filled by lh_calls.c */
static int errors_in[512];   /* real class -> neutral */
static int errors_real[STS_NERRORS];   /* neutral class -> real */

static int grow(struct lh_table *t, uint32_t need)
{
	uint32_t cap = t->cap ? t->cap : STS_FIRST_USER * 2;
	struct lh_slot *r;

	while (cap <= need)
		cap *= 2;
	r = lg_realloc(t->slot, cap * sizeof(*r));
	if (!r)
		return -1;
	memset(r + t->cap, 0, (cap - t->cap) * sizeof(*r));
	t->slot = r;
	t->cap = cap;
	return 0;
}

static uint32_t predefined(int kind, uint64_t real);

/* restored: the tables came back with the ledger; only the predefined
 * handles (this MPI's values) are written again */
void lh_handles_init(int restored)
{
	for (int k = 0; k < STS_KINDS; k++) {
		const struct sts_predef_kind *pk = &sts_predef_kinds[k];
		struct lh_table *t = &lh_lg->tables[k];

		if (!restored) {
			if (grow(t, STS_FIRST_USER) != 0)
				abort();
			t->next = STS_FIRST_USER;
		}
		/* names this MPI lacks map to its null handle */
		for (unsigned i = 0; i < pk->count; i++)
			t->slot[i].real = pk->v[0].value;
		for (unsigned i = 0; i < pk->n; i++)
			t->slot[pk->v[i].neutral].real = pk->v[i].value;
	}
	for (unsigned i = 0; i < sizeof(sts_predef_error) / sizeof(sts_predef_error[0]); i++) {
		if (sts_predef_error[i].value < 512)
			errors_in[sts_predef_error[i].value] = (int)sts_predef_error[i].neutral;
		errors_real[sts_predef_error[i].neutral] = (int)sts_predef_error[i].value;
	}
	/* the program's MPI_COMM_WORLD: the active ranks' (lh_spare.h) */
	lh_lg->tables[STS_COMM].slot[predefined(STS_COMM, LH_HVAL(MPI_COMM_WORLD))].real =
		LH_HVAL(lh_world);
}


static uint32_t predefined(int kind, uint64_t real)
{
	const struct sts_predef_kind *pk = &sts_predef_kinds[kind];

	for (unsigned i = 0; i < pk->n; i++)
		if (pk->v[i].value == real)
			return pk->v[i].neutral;
	return UINT32_MAX;
}

uint32_t lh_find(int kind, uint64_t real)
{
	struct lh_table *t = &lh_lg->tables[kind];
	uint32_t n = predefined(kind, real);

	if (n != UINT32_MAX)
		return n;
	for (n = STS_FIRST_USER; n < t->next; n++)
		if (t->slot[n].real == real && t->slot[n].rec)
			return n;
	return UINT32_MAX;
}

uint32_t lh_new(int kind, uint64_t real)
{
	uint32_t n = predefined(kind, real);

	return n != UINT32_MAX ? n : lh_alloc(kind, real);
}

/* A new request's record: REQ_OTHER, pending, the rest zero. Field by
 * field: GCC 12 makes a compound literal or a memset of it a rep stos,
 * slow to start for 88 bytes */
static void req_init(struct lh_req *q, uint64_t seq)
{
	_Static_assert(sizeof(*q) == 88, "a new field of struct lh_req: set it here");
	q->kind = REQ_OTHER;
	q->state = REQ_PENDING;
	q->detached = q->persist = q->errh = 0;
	q->seq = seq;
	q->buf = NULL;
	q->count = q->peer = q->tag = 0;
	q->datatype = q->comm = 0;
	q->status = (struct sts_status){ 0 };
}

uint32_t lh_alloc(int kind, uint64_t real)
{
	struct lh_table *t = &lh_lg->tables[kind];
	struct lh_slot *s;
	uint32_t n;

	if (t->nfree)
		n = t->free_list[--t->nfree];
	else {
		if (t->next >= t->cap && grow(t, t->next) != 0)
			abort();
		n = t->next++;
	}
	s = &t->slot[n];
	s->real = real;
	s->seq = ++lh_lg->seq;
	s->rec = NULL;
	if (kind != STS_REQUEST) {
		lh_hooks.created(kind, n);
		return n;
	}
	/* A request's record is made here, not by the hook: every Isend and
	 * Irecv makes one, and it is all lh_state.c would have done for it */
	s->rec = lg_alloc(sizeof(struct lh_req));
	if (s->rec)
		req_init(s->rec, s->seq);
	return n;
}

void lh_release(int kind, uint32_t n)
{
	struct lh_table *t = &lh_lg->tables[kind];

	if (n < STS_FIRST_USER || n >= t->next)
		return;
	if (kind == STS_COMM && t->slot[n].rec && lh_hooks.comm_retire(n)) {
		t->slot[n].real = t->slot[0].real;   /* the real one is freed */
		return;
	}
	lh_release_now(kind, n);
}

void lh_release_now(int kind, uint32_t n)
{
	struct lh_table *t = &lh_lg->tables[kind];

	if (n < STS_FIRST_USER || n >= t->next)
		return;
	lh_hooks.freed(kind, n);
	if (kind == STS_REQUEST)   /* its record is the handles' (lh_alloc) */
		lg_free(t->slot[n].rec);
	t->slot[n].rec = NULL;
	t->slot[n].real = t->slot[0].real;
	if (t->nfree == t->free_cap) {
		uint32_t cap = t->free_cap ? t->free_cap * 2 : 256;
		uint32_t *f = lg_realloc(t->free_list, cap * sizeof(*f));

		if (!f)
			abort();
		t->free_list = f;
		t->free_cap = cap;
	}
	t->free_list[t->nfree++] = n;
}

uint32_t lh_update(int kind, uint32_t n, uint64_t real)
{
	struct lh_table *t = &lh_lg->tables[kind];

	if (n < STS_FIRST_USER || n >= t->next)
		return lh_new(kind, real);
	if (real == t->slot[0].real) {   /* freed: the slot may be used again */
		lh_release(kind, n);
		return 0;
	}
	t->slot[n].real = real;
	return n;
}

unsigned lh_live(int kind)
{
	const struct lh_table *t = &lh_lg->tables[kind];

	return t->next - STS_FIRST_USER - t->nfree;
}

int lh_err_in(int n)
{
	if (n == 0)
		return MPI_SUCCESS;
	return n > 0 && n < STS_NERRORS && errors_real[n] ? errors_real[n] : MPI_ERR_UNKNOWN;
}

int lh_err_class(int code)
{
	int cls = 0;

	if (MPI_Error_class(code, &cls) != MPI_SUCCESS || cls < 0 || cls >= 512 || !errors_in[cls])
		return 16;   /* MPI_ERR_OTHER in gen_wrappers.py's list */
	return errors_in[cls];
}

/* The byte count and the cancelled flag read from the status as each ABI
 * lays them out (uh_abi.c reads them the same way), not with
 * MPI_Get_elements_x and MPI_Test_cancelled: two calls on every receive */
void lh_status_out(const MPI_Status *s, struct sts_status *n)
{
	n->source = lh_rank_out(s->MPI_SOURCE);
	n->tag = s->MPI_TAG;
	n->error = lh_err(s->MPI_ERROR);
#ifdef OPEN_MPI
	n->cancelled = s->_cancelled != 0;
	n->count = (long long)s->_ucount;
#else
	n->cancelled = s->count_hi_and_cancelled & 1;
	n->count = (long long)(unsigned)s->count_lo |
		   ((long long)((unsigned)s->count_hi_and_cancelled >> 1) << 32);
#endif
}

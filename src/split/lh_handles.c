/* lh_handles.c - neutral handles to the real MPI's and back.
 *
 * One table per kind: entry n holds the real handle of neutral handle n.
 * Predefined entries are filled at start from the names in the real
 * mpi.h; entries from STS_FIRST_USER on are handed out as the program
 * creates objects and taken back when it frees them. */
#include <stdlib.h>
#include <string.h>

#include "lh.h"

#define STS_PREDEF_VALUE(name) LH_HVAL(name)
#include "predef.c"

static struct table {
	uint64_t *real;
	uint32_t cap;
	uint32_t next;           /* first never-used user slot */
	uint32_t *free_list;     /* freed user slots */
	uint32_t nfree, free_cap;
} tables[STS_KINDS];
static int errors_in[512];   /* real class -> neutral */

static int grow(struct table *t, uint32_t need)
{
	uint32_t cap = t->cap ? t->cap : STS_FIRST_USER * 2;
	uint64_t *r;

	while (cap <= need)
		cap *= 2;
	r = realloc(t->real, cap * sizeof(*r));
	if (!r)
		return -1;
	memset(r + t->cap, 0, (cap - t->cap) * sizeof(*r));
	t->real = r;
	t->cap = cap;
	return 0;
}

void lh_handles_init(void)
{
	for (int k = 0; k < STS_KINDS; k++) {
		const struct sts_predef_kind *pk = &sts_predef_kinds[k];
		struct table *t = &tables[k];

		if (grow(t, STS_FIRST_USER) != 0)
			abort();
		t->next = STS_FIRST_USER;
		/* names this MPI lacks map to its null handle */
		for (unsigned i = 0; i < pk->count; i++)
			t->real[i] = pk->v[0].value;
		for (unsigned i = 0; i < pk->n; i++)
			t->real[pk->v[i].neutral] = pk->v[i].value;
	}
	for (unsigned i = 0; i < sizeof(sts_predef_error) / sizeof(sts_predef_error[0]); i++)
		if (sts_predef_error[i].value < 512)
			errors_in[sts_predef_error[i].value] = (int)sts_predef_error[i].neutral;
}

uint64_t lh_real(int kind, uint32_t n)
{
	struct table *t = &tables[kind];

	if (n < t->cap && (n < STS_FIRST_USER || n < t->next))
		return t->real[n];
	return t->real[0];
}

static uint32_t predefined(int kind, uint64_t real)
{
	const struct sts_predef_kind *pk = &sts_predef_kinds[kind];

	for (unsigned i = 0; i < pk->n; i++)
		if (pk->v[i].value == real)
			return pk->v[i].neutral;
	return UINT32_MAX;
}

uint32_t lh_new(int kind, uint64_t real)
{
	struct table *t = &tables[kind];
	uint32_t n = predefined(kind, real);

	if (n != UINT32_MAX)
		return n;
	if (t->nfree)
		n = t->free_list[--t->nfree];
	else {
		if (t->next >= t->cap && grow(t, t->next) != 0)
			abort();
		n = t->next++;
	}
	t->real[n] = real;
	return n;
}

uint32_t lh_update(int kind, uint32_t n, uint64_t real)
{
	struct table *t = &tables[kind];

	if (n < STS_FIRST_USER || n >= t->next)
		return lh_new(kind, real);
	if (real == t->real[0]) {   /* freed: the slot may be used again */
		if (t->nfree == t->free_cap) {
			uint32_t cap = t->free_cap ? t->free_cap * 2 : 256;
			uint32_t *f = realloc(t->free_list, cap * sizeof(*f));

			if (!f)
				abort();
			t->free_list = f;
			t->free_cap = cap;
		}
		t->free_list[t->nfree++] = n;
		t->real[n] = real;
		return 0;
	}
	t->real[n] = real;
	return n;
}

unsigned lh_live(int kind)
{
	const struct table *t = &tables[kind];

	return t->next - STS_FIRST_USER - t->nfree;
}

int lh_err(int code)
{
	int cls = 0;

	if (code == MPI_SUCCESS)
		return 0;
	if (MPI_Error_class(code, &cls) != MPI_SUCCESS || cls < 0 || cls >= 512 || !errors_in[cls])
		return 16;   /* MPI_ERR_OTHER in gen_wrappers.py's list */
	return errors_in[cls];
}

void lh_status_out(const MPI_Status *s, struct sts_status *n)
{
	MPI_Count bytes = 0;
	int flag = 0;

	MPI_Get_elements_x(s, MPI_BYTE, &bytes);
	MPI_Test_cancelled(s, &flag);
	n->source = lh_rank_out(s->MPI_SOURCE);
	n->tag = s->MPI_TAG;
	n->error = lh_err(s->MPI_ERROR);
	n->cancelled = flag;
	n->count = bytes;
}

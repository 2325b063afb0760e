/* uh_abi.c - the application's MPI ABI against the neutral one.
 *
 * Predefined handles are found by value in a small hash table (their ABI
 * values are addresses in Open MPI's ABI, compile-time integers in
 * MPICH's); handles the program created carry their neutral number in a
 * value no MPI library uses: 0x5754'kkkk'00vv'vvvv pointers in Open MPI's
 * ABI, 0x3kvvvvvv integers in MPICH's. Both survive a restart unchanged,
 * whatever MPI is below (docs/split.md).
 */
#include <stdio.h>
#include <string.h>

#include "uh.h"

#define STS_PREDEF_VALUE(name) STS_HVAL(name)
#include "predef.c"

#define HASH_SIZE 1024u
static struct {
	uint64_t value;
	uint32_t kind, neutral;
	int used;
} hash[HASH_SIZE];
static uint64_t out_table[STS_KINDS][128];
static int errors_out[STS_NERRORS];
static int ready;

static unsigned slot_of(int kind, uint64_t v)
{
	uint64_t h = (v ^ ((uint64_t)kind << 56)) * 0x9e3779b97f4a7c15ull;

	return (unsigned)(h >> 54) & (HASH_SIZE - 1);
}

static void setup(void)
{
	for (int k = 0; k < STS_KINDS; k++) {
		const struct sts_predef_kind *pk = &sts_predef_kinds[k];

		for (unsigned i = 0; i < pk->n; i++) {
			const struct sts_predef *p = &pk->v[i];
			unsigned s = slot_of(k, p->value);

			if (p->neutral < 128 && !out_table[k][p->neutral])
				out_table[k][p->neutral] = p->value;
			while (hash[s].used && !(hash[s].kind == (uint32_t)k && hash[s].value == p->value))
				s = (s + 1) & (HASH_SIZE - 1);
			if (!hash[s].used)   /* two names for one value: the first wins */
				hash[s] = (__typeof__(hash[s])){ p->value, (uint32_t)k, p->neutral, 1 };
		}
	}
	for (unsigned i = 0; i < sizeof(sts_predef_error) / sizeof(sts_predef_error[0]); i++)
		errors_out[sts_predef_error[i].neutral] = (int)sts_predef_error[i].value;
	ready = 1;
}

#ifdef OPEN_MPI
#define USER_TAG 0x5754ull
#define IS_USER(v) (((v) >> 48) == USER_TAG)
#define USER_KIND(v) ((int)(((v) >> 32) & 0xffff))
#define USER_VALUE(k, n) ((USER_TAG << 48) | ((uint64_t)(k) << 32) | (n))
#else
/* MPICH's sentinels of a distributed graph's weights are the addresses of
 * variables of its library (mpi.h: extern int * const MPI_UNWEIGHTED);
 * the stand-in has its own */
static int unweighted, weights_empty;
int *const MPI_UNWEIGHTED = &unweighted;
int *const MPI_WEIGHTS_EMPTY = &weights_empty;

#define IS_USER(v) (((v) & 0xf0000000u) == 0x30000000u)
#define USER_KIND(v) ((int)(((v) >> 24) & 0xf))
#define USER_VALUE(k, n) (0x30000000u | ((uint64_t)(k) << 24) | (n))
#endif

uint32_t sts_in(int kind, uint64_t v)
{
	unsigned s;

	if (IS_USER(v))
		return USER_KIND(v) == kind ? (uint32_t)(v & 0xffffff) : 0xfffffffeu;
	if (!ready)
		setup();
	for (s = slot_of(kind, v); hash[s].used; s = (s + 1) & (HASH_SIZE - 1))
		if (hash[s].kind == (uint32_t)kind && hash[s].value == v)
			return hash[s].neutral;
	return 0xfffffffeu;   /* not a handle: the real MPI reports it as invalid */
}

uint64_t sts_out(int kind, uint32_t n)
{
	if (n >= STS_FIRST_USER)
		return USER_VALUE(kind, n);
	if (!ready)
		setup();
	return n < 128 ? out_table[kind][n] : 0;
}

const char *sts_predef_name(int kind, uint32_t neutral)
{
	const struct sts_predef_kind *pk = &sts_predef_kinds[kind];

	for (unsigned i = 0; i < pk->n; i++)
		if (pk->v[i].neutral == neutral)
			return pk->v[i].name;
	return "";
}

void sts_status_out(const struct sts_status *n, MPI_Status *s)
{
	s->MPI_SOURCE = sts_rank_out(n->source);
	s->MPI_TAG = n->tag;
	s->MPI_ERROR = sts_err_out(n->error);
#ifdef OPEN_MPI
	s->_cancelled = n->cancelled;
	s->_ucount = (size_t)n->count;
#else
	s->count_lo = (int)(n->count & 0xffffffff);
	s->count_hi_and_cancelled = (int)(((n->count >> 32) << 1) | (n->cancelled ? 1 : 0));
#endif
}

void sts_status_set_bytes(MPI_Status *s, long long bytes)
{
#ifdef OPEN_MPI
	s->_ucount = (size_t)bytes;
#else
	s->count_lo = (int)(bytes & 0xffffffff);
	s->count_hi_and_cancelled = (int)(((bytes >> 32) << 1) | (s->count_hi_and_cancelled & 1));
#endif
}

int sts_status_cancelled(const MPI_Status *s)
{
#ifdef OPEN_MPI
	return s->_cancelled != 0;
#else
	return s->count_hi_and_cancelled & 1;
#endif
}

void sts_status_set_cancelled(MPI_Status *s, int flag)
{
#ifdef OPEN_MPI
	s->_cancelled = flag != 0;
#else
	s->count_hi_and_cancelled = (s->count_hi_and_cancelled & ~1) | (flag != 0);
#endif
}

long long sts_status_bytes(const MPI_Status *s)
{
#ifdef OPEN_MPI
	return (long long)s->_ucount;
#else
	return (long long)(unsigned)s->count_lo |
	       ((long long)((unsigned)s->count_hi_and_cancelled >> 1) << 32);
#endif
}

int sts_err_class_out(int n)
{
	if (!ready)
		setup();
	return n > 0 && n < STS_NERRORS && errors_out[n] ? errors_out[n] : MPI_ERR_OTHER;
}

int sts_err_class_in(int c)
{
	if (!ready)
		setup();
	if (c == MPI_SUCCESS)
		return 0;
	for (int n = 1; n < STS_NERRORS; n++)
		if (errors_out[n] == c)
			return n;
	return -1;
}

const char *sts_err_class_name(int n)
{
	for (unsigned i = 0; i < sizeof(sts_predef_error) / sizeof(sts_predef_error[0]); i++)
		if ((int)sts_predef_error[i].neutral == n)
			return sts_predef_error[i].name;
	return "";
}

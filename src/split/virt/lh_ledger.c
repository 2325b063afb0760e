/* lh_ledger.c - the ledger's memory (lh_ledger.h). */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include "common/err.h"
#include "lh_ledger.h"

struct lh_ledger *lh_lg;

#define HDR 16u                 /* block header: its class */
#define MIN_CLASS 5             /* 32 bytes */

/* the smallest power of two that holds n and the header, from 2^MIN_CLASS */
static unsigned class_of(size_t n)
{
	unsigned c = 64 - (unsigned)__builtin_clzll((unsigned long long)(n + HDR - 1));

	return c < MIN_CLASS ? MIN_CLASS : c;
}

void *lg_alloc(size_t n)
{
	unsigned c = class_of(n);
	uint64_t *b;

	if (c >= LG_CLASSES)
		return NULL;
	b = lh_lg->free_class[c];
	if (b) {
		lh_lg->free_class[c] = *(void **)(b + 2);
	} else {
		uint64_t size = (uint64_t)1 << c, at = lh_lg->top;

		if (at + size > STS_LEDGER_ADDR + STS_LEDGER_SIZE)
			return NULL;
		lh_lg->top = at + size;
		b = (uint64_t *)(uintptr_t)at;
	}
	b[0] = c;
	return b + 2;
}

void *lg_calloc(size_t n)
{
	void *p = lg_alloc(n);

	if (p)
		memset(p, 0, n);
	return p;
}

void lg_free(void *p)
{
	uint64_t *b = (uint64_t *)p - 2;

	if (!p)
		return;
	*(void **)p = lh_lg->free_class[b[0]];
	lh_lg->free_class[b[0]] = b;
}

void *lg_realloc(void *p, size_t n)
{
	size_t have = p ? ((size_t)1 << ((uint64_t *)p - 2)[0]) - HDR : 0;
	void *q;

	if (p && n <= have)
		return p;
	q = lg_alloc(n);
	if (q && p)
		memcpy(q, p, have);
	if (q)
		lg_free(p);
	return q;
}

int lh_ledger_create(int world_rank, int world_size)
{
	void *p = mmap((void *)STS_LEDGER_ADDR, STS_LEDGER_SIZE, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);

	if (p != (void *)STS_LEDGER_ADDR) {
		if (p != MAP_FAILED)
			munmap(p, STS_LEDGER_SIZE);
		return err_set(-ENOMEM, "cannot map the ledger at %#llx: %s", STS_LEDGER_ADDR,
			       strerror(p == MAP_FAILED ? errno : EEXIST));
	}
	lh_lg = p;
	lh_lg->magic = LG_MAGIC;
	lh_lg->version = LG_VERSION;
	lh_lg->world_rank = world_rank;
	lh_lg->world_size = world_size;
	lh_lg->top = (STS_LEDGER_ADDR + sizeof(*lh_lg) + 63) & ~63ull;
	lh_lg->sent_to = lg_calloc((size_t)world_size * sizeof(uint64_t));
	lh_lg->recv_from = lg_calloc((size_t)world_size * sizeof(uint64_t));
	if (!lh_lg->sent_to || !lh_lg->recv_from)
		return err_set(-ENOMEM, "the ledger is full");
	return 0;
}

int lh_ledger_attach(int world_rank, int world_size)
{
	struct lh_ledger *l = (struct lh_ledger *)STS_LEDGER_ADDR;

	if (msync(l, 4096, MS_ASYNC) != 0 || l->magic != LG_MAGIC)
		return err_set(-EBADMSG, "the image holds no ledger of the lower half at %#llx",
			       STS_LEDGER_ADDR);
	if (l->version != LG_VERSION)
		return err_set(-EBADMSG, "the image's ledger has version %u, this lower half reads %u",
			       l->version, LG_VERSION);
	if (l->world_rank != world_rank || l->world_size != world_size)
		return err_set(-EINVAL, "the image is rank %d of %d, this process is rank %d of %d: "
			       "restart with as many ranks as the checkpoint had", l->world_rank,
			       l->world_size, world_rank, world_size);
	lh_lg = l;
	return 0;
}

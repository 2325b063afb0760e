/* node_park.c - the board a node's ranks park on (node_park.h). The rank
 * side: linked into the lower halves and the scale harness's ranks. */
#include "node/node_park.h"

#include "common/err.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int node_park_map(int memfd, struct node_park **out)
{
	struct stat st;
	struct node_park *p;

	*out = NULL;
	if (fstat(memfd, &st) != 0 || (size_t)st.st_size < sizeof(*p))
		return err_set(-EPROTO, "the node agent's board is %lld bytes, not %zu",
			       (long long)st.st_size, sizeof(*p));
	p = mmap(NULL, sizeof(*p), PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	if (p == MAP_FAILED)
		return err_set(-errno, "cannot map the node agent's board: %s", strerror(errno));
	if (p->magic != NODE_PARK_MAGIC || p->version != NODE_PARK_VERSION ||
	    p->slots != NODE_PARK_SLOTS) {
		err_set(-EPROTO, "the node agent's board has version %u (this rank reads %d)",
			p->version, NODE_PARK_VERSION);
		munmap(p, sizeof(*p));
		return -EPROTO;
	}
	*out = p;
	return 0;
}

void node_park_unmap(struct node_park **p)
{
	if (*p)
		munmap(*p, sizeof(**p));
	*p = NULL;
}

int node_park_posted(const struct node_park *p, uint32_t *seen, char *name, size_t len)
{
	/* acquire: the name was written before the generation */
	uint32_t gen = __atomic_load_n(&p->gen, __ATOMIC_ACQUIRE);

	if (gen == *seen)
		return 0;
	*seen = gen;
	if ((int32_t)(__atomic_load_n(&p->over, __ATOMIC_ACQUIRE) - gen) >= 0)
		return 0;
	snprintf(name, len, "%.*s", (int)sizeof(p->ckpt) - 1, p->ckpt);
	return 1;
}

void node_park_answer(struct node_park *p, unsigned slot, uint32_t gen, int parked, uint64_t us,
		      int agent_bell)
{
	static const uint64_t one = 1;

	if (parked && slot < NODE_PARK_SLOTS) {
		p->slot[slot].us = us;
		__atomic_store_n(&p->slot[slot].gen, gen, __ATOMIC_RELEASE);
	}
	if (__atomic_add_fetch(&p->answered, 1, __ATOMIC_SEQ_CST) ==
	    __atomic_load_n(&p->expected, __ATOMIC_SEQ_CST) && write(agent_bell, &one, sizeof(one)) < 0) {
		/* the agent is gone: the rank's socket closes next */
	}
}

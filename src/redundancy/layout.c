/* layout.c - which ranks share a redundancy group, and who holds whose copy.
 *
 * Both layouts are pure functions of (rank -> node name), so every rank
 * computes the same answer from the same allgathered names without another
 * round of messages. Nodes are found by sorting, not by comparing every pair:
 * a job may have 100k ranks on 10k nodes.
 *
 * Groups are dealt like cards: the ranks of the node with the most ranks
 * first (ties: the node whose first rank is lowest), then the next node, all
 * in one sequence; sequence position i goes to group i mod q. A node's ranks
 * are contiguous in the sequence and number at most q, so they land in
 * distinct groups. q = max(ceil(nranks / group_size), most ranks on a node)
 * is the fewest groups that keeps nodes distinct, and dealing makes their
 * sizes differ by at most one. A rank is left alone only when one node holds
 * more than half of all ranks, and then the fewest possible are: 2 * most - n.
 */
#include "redundancy/redundancy.h"

#include "common/err.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct entry {
	const char *name;
	int rank;
};

struct node {
	int first;      /* lowest rank on the node */
	int count;      /* ranks on the node */
	int start;      /* its ranks: entries[start .. start + count), ascending */
};

struct nodes {
	struct entry *entries;
	struct node *node;
	int count;
};

static int cmp_entry(const void *a, const void *b)
{
	const struct entry *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	if (c)
		return c;
	return (x->rank > y->rank) - (x->rank < y->rank);
}

static int cmp_first(const void *a, const void *b)
{
	const struct node *x = a, *y = b;

	return (x->first > y->first) - (x->first < y->first);
}

/* Biggest node first; the tie-break keeps the order identical everywhere. */
static int cmp_biggest(const void *a, const void *b)
{
	const struct node *x = a, *y = b;

	if (x->count != y->count)
		return (x->count < y->count) - (x->count > y->count);
	return cmp_first(a, b);
}

static void nodes_free(struct nodes *ns)
{
	free(ns->entries);
	free(ns->node);
}

/* The nodes of the job in the order their first rank appears. */
static int nodes_find(int nranks, const char *const name[], struct nodes *ns)
{
	memset(ns, 0, sizeof(*ns));
	if (nranks < 0)
		return err_set(-EINVAL, "redundancy layout: %d ranks", nranks);
	for (int r = 0; r < nranks; r++)
		if (!name[r])
			return err_set(-EINVAL, "redundancy layout: rank %d has no node name", r);
	if (nranks == 0)
		return 0;
	ns->entries = malloc(sizeof(*ns->entries) * (size_t)nranks);
	ns->node = malloc(sizeof(*ns->node) * (size_t)nranks);
	if (!ns->entries || !ns->node) {
		nodes_free(ns);
		return err_set(-ENOMEM, "redundancy layout: out of memory for %d ranks", nranks);
	}
	for (int r = 0; r < nranks; r++)
		ns->entries[r] = (struct entry){ name[r], r };
	qsort(ns->entries, (size_t)nranks, sizeof(*ns->entries), cmp_entry);
	for (int i = 0; i < nranks; i++) {
		if (i > 0 && strcmp(ns->entries[i].name, ns->entries[i - 1].name) == 0) {
			ns->node[ns->count - 1].count++;
			continue;
		}
		ns->node[ns->count++] = (struct node){ ns->entries[i].rank, 1, i };
	}
	qsort(ns->node, (size_t)ns->count, sizeof(*ns->node), cmp_first);
	return 0;
}

int redun_layout_groups(int nranks, const char *const node[], unsigned group_size,
			int group[], int *ngroups, int *alone)
{
	struct nodes ns;
	int *size = NULL, *renum = NULL;
	int q, i = 0, ret;

	*ngroups = 0;
	*alone = 0;
	if (group_size < 2 || group_size > REDUN_MAX_BLOCKS)
		return err_set(-EINVAL, "redundancy layout: group size %u (need 2..%d)",
			       group_size, REDUN_MAX_BLOCKS);
	ret = nodes_find(nranks, node, &ns);
	if (ret || nranks == 0)
		return ret;
	qsort(ns.node, (size_t)ns.count, sizeof(*ns.node), cmp_biggest);
	q = (int)(((unsigned)nranks + group_size - 1) / group_size);
	if (ns.node[0].count > q)
		q = ns.node[0].count;

	size = calloc((size_t)q, sizeof(*size));
	renum = malloc(sizeof(*renum) * (size_t)q);
	if (!size || !renum) {
		ret = err_set(-ENOMEM, "redundancy layout: out of memory for %d groups", q);
		goto free_all;
	}
	for (int n = 0; n < ns.count; n++)
		for (int p = 0; p < ns.node[n].count; p++, i++)
			group[ns.entries[ns.node[n].start + p].rank] = i % q;
	/* Number groups by their lowest rank: the order a reader expects. */
	for (int g = 0; g < q; g++)
		renum[g] = -1;
	for (int r = 0; r < nranks; r++) {
		if (renum[group[r]] < 0)
			renum[group[r]] = (*ngroups)++;
		group[r] = renum[group[r]];
		size[group[r]]++;
	}
	for (int g = 0; g < q; g++)
		*alone += size[g] == 1;

free_all:
	free(size);
	free(renum);
	nodes_free(&ns);
	return ret;
}

int redun_layout_partners(int nranks, const char *const node[], int partner[], int *alone)
{
	struct nodes ns;
	int ret;

	*alone = 0;
	ret = nodes_find(nranks, node, &ns);
	if (ret || nranks == 0)
		return ret;
	for (int n = 0; n < ns.count; n++) {
		const struct node *self = &ns.node[n], *next = &ns.node[(n + 1) % ns.count];

		for (int p = 0; p < self->count; p++) {
			int r = ns.entries[self->start + p].rank;

			if (ns.count == 1) {
				partner[r] = -1;
				(*alone)++;
				continue;
			}
			partner[r] = ns.entries[next->start + p % next->count].rank;
		}
	}
	nodes_free(&ns);
	return 0;
}

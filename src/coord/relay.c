/* relay.c - GATHER in, GATHERED out (relay.h). The coordinator is the one
 * process every node agent already reaches, so the agents' bootstrap
 * (addresses, a secret, a few agreements) goes through it, a handful of
 * short lines per rank, while the bulk of their traffic goes agent to agent.
 */
#include "coord/relay.h"
#include "common/log.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define TAG_LEN 96
#define PART_MAX 400            /* hex characters of one contribution */
#define SIZE_MAX_RANKS 65536
#define STALE_S 300             /* a gather no contribution reached for that long */

struct gather {
	char tag[TAG_LEN];
	int size, have;
	char **part;            /* part[rank]: its hex, or NULL */
	int *from;              /* from[rank]: the agent that sent it */
	time_t touched;
	struct gather *next;
};

static struct gather *gathers;

static void gather_free(struct gather *g)
{
	for (int r = 0; r < g->size; r++)
		free(g->part[r]);
	free(g->part);
	free(g->from);
	free(g);
}

static void send_all(int fd, const char *buf, size_t len)
{
	while (len) {
		ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			log_debug("relay: an agent's connection closed");
			return;
		}
		buf += n;
		len -= (size_t)n;
	}
}

static int int_cmp(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;

	return (x > y) - (x < y);
}

/* Drop the gathers nobody added to for STALE_S (their agents gave up) */
static void drop_stale(time_t now)
{
	for (struct gather **p = &gathers; *p;) {
		struct gather *g = *p;

		if (now - g->touched > STALE_S) {
			log_warn("relay: gather %s dropped with %d of %d ranks", g->tag, g->have,
				 g->size);
			*p = g->next;
			gather_free(g);
		} else {
			p = &g->next;
		}
	}
}

static struct gather *gather_get(const char *tag, int size, time_t now)
{
	struct gather *g;

	for (g = gathers; g; g = g->next)
		if (!strcmp(g->tag, tag))
			return g->size == size ? g : NULL;
	g = calloc(1, sizeof(*g));
	if (!g)
		return NULL;
	snprintf(g->tag, sizeof(g->tag), "%s", tag);
	g->size = size;
	g->part = calloc((size_t)size, sizeof(*g->part));
	g->from = calloc((size_t)size, sizeof(*g->from));
	if (!g->part || !g->from) {
		free(g->part);
		free(g->from);
		free(g);
		return NULL;
	}
	g->touched = now;
	g->next = gathers;
	gathers = g;
	return g;
}

/* Every rank's line, formatted once into one block that each agent that
 * took part gets in one send: a line a rank an agent, formatted and sent
 * each time, took 162 s for one round at 65,536 ranks on 1,024 agents
 * (bench/scale's relay figures in docs/scale.md). The bytes are still
 * every rank's to every agent: an allgather. */
static void gather_done(struct gather *g)
{
	size_t len = 0, cap = 0;
	char *block;
	int n = 0;

	for (struct gather **p = &gathers; *p; p = &(*p)->next)
		if (*p == g) {
			*p = g->next;
			break;
		}
	for (int r = 0; r < g->size; r++)
		cap += strlen(g->tag) + strlen(g->part[r]) + 32;
	block = malloc(cap);
	if (!block) {
		log_warn("relay: gather %s dropped: out of memory", g->tag);
		gather_free(g);
		return;
	}
	for (int r = 0; r < g->size; r++)
		len += (size_t)snprintf(block + len, cap - len, "GATHERED %s %d %s\n", g->tag, r,
					g->part[r]);
	/* the agents, once each: from[] sorted (the order of a rank's agent
	 * does not matter, each gets the same block) */
	qsort(g->from, (size_t)g->size, sizeof(*g->from), int_cmp);
	for (int i = 0; i < g->size; i++)
		if (!i || g->from[i] != g->from[i - 1])
			g->from[n++] = g->from[i];
	for (int i = 0; i < n; i++)
		send_all(g->from[i], block, len);
	free(block);
	gather_free(g);
}

int coord_relay_gather(int fd, const char *args)
{
	char tag[TAG_LEN], hex[PART_MAX + 1];
	int rank, size;
	time_t now = time(NULL);
	struct gather *g;

	if (sscanf(args, "%95s %d %d %400s", tag, &rank, &size, hex) != 4 || size < 1 ||
	    size > SIZE_MAX_RANKS || rank < 0 || rank >= size)
		return -EINVAL;
	drop_stale(now);
	g = gather_get(tag, size, now);
	if (!g || g->part[rank])
		return -EINVAL;     /* another size for the tag, or a rank twice */
	g->part[rank] = strdup(hex);
	if (!g->part[rank])
		return -ENOMEM;
	g->from[rank] = fd;
	g->have++;
	g->touched = now;
	if (g->have == g->size)
		gather_done(g);
	return 0;
}

void coord_relay_free(void)
{
	while (gathers) {
		struct gather *g = gathers;

		gathers = g->next;
		gather_free(g);
	}
}

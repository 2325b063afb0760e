/* relay.c - GATHER in, GATHERED out (relay.h). The coordinator is the one
 * process every node agent already reaches, so the agents' bootstrap
 * (addresses, a secret, a few agreements) goes through it, a handful of
 * short lines per rank, while the bulk of their traffic goes agent to agent.
 */
#include "coord/relay.h"
#include "common/line.h"
#include "common/log.h"

#include <errno.h>
#include <stdarg.h>
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
	int *fds;               /* the agents that took part, once each */
	int nfds;
	time_t touched;
	struct gather *next;
};

static struct gather *gathers;

static void gather_free(struct gather *g)
{
	for (int r = 0; r < g->size; r++)
		free(g->part[r]);
	free(g->part);
	free(g->fds);
	free(g);
}

static void send_to(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void send_to(int fd, const char *fmt, ...)
{
	char buf[PART_MAX + TAG_LEN + 64];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = line_vformat(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n > 0 && send(fd, buf, (size_t)n, MSG_NOSIGNAL) != n)
		log_debug("relay: an agent's connection closed");
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
	g->fds = calloc((size_t)size, sizeof(*g->fds));
	if (!g->part || !g->fds) {
		free(g->part);
		free(g->fds);
		free(g);
		return NULL;
	}
	g->touched = now;
	g->next = gathers;
	gathers = g;
	return g;
}

static void gather_done(struct gather *g)
{
	for (struct gather **p = &gathers; *p; p = &(*p)->next)
		if (*p == g) {
			*p = g->next;
			break;
		}
	for (int i = 0; i < g->nfds; i++)
		for (int r = 0; r < g->size; r++)
			send_to(g->fds[i], "GATHERED %s %d %s", g->tag, r, g->part[r]);
	gather_free(g);
}

int coord_relay_gather(int fd, const char *args)
{
	char tag[TAG_LEN], hex[PART_MAX + 1];
	int rank, size, i;
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
	g->have++;
	g->touched = now;
	for (i = 0; i < g->nfds && g->fds[i] != fd; i++)
		;
	if (i == g->nfds)
		g->fds[g->nfds++] = fd;
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

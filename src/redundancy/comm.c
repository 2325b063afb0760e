/* comm.c - the transport's common part: one process (the serial backend),
 * agreement, and closing a communicator. The other backends are siblings:
 * link.c (TCP between members), comm_mpi.c (the job's MPI). */
#include "redundancy/redundancy.h"
#include "common/err.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static int one_rank(void *h)
{
	(void)h;
	return 0;
}

static int one_size(void *h)
{
	(void)h;
	return 1;
}

static int nothing(void *h)
{
	(void)h;
	return 0;
}

static int reduce_self(void *h, int64_t *v, size_t n, enum redun_op op)
{
	(void)h, (void)v, (void)n, (void)op;
	return 0;
}

static int bcast_self(void *h, void *buf, size_t len, int root)
{
	(void)h, (void)buf, (void)len, (void)root;
	return 0;
}

static int gather_self(void *h, const void *mine, size_t len, void *all)
{
	(void)h;
	memmove(all, mine, len);
	return 0;
}

static int no_peer(void *h, const void *buf, size_t len, int peer)
{
	(void)h, (void)buf, (void)len, (void)peer;
	return -EINVAL;         /* one rank has no one to talk to */
}

static int no_peer_recv(void *h, void *buf, size_t len, int peer)
{
	return no_peer(h, buf, len, peer);
}

static int no_peer_sendrecv(void *h, const void *sbuf, size_t slen, int dest, void *rbuf,
			    size_t rlen, int src)
{
	(void)h, (void)sbuf, (void)slen, (void)dest, (void)rbuf, (void)rlen, (void)src;
	return -EINVAL;
}

static void free_self(void *h)
{
	(void)h;
}

const struct redun_comm_ops redun_comm_serial = {
	.name = "serial",
	.rank = one_rank,
	.size = one_size,
	.barrier = nothing,
	.allreduce_i64 = reduce_self,
	.bcast = bcast_self,
	.allgather = gather_self,
	.send = no_peer,
	.recv = no_peer_recv,
	.sendrecv = no_peer_sendrecv,
	.free = free_self,
};

void redun_comm_close(struct redun_comm *c)
{
	if (c->ops)
		c->ops->free(c->h);
	c->ops = NULL;
	c->h = NULL;
}

int redun_agree(const struct redun_comm *c, int ok, char msg[REDUN_MSG_LEN])
{
	int rank = c->ops->rank(c->h), size = c->ops->size(c->h);
	int64_t first = ok ? size : rank;
	char mine[REDUN_MSG_LEN];

	snprintf(mine, sizeof(mine), "%s", ok ? "" : err_msg());
	if (c->ops->allreduce_i64(c->h, &first, 1, REDUN_MIN)) {
		/* the communicator itself failed (a link to a dead rank) */
		snprintf(msg, REDUN_MSG_LEN, "%s", err_msg());
		return 0;
	}
	if (first < size) {
		if (rank == first)
			memcpy(msg, mine, REDUN_MSG_LEN);
		c->ops->bcast(c->h, msg, REDUN_MSG_LEN, (int)first);
	}
	return (int)first;
}

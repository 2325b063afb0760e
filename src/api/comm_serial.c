/* comm_serial.c - the communicator of a program without MPI: one rank. */
#include "api/api.h"

#include <errno.h>
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

static int reduce_self(void *h, int64_t *v, size_t n, enum api_op op)
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

const struct api_comm_ops api_comm_serial = {
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

/* comm_mpi.c - the transport over MPI (a duplicate of the caller's
 * communicator). Compiled once per MPI library (Open MPI, MPICH), beside the
 * serial core of redundancy/, which builds and runs without MPI. */
#include <mpi.h>

#include "redundancy/redundancy.h"
#include "common/err.h"

#include <errno.h>
#include <stdlib.h>

struct mpi_handle {
	MPI_Comm comm;
};

static MPI_Comm comm_of(void *h)
{
	return ((struct mpi_handle *)h)->comm;
}

static int check(int rc, const char *what)
{
	char text[MPI_MAX_ERROR_STRING];
	int len = 0;

	if (rc == MPI_SUCCESS)
		return 0;
	MPI_Error_string(rc, text, &len);
	return err_set(-EIO, "%s: %s", what, text);
}

static int mpi_rank(void *h)
{
	int r = 0;

	MPI_Comm_rank(comm_of(h), &r);
	return r;
}

static int mpi_size(void *h)
{
	int s = 1;

	MPI_Comm_size(comm_of(h), &s);
	return s;
}

static int mpi_barrier(void *h)
{
	return check(MPI_Barrier(comm_of(h)), "MPI_Barrier");
}

static int mpi_allreduce(void *h, int64_t *v, size_t n, enum redun_op op)
{
	MPI_Op mop = op == REDUN_MIN ? MPI_MIN : op == REDUN_MAX ? MPI_MAX : MPI_SUM;

	return check(MPI_Allreduce(MPI_IN_PLACE, v, (int)n, MPI_INT64_T, mop, comm_of(h)),
		     "MPI_Allreduce");
}

static int mpi_bcast(void *h, void *buf, size_t len, int root)
{
	return check(MPI_Bcast(buf, (int)len, MPI_BYTE, root, comm_of(h)), "MPI_Bcast");
}

static int mpi_allgather(void *h, const void *mine, size_t len, void *all)
{
	return check(MPI_Allgather(mine, (int)len, MPI_BYTE, all, (int)len, MPI_BYTE, comm_of(h)),
		     "MPI_Allgather");
}

/* MPI counts are ints: large buffers go in pieces of at most 1 GiB. */
#define PIECE (1u << 30)

static int mpi_send(void *h, const void *buf, size_t len, int dest)
{
	const char *p = buf;
	int ret = 0;

	do {
		size_t n = len < PIECE ? len : PIECE;

		ret = check(MPI_Send(p, (int)n, MPI_BYTE, dest, 7001, comm_of(h)), "MPI_Send");
		p += n;
		len -= n;
	} while (!ret && len);
	return ret;
}

static int mpi_recv(void *h, void *buf, size_t len, int src)
{
	char *p = buf;
	int ret = 0;

	do {
		size_t n = len < PIECE ? len : PIECE;

		ret = check(MPI_Recv(p, (int)n, MPI_BYTE, src, 7001, comm_of(h), MPI_STATUS_IGNORE),
			    "MPI_Recv");
		p += n;
		len -= n;
	} while (!ret && len);
	return ret;
}

static int mpi_sendrecv(void *h, const void *sbuf, size_t slen, int dest, void *rbuf, size_t rlen,
			int src)
{
	if (slen > PIECE || rlen > PIECE)
		return err_set(-EINVAL, "MPI_Sendrecv: pieces above 1 GiB");
	/* a zero length sends or receives nothing, as on the progress link: two
	 * ranks exchanging different numbers of pieces stay paired */
	if (!slen && !rlen)
		return 0;
	if (!slen)
		return check(MPI_Recv(rbuf, (int)rlen, MPI_BYTE, src, 7002, comm_of(h), MPI_STATUS_IGNORE),
			     "MPI_Recv");
	if (!rlen)
		return check(MPI_Send(sbuf, (int)slen, MPI_BYTE, dest, 7002, comm_of(h)), "MPI_Send");
	return check(MPI_Sendrecv(sbuf, (int)slen, MPI_BYTE, dest, 7002, rbuf, (int)rlen, MPI_BYTE,
				  src, 7002, comm_of(h), MPI_STATUS_IGNORE), "MPI_Sendrecv");
}

static void mpi_free(void *h)
{
	struct mpi_handle *m = h;
	int finalized = 0;

	MPI_Finalized(&finalized);
	if (!finalized)
		MPI_Comm_free(&m->comm);
	free(m);
}

static const struct redun_comm_ops mpi_ops = {
	.name = "mpi",
	.rank = mpi_rank,
	.size = mpi_size,
	.barrier = mpi_barrier,
	.allreduce_i64 = mpi_allreduce,
	.bcast = mpi_bcast,
	.allgather = mpi_allgather,
	.send = mpi_send,
	.recv = mpi_recv,
	.sendrecv = mpi_sendrecv,
	.free = mpi_free,
};

int redun_comm_mpi(MPI_Comm comm, struct redun_comm *out)
{
	struct mpi_handle *m = malloc(sizeof(*m));
	int ret;

	out->ops = NULL;
	out->h = NULL;
	if (!m)
		return err_set(-ENOMEM, "out of memory");
	ret = check(MPI_Comm_dup(comm, &m->comm), "MPI_Comm_dup");
	if (ret) {
		free(m);
		return ret;
	}
	out->ops = &mpi_ops;
	out->h = m;
	return 0;
}

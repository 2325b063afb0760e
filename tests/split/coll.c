/* coll.c - collectives in a loop, with ranks arriving at different times
 * (tests/split).
 *
 *   coll ITERATIONS SLEEP_MS [skew]
 *
 * Each iteration, rank r sleeps (r + 1) * SLEEP_MS / size first, so a
 * checkpoint finds some ranks inside a collective and others before it.
 * With "skew", rank 0 does not sleep and the others sleep 10 * SLEEP_MS:
 * rank 0 waits inside MPI_Barrier most of the time.
 * Then: Barrier, Bcast, Reduce, Allreduce, Scan, Exscan, Gather, Gatherv,
 * Scatter, Scatterv, Allgather, Allgatherv, Alltoall, Alltoallv,
 * Reduce_scatter_block on MPI_COMM_WORLD; Allreduce and Bcast on an
 * even/odd MPI_Comm_split, a MPI_Comm_dup and a MPI_Comm_create of the
 * first half, interleaved so that they overlap; an Allreduce on the
 * MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) communicator, ranked in
 * reverse; an Ibarrier and an Ibcast
 * completed with Test loops and Wait around a sleep; the twelve other
 * non-blocking collectives of MPI_COMM_WORLD, started in two sixes with a
 * sleep between and after, completed by one MPI_Waitall. Every result is
 * checked against what it must be; rank 0 prints "rank 0 iteration I"
 * and at the end "PASS ranks=N iterations=I checks=K". */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

static long checks;

#define CHECK(c)                                                                       \
	do {                                                                           \
		checks++;                                                              \
		if (!(c)) {                                                            \
			printf("FAIL rank %d iteration %d line %d: %s\n", rank, it,     \
			       __LINE__, #c);                                          \
			fflush(stdout);                                                \
			MPI_Abort(MPI_COMM_WORLD, 3);                                  \
		}                                                                      \
	} while (0)

static void nap(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

/* The other non-blocking collectives: six started, a nap, six more, a nap
 * (a checkpoint may come with every one outstanding), one MPI_Waitall;
 * every rank checks each result once (where only a root gets one, the
 * others check nothing in that CHECK). counts/displs: rank r's r + 1 ints
 * at n(r) in a vector of n. */
#define NB_MAX 2100   /* n for 64 ranks */

static void nonblocking(int rank, int size, int it, long sleep_ms, const int *counts,
			const int *displs, int n)
{
	static int g1[64], g2[NB_MAX], s3[64], r3[64], s4[64], r4[64], g5[64], g6[NB_MAX];
	static int s7[64], s8[NB_MAX], b8[64], s9[64], s10[64], one[64], sd[64], rd[64];
	int x1 = rank * 7 + it, b2[64], x5 = rank * 3 + it, b6[64], y7 = -1, y9 = -1, y10 = -1;
	int x11 = rank + 1, y11 = -1, y12 = -1, ok;
	MPI_Request q[12];
	MPI_Status qs[12];

	for (int r = 0; r < size; r++) {
		s3[r] = s4[r] = rank * 1000 + r + it;
		s7[r] = r * 5 + it;
		s9[r] = s10[r] = r + rank + it;
		one[r] = 1;
		sd[r] = r;
		rd[r] = size - 1 - r;
	}
	for (int i = 0; i <= rank; i++)
		b2[i] = b6[i] = rank * 10 + i + it;
	for (int i = 0; i < n; i++)
		s8[i] = i * 2 + it;
	memset(g1, -1, sizeof(g1));
	memset(g2, -1, sizeof(g2));
	memset(r3, -1, sizeof(r3));
	memset(r4, -1, sizeof(r4));
	memset(g5, -1, sizeof(g5));
	memset(g6, -1, sizeof(g6));
	memset(b8, -1, sizeof(b8));
	MPI_Iallgather(&x1, 1, MPI_INT, g1, 1, MPI_INT, MPI_COMM_WORLD, &q[0]);
	MPI_Iallgatherv(b2, rank + 1, MPI_INT, g2, counts, displs, MPI_INT, MPI_COMM_WORLD, &q[1]);
	MPI_Ialltoall(s3, 1, MPI_INT, r3, 1, MPI_INT, MPI_COMM_WORLD, &q[2]);
	MPI_Ialltoallv(s4, one, sd, MPI_INT, r4, one, rd, MPI_INT, MPI_COMM_WORLD, &q[3]);
	MPI_Igather(&x5, 1, MPI_INT, g5, 1, MPI_INT, 0, MPI_COMM_WORLD, &q[4]);
	MPI_Igatherv(b6, rank + 1, MPI_INT, g6, counts, displs, MPI_INT, size - 1, MPI_COMM_WORLD,
		     &q[5]);
	/* ranks came here at different times (the Ibcast's nap): a checkpoint
	 * now finds some with six started that others have not started */
	nap((size - rank) * sleep_ms / size / 2);
	MPI_Iscatter(s7, 1, MPI_INT, &y7, 1, MPI_INT, 0, MPI_COMM_WORLD, &q[6]);
	MPI_Iscatterv(s8, counts, displs, MPI_INT, b8, rank + 1, MPI_INT, 0, MPI_COMM_WORLD, &q[7]);
	MPI_Ireduce_scatter(s9, &y9, one, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q[8]);
	MPI_Ireduce_scatter_block(s10, &y10, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q[9]);
	MPI_Iscan(&x11, &y11, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q[10]);
	MPI_Iexscan(&x11, &y12, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q[11]);
	nap((rank + 1) * sleep_ms / size / 2);
	CHECK(MPI_Waitall(12, q, qs) == MPI_SUCCESS);
	ok = 1;
	for (int r = 0; r < size; r++)
		ok = ok && g1[r] == r * 7 + it;
	CHECK(ok);
	ok = 1;
	for (int r = 0; r < size; r++)
		for (int i = 0; i <= r; i++)
			ok = ok && g2[displs[r] + i] == r * 10 + i + it;
	CHECK(ok);
	ok = 1;
	for (int r = 0; r < size; r++)
		ok = ok && r3[r] == r * 1000 + rank + it && r4[size - 1 - r] == r * 1000 + rank + it;
	CHECK(ok);
	ok = 1;
	for (int r = 0; rank == 0 && r < size; r++)
		ok = ok && g5[r] == r * 3 + it;
	CHECK(ok);
	ok = 1;
	for (int r = 0; rank == size - 1 && r < size; r++)
		for (int i = 0; i <= r; i++)
			ok = ok && g6[displs[r] + i] == r * 10 + i + it;
	CHECK(ok);
	CHECK(y7 == rank * 5 + it);
	ok = 1;
	for (int i = 0; i <= rank; i++)
		ok = ok && b8[i] == (displs[rank] + i) * 2 + it;
	CHECK(ok);
	CHECK(y9 == rank * size + size * (size - 1) / 2 + size * it);
	CHECK(y10 == rank * size + size * (size - 1) / 2 + size * it);
	CHECK(y11 == (rank + 1) * (rank + 2) / 2);
	CHECK(rank == 0 || y12 == rank * (rank + 1) / 2);
}

int main(int argc, char **argv)
{
	int rank, size, iters = argc > 1 ? atoi(argv[1]) : 10, it = -1;
	long sleep_ms = argc > 2 ? atol(argv[2]) : 50, total = 0;
	int skew = argc > 3 && !strcmp(argv[3], "skew");
	MPI_Comm split, dup, half, node, none;
	MPI_Group world_g, half_g;
	int *a, *b, *counts, *displs, half_n, node_rank, node_max;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &split);
	MPI_Comm_dup(MPI_COMM_WORLD, &dup);
	half_n = (size + 1) / 2;
	{
		int r[64];

		for (int i = 0; i < half_n; i++)
			r[i] = i;
		MPI_Comm_group(MPI_COMM_WORLD, &world_g);
		MPI_Group_incl(world_g, half_n, r, &half_g);
		MPI_Comm_create(MPI_COMM_WORLD, half_g, &half);
	}
	/* the ranks that share this rank's node, in reverse (key size - rank):
	 * its rank there is the number of them above it, the highest is the
	 * node communicator's largest world rank. The communicator keeps these
	 * members across a restart, wherever the ranks then run. */
	MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, size - rank, MPI_INFO_NULL, &node);
	{
		char (*hosts)[64] = calloc((size_t)size, 64);

		gethostname(hosts[rank], 63);
		MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, hosts, 64, MPI_CHAR, MPI_COMM_WORLD);
		node_rank = 0;
		node_max = rank;
		for (int r = 0; r < size; r++)
			if (r != rank && !strcmp(hosts[r], hosts[rank])) {
				node_rank += r > rank;
				node_max = r > node_max ? r : node_max;
			}
		free(hosts);
	}
	MPI_Comm_split_type(MPI_COMM_WORLD, MPI_UNDEFINED, 0, MPI_INFO_NULL, &none);
	if (none != MPI_COMM_NULL) {
		printf("FAIL rank %d: MPI_Comm_split_type(MPI_UNDEFINED) made a communicator\n", rank);
		fflush(stdout);
		MPI_Abort(MPI_COMM_WORLD, 3);
	}
	a = calloc((size_t)size * 4, sizeof(int));
	b = calloc((size_t)size * 4, sizeof(int));
	counts = calloc((size_t)size, sizeof(int));
	displs = calloc((size_t)size, sizeof(int));
	for (it = 0; it < iters; it++) {
		int x, y, flag = 0, n = 0;
		MPI_Request req;

		if (rank == 0) {
			printf("rank 0 iteration %d\n", it);
			fflush(stdout);
		}
		nap(skew ? (rank ? 10 * sleep_ms : 0) : (rank + 1) * sleep_ms / size);
		MPI_Barrier(MPI_COMM_WORLD);
		x = rank == 0 ? 1000 + it : -1;
		MPI_Bcast(&x, 1, MPI_INT, 0, MPI_COMM_WORLD);
		CHECK(x == 1000 + it);
		x = rank + it;
		y = -1;
		MPI_Reduce(&x, &y, 1, MPI_INT, MPI_SUM, size - 1, MPI_COMM_WORLD);
		if (rank == size - 1)
			CHECK(y == size * (size - 1) / 2 + size * it);
		MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
		CHECK(y == size - 1 + it);
		/* overlapping communicators, in an order that differs by rank */
		if (rank % 2) {
			MPI_Allreduce(&rank, &y, 1, MPI_INT, MPI_SUM, split);
			MPI_Allreduce(&rank, &x, 1, MPI_INT, MPI_MIN, dup);
		} else {
			MPI_Allreduce(&rank, &x, 1, MPI_INT, MPI_MIN, dup);
			MPI_Allreduce(&rank, &y, 1, MPI_INT, MPI_SUM, split);
		}
		CHECK(x == 0);
		{
			int expect = 0;

			for (int r = rank % 2; r < size; r += 2)
				expect += r;
			CHECK(y == expect);
		}
		/* the node communicator, its ranks in reverse (key size - rank) */
		x = -1;
		MPI_Comm_rank(node, &x);
		y = -1;
		MPI_Allreduce(&rank, &y, 1, MPI_INT, MPI_MAX, node);
		CHECK(x == node_rank && y == node_max);
		if (half != MPI_COMM_NULL) {
			x = rank == 0 ? it * 7 : 0;
			MPI_Bcast(&x, 1, MPI_INT, 0, half);
			CHECK(x == it * 7);
		}
		x = rank + 1;
		MPI_Scan(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
		CHECK(y == (rank + 1) * (rank + 2) / 2);
		MPI_Exscan(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
		if (rank > 0)
			CHECK(y == rank * (rank + 1) / 2);
		x = rank * 3 + it;
		MPI_Gather(&x, 1, MPI_INT, a, 1, MPI_INT, 0, MPI_COMM_WORLD);
		if (rank == 0)
			for (int r = 0; r < size; r++)
				CHECK(a[r] == r * 3 + it);
		for (int r = 0; r < size; r++) {
			counts[r] = r + 1;
			displs[r] = n;
			n += r + 1;
		}
		for (int i = 0; i <= rank; i++)
			b[i] = rank * 100 + i + it;
		MPI_Gatherv(b, rank + 1, MPI_INT, a, counts, displs, MPI_INT, size - 1, MPI_COMM_WORLD);
		if (rank == size - 1)
			for (int r = 0; r < size; r++)
				for (int i = 0; i <= r; i++)
					CHECK(a[displs[r] + i] == r * 100 + i + it);
		if (rank == 0)
			for (int r = 0; r < size; r++)
				a[r] = r * 5 + it;
		MPI_Scatter(a, 1, MPI_INT, &y, 1, MPI_INT, 0, MPI_COMM_WORLD);
		CHECK(y == rank * 5 + it);
		if (rank == 0)
			for (int i = 0; i < n; i++)
				a[i] = i * 2 + it;
		MPI_Scatterv(a, counts, displs, MPI_INT, b, rank + 1, MPI_INT, 0, MPI_COMM_WORLD);
		for (int i = 0; i <= rank; i++)
			CHECK(b[i] == (displs[rank] + i) * 2 + it);
		x = rank ^ it;
		MPI_Allgather(&x, 1, MPI_INT, a, 1, MPI_INT, MPI_COMM_WORLD);
		for (int r = 0; r < size; r++)
			CHECK(a[r] == (r ^ it));
		for (int i = 0; i <= rank; i++)
			b[i] = rank * 10 + i;
		MPI_Allgatherv(b, rank + 1, MPI_INT, a, counts, displs, MPI_INT, MPI_COMM_WORLD);
		for (int r = 0; r < size; r++)
			for (int i = 0; i <= r; i++)
				CHECK(a[displs[r] + i] == r * 10 + i);
		for (int r = 0; r < size; r++)
			b[r] = rank * 1000 + r + it;
		MPI_Alltoall(b, 1, MPI_INT, a, 1, MPI_INT, MPI_COMM_WORLD);
		for (int r = 0; r < size; r++)
			CHECK(a[r] == r * 1000 + rank + it);
		{
			int sc[64], sd[64], rc[64], rd[64];

			for (int r = 0; r < size; r++) {
				sc[r] = 1;
				sd[r] = r;
				rc[r] = 1;
				rd[r] = size - 1 - r;
			}
			MPI_Alltoallv(b, sc, sd, MPI_INT, a, rc, rd, MPI_INT, MPI_COMM_WORLD);
			for (int r = 0; r < size; r++)
				CHECK(a[size - 1 - r] == r * 1000 + rank + it);
		}
		for (int r = 0; r < size; r++)
			b[r] = r + rank;
		MPI_Reduce_scatter_block(b, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
		CHECK(y == rank * size + size * (size - 1) / 2);
		/* non-blocking: started, a nap (a checkpoint may come), completed */
		MPI_Ibarrier(MPI_COMM_WORLD, &req);
		nap(sleep_ms / 4);
		while (!flag)
			MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
		CHECK(req == MPI_REQUEST_NULL);
		x = rank == size - 1 ? 77 + it : 0;
		MPI_Ibcast(&x, 1, MPI_INT, size - 1, MPI_COMM_WORLD, &req);
		nap((size - rank) * sleep_ms / size / 2);
		MPI_Wait(&req, MPI_STATUS_IGNORE);
		CHECK(x == 77 + it);
		nonblocking(rank, size, it, sleep_ms, counts, displs, n);
	}
	MPI_Allreduce(&checks, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0)
		printf("PASS ranks=%d iterations=%d checks=%ld\n", size, iters, total);
	if (half != MPI_COMM_NULL)
		MPI_Comm_free(&half);
	MPI_Comm_free(&split);
	MPI_Comm_free(&dup);
	MPI_Comm_free(&node);
	MPI_Group_free(&half_g);
	MPI_Group_free(&world_g);
	MPI_Finalize();
	return 0;
}

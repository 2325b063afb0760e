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
 * first half, interleaved so that they overlap; an Ibarrier and an Ibcast
 * completed with Test loops and Wait around a sleep. Every result is
 * checked against what it must be; rank 0 prints "rank 0 iteration I"
 * and at the end "PASS ranks=N iterations=I checks=K". */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

int main(int argc, char **argv)
{
	int rank, size, iters = argc > 1 ? atoi(argv[1]) : 10, it = -1;
	long sleep_ms = argc > 2 ? atol(argv[2]) : 50, total = 0;
	int skew = argc > 3 && !strcmp(argv[3], "skew");
	MPI_Comm split, dup, half;
	MPI_Group world_g, half_g;
	int *a, *b, *counts, *displs, half_n;

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
	}
	MPI_Allreduce(&checks, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0)
		printf("PASS ranks=%d iterations=%d checks=%ld\n", size, iters, total);
	if (half != MPI_COMM_NULL)
		MPI_Comm_free(&half);
	MPI_Comm_free(&split);
	MPI_Comm_free(&dup);
	MPI_Group_free(&half_g);
	MPI_Group_free(&world_g);
	MPI_Finalize();
	return 0;
}

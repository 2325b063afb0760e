/* rma_pscw.c - post, start, complete, wait across checkpoints
 * (tests/split/test_rma.py).
 *
 *   rma_pscw ITERATIONS SLEEP_MS
 *
 * Any number of ranks >= 2, window A of NI ints per rank by
 * MPI_Win_create. Every iteration I rank 0 prints "rank 0 iteration I",
 * then every rank, in a ring: posts its window to its left neighbour
 * (MPI_Win_post), starts an access epoch to its right one
 * (MPI_Win_start), puts NI values of its own and I into it, sleeps
 * SLEEP_MS with both epochs open and the put issued (a checkpoint comes
 * there), completes, then waits for its exposure to end (MPI_Win_wait on
 * even iterations, an MPI_Win_test loop on odd ones) and checks A (what
 * its left neighbour put); then rank 0 posts its window B (a second
 * window) to every other rank and waits at once, while each of those
 * starts, sleeps SLEEP_MS / 4, accumulates I + 1 into B's element 0 and
 * completes: rank 0 checks the sum so far, (N - 1) * sum of I + 1 (a
 * wait that returns before the completions shows) (2 checks).
 * At the end rank 0 prints "PASS ranks=N iterations=I checks=C sum=S"
 * with C = 2 * N * I; a wrong value prints a FAIL line and aborts. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "fail.h"

#define NI 500

static int rank, size, it = -1;
static long checks;
static int a[NI];
static long b[4];

static void nap(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

static int val(int r, int i, int k)
{
	return r * 100003 + i * 13 + k * 7;
}

int main(int argc, char **argv)
{
	int iters = argc > 1 ? atoi(argv[1]) : 10, ms = argc > 2 ? atoi(argv[2]) : 100;
	long sum = 0;
	MPI_Win wa, wb;
	MPI_Group world, gl, gr, g0, gall;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	int right = (rank + 1) % size, left = (rank + size - 1) % size, zero = 0;

	MPI_Comm_group(MPI_COMM_WORLD, &world);
	MPI_Group_incl(world, 1, &left, &gl);
	MPI_Group_incl(world, 1, &right, &gr);
	MPI_Group_incl(world, 1, &zero, &g0);
	MPI_Group_excl(world, 1, &zero, &gall);
	MPI_Win_create(a, sizeof(a), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &wa);
	MPI_Win_create(b, sizeof(b), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &wb);
	for (it = 0; it < iters; it++) {
		int out[NI], flag = 0;
		long inc = it + 1;

		if (rank == 0) {
			printf("rank 0 iteration %d\n", it);
			fflush(stdout);
		}
		MPI_Win_post(gl, 0, wa);
		MPI_Win_start(gr, 0, wa);
		for (int i = 0; i < NI; i++)
			out[i] = val(rank, i, it);
		MPI_Put(out, NI, MPI_INT, right, 0, NI, MPI_INT, wa);
		nap(ms);
		MPI_Win_complete(wa);
		if (it % 2 == 0)
			MPI_Win_wait(wa);
		else
			while (!flag)
				MPI_Win_test(wa, &flag);
		int ok = 1;

		for (int i = 0; i < NI; i++)
			ok &= a[i] == val(left, i, it);
		if (!ok)
			fail(rank, it, "window A after the access epoch of the left neighbour");
		checks++;
		sum += (long)(size - 1) * (it + 1);
		if (rank == 0) {
			MPI_Win_post(gall, 0, wb);
			MPI_Win_wait(wb);
			fail_unless(rank, it, "B[0] after the wait", b[0], sum);
		} else {
			MPI_Win_start(g0, 0, wb);
			nap(ms / 4);
			MPI_Accumulate(&inc, 1, MPI_LONG, 0, 0, 1, MPI_LONG, MPI_SUM, wb);
			MPI_Win_complete(wb);
		}
		checks++;
	}
	MPI_Win_free(&wa);
	MPI_Win_free(&wb);
	MPI_Allreduce(MPI_IN_PLACE, &checks, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0)
		printf("PASS ranks=%d iterations=%d checks=%ld sum=%ld\n", size, iters, checks, b[0]);
	MPI_Finalize();
	return 0;
}

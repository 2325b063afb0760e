/* rma_fence.c - one-sided communication with fences across checkpoints
 * (tests/split/test_rma.py).
 *
 *   rma_fence ITERATIONS SLEEP_MS
 *
 * Any number of ranks >= 2. Before the loop each rank makes window A with
 * MPI_Win_create over NI ints of its own and window B with
 * MPI_Win_allocate of NI longs (zeroed), and fences both. Every iteration
 * I rank 0 prints "rank 0 iteration I", then every rank
 *  1. puts NI ints (values of this rank and I) into A of its right
 *     neighbour, accumulates (MPI_SUM) (I + 1) * (rank + 1) into element
 *     0 of B of every rank and 1 into its own element rank + 1 of B of its
 *     left neighbour, sleeps SLEEP_MS * (rank + 1) / N with these in
 *     flight (a checkpoint comes there, or finds a rank that slept less
 *     waiting inside the fence), then fences both windows and checks A (what its left
 *     neighbour put), B[0] (the sum of every iteration's contributions so
 *     far: it lives in the window's memory across checkpoints) and B[r+1]
 *     (I + 1) (3 checks);
 *  2. gets A of its right neighbour into a buffer, sleeps SLEEP_MS / 4,
 *     fences A and checks what it got: the values it put there in step 1
 *     (1 check).
 * At the end each rank frees both windows (null handles after), rank 0
 * prints "PASS ranks=N iterations=I checks=C sum=S" with C = 4 * N * I and
 * S its final B[0]; a wrong value prints a FAIL line and aborts the job. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "fail.h"

#define NI 1000

static int rank, size, it = -1;
static long checks;
static int a[NI], got[NI];

static void nap(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

static int val(int r, int i, int k)
{
	return r * 1000003 + i * 7 + k * 31;
}

static void check(int ok, const char *what)
{
	if (!ok)
		fail(rank, it, what);
	checks++;
}

int main(int argc, char **argv)
{
	int iters = argc > 1 ? atoi(argv[1]) : 10, ms = argc > 2 ? atoi(argv[2]) : 100;
	long *b, mine[NI], one = 1, sum = 0, per = 0;
	MPI_Win wa, wb;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	int right = (rank + 1) % size, left = (rank + size - 1) % size;

	for (int r = 0; r < size; r++)
		per += r + 1;
	MPI_Win_create(a, sizeof(a), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &wa);
	MPI_Win_allocate(NI * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &b, &wb);
	for (int i = 0; i < NI; i++)
		b[i] = 0;
	MPI_Win_fence(0, wa);
	MPI_Win_fence(0, wb);
	for (it = 0; it < iters; it++) {
		int out[NI];

		if (rank == 0) {
			printf("rank 0 iteration %d\n", it);
			fflush(stdout);
		}
		for (int i = 0; i < NI; i++)
			out[i] = val(rank, i, it);
		MPI_Put(out, NI, MPI_INT, right, 0, NI, MPI_INT, wa);
		mine[0] = (long)(it + 1) * (rank + 1);
		for (int r = 0; r < size; r++)
			MPI_Accumulate(mine, 1, MPI_LONG, r, 0, 1, MPI_LONG, MPI_SUM, wb);
		MPI_Accumulate(&one, 1, MPI_LONG, left, rank + 1, 1, MPI_LONG, MPI_SUM, wb);
		for (int i = 0; i < NI; i++)
			out[i] = -1;   /* the origin buffer is the program's again after the fence */
		nap(ms * (rank + 1) / size);
		MPI_Win_fence(0, wa);
		MPI_Win_fence(0, wb);
		sum += (long)(it + 1) * per;
		int ok = 1;

		for (int i = 0; i < NI; i++)
			ok &= a[i] == val(left, i, it);
		check(ok, "window A after the put");
		fail_unless(rank, it, "B[0]", b[0], sum), checks++;
		fail_unless(rank, it, "B[right + 1]", b[right + 1], it + 1), checks++;
		MPI_Get(got, NI, MPI_INT, right, 0, NI, MPI_INT, wa);
		nap(ms / 4);
		MPI_Win_fence(0, wa);
		ok = 1;
		for (int i = 0; i < NI; i++)
			ok &= got[i] == val(rank, i, it);
		check(ok, "what MPI_Get read of the right neighbour's window A");
	}
	MPI_Win_free(&wa);
	MPI_Win_free(&wb);
	if (wa != MPI_WIN_NULL || wb != MPI_WIN_NULL)
		fail(rank, it, "MPI_Win_free left a handle");
	MPI_Allreduce(MPI_IN_PLACE, &checks, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0)
		printf("PASS ranks=%d iterations=%d checks=%ld sum=%ld\n", size, iters, checks, sum);
	MPI_Finalize();
	return 0;
}

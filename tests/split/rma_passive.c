/* rma_passive.c - passive-target one-sided communication and atomics
 * across checkpoints (tests/split/test_rma.py).
 *
 *   rma_passive ITERATIONS SLEEP_MS
 *
 * Any number of ranks >= 2. Before the loop each rank makes a window of
 * NW longs with MPI_Win_allocate, zeroed. Every iteration I rank 0 prints
 * "rank 0 iteration I", then every rank
 *  1. locks rank 0's window exclusively, gets its element 0, flushes,
 *     sleeps SLEEP_MS / 2 inside the epoch (a checkpoint comes there; the
 *     other rank waits for the lock), puts it back plus one and unlocks:
 *     a lost update or two holders at once show in the final count;
 *  2. inside MPI_Win_lock_all: MPI_Fetch_and_op of rank + 1 onto element 1
 *     of every rank, MPI_Compare_and_swap of element 2 of the right
 *     neighbour from I to I + 1 (its result must be I), MPI_Get_accumulate
 *     (MPI_SUM) of rank + 1 onto element 3 of the left neighbour, MPI_Rput
 *     of I into element 4 + rank of rank 0, MPI_Raccumulate of rank + 1
 *     onto rank 0's element 40, MPI_Rget_accumulate of rank + 1 onto
 *     element 41 of the left neighbour (its result must be I * (rank +
 *     1)), MPI_Rget of the right neighbour's element 42 (its rank times
 *     1000, set before the loop), MPI_Waitall of the four requests;
 *     sleeps SLEEP_MS / 2 with the rest in flight (another checkpoint
 *     point), MPI_Win_flush_all, MPI_Win_unlock_all;
 *  3. MPI_Barrier, then reads its own window inside a shared lock on
 *     itself and checks element 1 ((I + 1) * the sum of rank + 1),
 *     element 2 (I + 1), element 3 and 41 ((I + 1) * (right + 1)), and on
 *     rank 0 element 0 ((I + 1) * N), each element 4 + r (I) and element
 *     40 ((I + 1) * the sum of rank + 1) (4 checks).
 * At the end each rank frees the window, rank 0 prints
 * "PASS ranks=N iterations=I checks=C count=K" with C = 4 * N * I and K
 * its element 0; a wrong value prints a FAIL line and aborts the job. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "fail.h"

/* MPICH's MPI_STATUSES_IGNORE is the address 1: gcc sees an access to it */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif

#define NW 64

static int rank, size, it = -1;
static long checks;

static void nap(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
	int iters = argc > 1 ? atoi(argv[1]) : 10, ms = argc > 2 ? atoi(argv[2]) : 100;
	long *b, per = 0;
	MPI_Win w;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	int right = (rank + 1) % size, left = (rank + size - 1) % size;

	if (size < 2 || size > 36) {
		fprintf(stderr, "rma_passive: 2 to 36 ranks\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	for (int r = 0; r < size; r++)
		per += r + 1;
	MPI_Win_allocate(NW * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &b, &w);
	MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank, 0, w);
	for (int i = 0; i < NW; i++)
		b[i] = 0;
	b[42] = rank * 1000L;
	MPI_Win_unlock(rank, w);
	MPI_Barrier(MPI_COMM_WORLD);
	for (it = 0; it < iters; it++) {
		long v = 0, add = rank + 1, old = -1, cmp = it, swp = it + 1, prev = -1, got = -1;
		long mine = it;

		if (rank == 0) {
			printf("rank 0 iteration %d\n", it);
			fflush(stdout);
		}
		MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, w);
		MPI_Get(&v, 1, MPI_LONG, 0, 0, 1, MPI_LONG, w);
		MPI_Win_flush(0, w);
		nap(ms / 2);
		v++;
		MPI_Put(&v, 1, MPI_LONG, 0, 0, 1, MPI_LONG, w);
		MPI_Win_unlock(0, w);

		MPI_Win_lock_all(0, w);
		for (int r = 0; r < size; r++)
			MPI_Fetch_and_op(&add, &old, MPI_LONG, r, 1, MPI_SUM, w);
		MPI_Compare_and_swap(&swp, &cmp, &prev, MPI_LONG, right, 2, w);
		MPI_Get_accumulate(&add, 1, MPI_LONG, &got, 1, MPI_LONG, left, 3, 1, MPI_LONG,
				   MPI_SUM, w);
		MPI_Request q[4];
		long rga = -1, rg = -1;

		MPI_Rput(&mine, 1, MPI_LONG, 0, 4 + rank, 1, MPI_LONG, w, &q[0]);
		MPI_Raccumulate(&add, 1, MPI_LONG, 0, 40, 1, MPI_LONG, MPI_SUM, w, &q[1]);
		MPI_Rget_accumulate(&add, 1, MPI_LONG, &rga, 1, MPI_LONG, left, 41, 1, MPI_LONG,
				    MPI_SUM, w, &q[2]);
		MPI_Rget(&rg, 1, MPI_LONG, right, 42, 1, MPI_LONG, w, &q[3]);
		MPI_Waitall(4, q, MPI_STATUSES_IGNORE);
		fail_unless(rank, it, "what MPI_Rget_accumulate found", rga, it * (long)(rank + 1));
		fail_unless(rank, it, "what MPI_Rget read", rg, right * 1000L);
		nap(ms / 2);
		MPI_Win_flush_all(w);
		MPI_Win_unlock_all(w);
		fail_unless(rank, it, "what MPI_Compare_and_swap found", prev, it);
		fail_unless(rank, it, "what MPI_Get_accumulate found", got, it * (long)(rank + 1));
		if (old < 0)
			fail(rank, it, "MPI_Fetch_and_op gave nothing back");

		MPI_Barrier(MPI_COMM_WORLD);
		MPI_Win_lock(MPI_LOCK_SHARED, rank, 0, w);
		fail_unless(rank, it, "element 1 (fetch and op)", b[1], (it + 1) * per), checks++;
		fail_unless(rank, it, "element 2 (compare and swap)", b[2], it + 1), checks++;
		fail_unless(rank, it, "element 3 (get accumulate)", b[3], (it + 1) * (long)(right + 1)),
			checks++;
		fail_unless(rank, it, "element 41 (rget accumulate)", b[41], (it + 1) * (long)(right + 1));
		if (rank == 0) {
			fail_unless(rank, it, "element 0 (exclusive updates)", b[0], (it + 1) * (long)size);
			for (int r = 0; r < size; r++)
				fail_unless(rank, it, "element 4 + r (rputs)", b[4 + r], it);
			fail_unless(rank, it, "element 40 (raccumulate)", b[40], (it + 1) * per);
		}
		checks++;
		MPI_Win_unlock(rank, w);
		MPI_Barrier(MPI_COMM_WORLD);   /* read before the next iteration changes it */
	}
	long count = rank == 0 ? b[0] : 0;

	MPI_Win_free(&w);
	if (w != MPI_WIN_NULL)
		fail(rank, it, "MPI_Win_free left a handle");
	MPI_Allreduce(MPI_IN_PLACE, &checks, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0)
		printf("PASS ranks=%d iterations=%d checks=%ld count=%ld\n", size, iters, checks, count);
	MPI_Finalize();
	return 0;
}

/* rma_shared.c - a shared-memory window across checkpoints (docs/split.md,
 * "Shared-memory windows"; tests/split/test_rma.py). 2 ranks or more, on
 * one node.
 *
 *   rma_shared ITERATIONS SLEEP_MS
 *
 * The ranks of the node (MPI_Comm_split_type) allocate a window of
 * MPI_Win_allocate_shared, N + 1 longs each, and find each other's parts
 * with MPI_Win_shared_query, which must be contiguous in rank order. Inside a
 * lock_all epoch, every iteration I each rank stores v(R, I, k) with plain
 * stores into its right neighbour's part and adds R + 1 to the counter
 * after rank 0's N longs (MPI_Accumulate through the window), sleeps
 * SLEEP_MS (rank 0) or 2 * SLEEP_MS (the others) with those made, where
 * the checkpoints come; then MPI_Win_flush_all, MPI_Win_sync,
 * MPI_Barrier, MPI_Win_sync, and checks with plain loads that its own
 * part holds what its left neighbour stored: after a restart that holds
 * only if the memory is one again and its contents came back. Rank 0
 * prints "rank 0 iteration I", then "PASS ranks=N iterations=I
 * counter=C" (C: the ranks' sum times the iterations). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "fail.h"

#define N 512

static long v(int r, int i, int k)
{
	return (long)r * 100000 + (long)i * 1000 + k;
}

static void nap(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

/* the part of rank r, its size and unit checked */
static long *part(MPI_Win win, int r, int me)
{
	MPI_Aint size;
	int unit;
	long *p;

	MPI_Win_shared_query(win, r, &size, &unit, &p);
	fail_unless(me, 0, "MPI_Win_shared_query's size", (long)size, (N + 1) * (long)sizeof(long));
	fail_unless(me, 0, "MPI_Win_shared_query's disp_unit", unit, (long)sizeof(long));
	return p;
}

int main(int argc, char **argv)
{
	int rank, size, iters, sleep_ms, right, left, unit;
	long *mine, **at, *any;
	MPI_Aint sz;
	MPI_Comm node;
	MPI_Win win;

	MPI_Init(&argc, &argv);
	MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
	MPI_Comm_rank(node, &rank);
	MPI_Comm_size(node, &size);
	if (argc < 3 || size < 2)
		fail(rank, 0, "usage: rma_shared ITERATIONS SLEEP_MS, on 2 ranks or more of one node");
	iters = atoi(argv[1]);
	sleep_ms = atoi(argv[2]);
	right = (rank + 1) % size;
	left = (rank + size - 1) % size;
	MPI_Win_allocate_shared((MPI_Aint)(N + 1) * (MPI_Aint)sizeof(long), sizeof(long),
				MPI_INFO_NULL, node, &mine, &win);
	at = calloc((size_t)size, sizeof(*at));
	for (int r = 0; r < size; r++) {
		at[r] = part(win, r, rank);
		fail_unless(rank, 0, "a part's offset from rank 0's", (long)(at[r] - at[0]),
			    (long)(N + 1) * r);
	}
	if (at[rank] != mine)
		fail(rank, 0, "MPI_Win_shared_query's base for this rank is not MPI_Win_allocate_shared's");
	MPI_Win_shared_query(win, MPI_PROC_NULL, &sz, &unit, &any);
	if (any != at[0])
		fail(rank, 0, "MPI_Win_shared_query(MPI_PROC_NULL) is not rank 0's part");
	MPI_Win_lock_all(0, win);
	for (int i = 0; i < iters; i++) {
		long one = rank + 1;

		for (int k = 0; k < N; k++)
			at[right][k] = v(rank, i, k);
		MPI_Accumulate(&one, 1, MPI_LONG, 0, N, 1, MPI_LONG, MPI_SUM, win);
		nap(rank ? 2 * sleep_ms : sleep_ms);
		MPI_Win_flush_all(win);
		MPI_Win_sync(win);
		MPI_Barrier(node);
		MPI_Win_sync(win);
		for (int k = 0; k < N; k++)
			fail_unless(rank, i, "an element the left neighbour stored", mine[k],
				    v(left, i, k));
		fail_unless(rank, i, "the counter, read through another rank's part",
			    at[0][N] >= (long)size * (size + 1) / 2 * (i + 1), 1);
		MPI_Barrier(node);   /* every rank checked before the next stores */
		if (rank == 0) {
			printf("rank 0 iteration %d\n", i);
			fflush(stdout);
		}
	}
	MPI_Win_unlock_all(win);
	fail_unless(rank, iters, "the counter", at[0][N], (long)size * (size + 1) / 2 * iters);
	if (rank == 0)
		printf("PASS ranks=%d iterations=%d counter=%ld\n", size, iters, at[0][N]);
	MPI_Win_free(&win);
	free(at);
	MPI_Comm_free(&node);
	MPI_Finalize();
	return 0;
}

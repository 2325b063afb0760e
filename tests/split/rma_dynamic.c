/* rma_dynamic.c - a dynamic window across checkpoints (docs/split.md,
 * "Windows"; tests/split/test_rma.py). 2 ranks or more.
 *
 *   rma_dynamic ITERATIONS SLEEP_MS
 *
 * Every rank makes a window with MPI_Win_create_dynamic and attaches a
 * static array of N longs to it; at iteration 2 it attaches a second
 * region, malloc'd, of one counter, and detaches it again at iteration
 * ITERATIONS - 2. The ranks exchange the regions' addresses
 * (MPI_Get_address, MPI_Allgather): displacements in a dynamic window are
 * addresses. Every iteration I, inside a lock_all epoch, each rank puts
 * v(R, I, k) into its right neighbour's array, and while the counter is
 * attached adds R + 1 to every rank's counter (MPI_Accumulate); sleeps
 * SLEEP_MS (rank 0) or 2 * SLEEP_MS (the others) with those in flight,
 * where the checkpoints come; MPI_Win_flush_all, a barrier, and checks its
 * own array; then gets its left neighbour's array back (MPI_Get, flushed)
 * and checks it. Before the detach each rank checks its counter: the
 * ranks' sum times the iterations it was attached. Rank 0 prints "rank 0
 * iteration I", then "PASS ranks=N iterations=I counter=C". */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "fail.h"

#define N 256

static long arr[N], got[N];

static long v(int r, int i, int k)
{
	return (long)r * 100000 + (long)i * 1000 + k;
}

static void nap(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
	int rank, size, iters, sleep_ms, right, left, first = 2, last;
	long *counter = NULL, total = 0;
	MPI_Aint mine, *addr, *caddr;
	MPI_Win win;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (argc < 3 || size < 2)
		fail(rank, 0, "usage: rma_dynamic ITERATIONS SLEEP_MS, on 2 ranks or more");
	iters = atoi(argv[1]);
	sleep_ms = atoi(argv[2]);
	last = iters - 2;
	right = (rank + 1) % size;
	left = (rank + size - 1) % size;
	addr = calloc((size_t)size, sizeof(*addr));
	caddr = calloc((size_t)size, sizeof(*caddr));
	MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &win);
	MPI_Win_attach(win, arr, sizeof(arr));
	MPI_Get_address(arr, &mine);
	MPI_Allgather(&mine, 1, MPI_AINT, addr, 1, MPI_AINT, MPI_COMM_WORLD);
	MPI_Win_lock_all(0, win);
	for (int i = 0; i < iters; i++) {
		long one = rank + 1, want;

		if (i == first) {
			counter = calloc(1, sizeof(*counter));
			MPI_Win_attach(win, counter, sizeof(*counter));
			MPI_Get_address(counter, &mine);
			MPI_Allgather(&mine, 1, MPI_AINT, caddr, 1, MPI_AINT, MPI_COMM_WORLD);
		}
		for (int k = 0; k < N; k++)
			got[k] = v(rank, i, k);
		MPI_Put(got, N, MPI_LONG, right, addr[right], N, MPI_LONG, win);
		if (counter)
			for (int t = 0; t < size; t++)
				MPI_Accumulate(&one, 1, MPI_LONG, t, caddr[t], 1, MPI_LONG, MPI_SUM, win);
		nap(rank ? 2 * sleep_ms : sleep_ms);
		MPI_Win_flush_all(win);
		MPI_Barrier(MPI_COMM_WORLD);
		MPI_Win_sync(win);
		for (int k = 0; k < N; k++)
			fail_unless(rank, i, "an element put by the left neighbour", arr[k],
				    v(left, i, k));
		MPI_Barrier(MPI_COMM_WORLD);   /* every rank checked before it is read */
		MPI_Get(got, N, MPI_LONG, left, addr[left], N, MPI_LONG, win);
		MPI_Win_flush(left, win);
		for (int k = 0; k < N; k++)
			fail_unless(rank, i, "an element got from the left neighbour", got[k],
				    v((left + size - 1) % size, i, k));
		MPI_Barrier(MPI_COMM_WORLD);   /* every get done before the next puts */
		if (counter && i == last) {
			MPI_Win_sync(win);
			want = (long)size * (size + 1) / 2 * (last - first + 1);
			fail_unless(rank, i, "the counter", *counter, want);
			total = *counter;
			/* after a restart too: detached from the window it was attached to */
			fail_unless(rank, i, "MPI_Win_detach's result", MPI_Win_detach(win, counter),
				    MPI_SUCCESS);
			free(counter);
			counter = NULL;
		}
		if (rank == 0) {
			printf("rank 0 iteration %d\n", i);
			fflush(stdout);
		}
	}
	MPI_Win_unlock_all(win);
	fail_unless(rank, iters, "MPI_Win_detach's result", MPI_Win_detach(win, arr), MPI_SUCCESS);
	MPI_Win_free(&win);
	if (rank == 0)
		printf("PASS ranks=%d iterations=%d counter=%ld\n", size, iters, total);
	free(addr);
	free(caddr);
	MPI_Finalize();
	return 0;
}

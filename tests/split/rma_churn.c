/* rma_churn.c - windows made and freed by the thousand after a restart, as
 * Global Arrays do (tests/split/test_rma.py).
 *
 *   rma_churn ITERATIONS SLEEP_MS WINDOWS
 *
 * Any number of ranks >= 2. ITERATIONS times rank 0 prints "rank 0
 * iteration I" and every rank sleeps SLEEP_MS, then passes a barrier (the
 * checkpoints come there). Then WINDOWS times, 8 at a time, every rank
 * makes a window with MPI_Win_create over 256 ints of its own, fences
 * it, puts a value of this window and this rank into its right
 * neighbour's first int and fences again; then it checks what
 * its left neighbour put into each of the 8 (1 check each) and frees
 * them. Rank 0 prints "PASS ranks=N windows=W checks=C" with C = N * W; a wrong value prints a FAIL
 * line and aborts the job, a window that cannot be made aborts it too
 * (MPI_ERRORS_ARE_FATAL). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "fail.h"

/* (a window of one int never saw the put natively under MPICH 4.0.2's
 * ch4:ucx: 256) */
#define LIVE 8

static int slot[LIVE][256];

int main(int argc, char **argv)
{
	int iters = argc > 1 ? atoi(argv[1]) : 4, ms = argc > 2 ? atoi(argv[2]) : 100;
	int windows = argc > 3 ? atoi(argv[3]) : 2100, rank, size;
	long checks = 0, all = 0;
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	int right = (rank + 1) % size, left = (rank + size - 1) % size;

	for (int it = 0; it < iters; it++) {
		if (rank == 0) {
			printf("rank 0 iteration %d\n", it);
			fflush(stdout);
		}
		nanosleep(&ts, NULL);
		MPI_Barrier(MPI_COMM_WORLD);
	}
	/* LIVE windows at a time, as a program holds several arrays */
	for (int w0 = 0; w0 < windows; w0 += LIVE) {
		MPI_Win win[LIVE];
		int n = windows - w0 < LIVE ? windows - w0 : LIVE;

		for (int k = 0; k < n; k++) {
			int w = w0 + k, v = w * 7 + rank;

			slot[k][0] = -1;
			MPI_Win_create(slot[k], sizeof(slot[k]), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD,
				       &win[k]);
			MPI_Win_fence(0, win[k]);
			MPI_Put(&v, 1, MPI_INT, right, 0, 1, MPI_INT, win[k]);
			MPI_Win_fence(0, win[k]);
		}
		for (int k = 0; k < n; k++) {
			if (slot[k][0] != (w0 + k) * 7 + left)
				fail(rank, w0 + k, "the value put by the left neighbour");
			checks++;
		}
		for (int k = 0; k < n; k++)
			MPI_Win_free(&win[k]);
	}
	MPI_Reduce(&checks, &all, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
	if (rank == 0)
		printf("PASS ranks=%d windows=%d checks=%ld\n", size, windows, all);
	MPI_Finalize();
	return 0;
}

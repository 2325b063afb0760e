/* rmaput.c - one-sided latency: rank 0 puts 8 bytes into rank 1's window
 * (MPI_Win_create over the program's memory, as the split process makes
 * every window) and flushes, in a passive-target epoch (MPI_Win_lock_all),
 * while rank 1 waits in MPI_Barrier; prints the time of one MPI_Put +
 * MPI_Win_flush in microseconds (bench/mpi/run.py, rma_put_overhead): the
 * median of batches' means (batches.h), and the whole phase's mean.
 * Built with -DFS_FLOOR, its puts and flushes cross as a split process's
 * do (fsfloor.h).
 * usage: rmaput ITERATIONS */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "batches.h"
#include "fsfloor.h"

int main(int argc, char **argv)
{
	int rank, iters = argc > 1 ? atoi(argv[1]) : 10000;
	long *base = malloc(sizeof(long)), v = 0;
	double t = 0;
	struct batches b;
	MPI_Win win;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Win_create(base, sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &win);
	*base = -1;
	MPI_Win_lock_all(0, win);
	for (int phase = 0; phase < 2; phase++) {   /* warm-up, then measured */
		int n = phase ? iters : iters / 10 + 1;

		batches_init(&b, n);
		MPI_Barrier(MPI_COMM_WORLD);
		t = MPI_Wtime();
		batches_start(&b);
		for (int i = 0; rank == 0 && i < n; i++) {
			v = i;
			MPI_Put(&v, 1, MPI_LONG, 1, 0, 1, MPI_LONG, win);
			MPI_Win_flush(1, win);
			batches_step(&b, i);
		}
		t = MPI_Wtime() - t;
		MPI_Barrier(MPI_COMM_WORLD);
		if (phase && rank == 0)
			printf("put_flush_us %.4f mean_us %.4f\n", batches_median(&b) * 1e6,
			       t / n * 1e6);
		batches_free(&b);
	}
	MPI_Win_unlock_all(win);
	if (rank == 1 && *base != iters - 1) {
		fprintf(stderr, "rmaput: rank 1's window holds %ld, expected %d\n", *base, iters - 1);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	MPI_Win_free(&win);
	free(base);
	MPI_Finalize();
	return 0;
}

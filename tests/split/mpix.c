/* mpix.c - MPIX_Checkpoint in every state (tests/split, include/stasis_mpix.h).
 *
 *   mpix ITERATIONS SLEEP_MS
 *
 * Each iteration adds to a running sum, calls MPIX_Checkpoint and prints
 * "rank R iteration I state S sum X" (S: 0 IGNORE, 1 CHECKPOINT,
 * 2 RESTART, 3 ERROR), then sleeps. Every rank checks that all ranks saw
 * the same state (an Allreduce of min and max). At the end rank 0 prints
 * "PASS ranks=N iterations=I sum=X". */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "stasis_mpix.h"

int main(int argc, char **argv)
{
	int rank, size, iters = argc > 1 ? atoi(argv[1]) : 5;
	long ms = argc > 2 ? atol(argv[2]) : 100;
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };
	long sum = 0;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	for (int it = 0; it < iters; it++) {
		MPIX_CR_state_t state = MPIX_CR_STATE_ERROR;
		int s, lo, hi, ret;

		sum += (long)(rank + 1) * it;
		ret = MPIX_Checkpoint(&state);
		s = (int)state;
		MPI_Allreduce(&s, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
		MPI_Allreduce(&s, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
		if (lo != hi || ret != MPI_SUCCESS) {
			printf("FAIL rank %d iteration %d: states %d..%d, return %d\n", rank, it, lo, hi, ret);
			fflush(stdout);
			MPI_Abort(MPI_COMM_WORLD, 3);
		}
		printf("rank %d iteration %d state %d sum %ld\n", rank, it, s, sum);
		fflush(stdout);
		nanosleep(&ts, NULL);
	}
	{
		long total = 0;

		MPI_Reduce(&sum, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
		if (rank == 0)
			printf("PASS ranks=%d iterations=%d sum=%ld\n", size, iters, total);
	}
	MPI_Finalize();
	return 0;
}

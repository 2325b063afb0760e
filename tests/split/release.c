/* release.c - the state the release rule of docs/protocol.md is for
 * (tests/split/test_release.py). 3 ranks or more.
 *
 *   release ITERATIONS SLEEP_MS
 *
 * SUB is ranks 1 and 2 (MPI_Comm_split). Each iteration I:
 *   rank 0   prints "rank 0 iteration I", sleeps SLEEP_MS, starts
 *            MPI_Ibarrier(WORLD), sends rank 1 a value of I, waits;
 *   rank 1   receives it from rank 0, MPI_Barrier(SUB), MPI_Ibarrier(WORLD),
 *            waits;
 *   rank 2   MPI_Barrier(SUB), MPI_Ibarrier(WORLD), waits;
 *   others   MPI_Ibarrier(WORLD), wait.
 * A checkpoint in rank 0's sleep finds rank 2 inside Barrier(SUB) and rank 1,
 * behind on SUB, waiting for the message rank 0 sends only after a WORLD
 * collective that the targets forbid it to start: without a release the
 * checkpoint cannot complete. Rank 1 checks every value it receives, and at
 * the end the ranks check an MPI_Allreduce of their iteration counts; rank 0
 * prints "PASS ranks=N iterations=I", any wrong value a FAIL line. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "fail.h"

int main(int argc, char **argv)
{
	int rank, size, iters = argc > 1 ? atoi(argv[1]) : 10, ms = argc > 2 ? atoi(argv[2]) : 200;
	long v, done = 0, all = 0;
	MPI_Comm sub;
	MPI_Request r;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (size < 3)
		fail(rank, -1, "needs 3 ranks or more");
	MPI_Comm_split(MPI_COMM_WORLD, rank == 1 || rank == 2 ? 0 : MPI_UNDEFINED, rank, &sub);
	for (int it = 0; it < iters; it++) {
		if (rank == 0) {
			struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

			printf("rank 0 iteration %d\n", it);
			fflush(stdout);
			nanosleep(&ts, NULL);
			MPI_Ibarrier(MPI_COMM_WORLD, &r);
			v = 1000L * it + 7;
			MPI_Send(&v, 1, MPI_LONG, 1, it, MPI_COMM_WORLD);
		} else {
			if (rank == 1) {
				MPI_Recv(&v, 1, MPI_LONG, 0, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				if (v != 1000L * it + 7)
					fail(rank, it, "the value from rank 0");
			}
			if (rank == 1 || rank == 2)
				MPI_Barrier(sub);
			MPI_Ibarrier(MPI_COMM_WORLD, &r);
		}
		MPI_Wait(&r, MPI_STATUS_IGNORE);
		done++;
	}
	MPI_Allreduce(&done, &all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
	if (all != (long)size * iters)
		fail(rank, iters, "the iteration counts");
	if (rank == 0)
		printf("PASS ranks=%d iterations=%d\n", size, iters);
	if (sub != MPI_COMM_NULL)
		MPI_Comm_free(&sub);
	MPI_Finalize();
	return 0;
}

/* blocking_coll.c - a checkpoint that must let a rank past a collective
 * with no non-blocking form (docs/protocol.md, "Blocking collectives";
 * tests/split/test_blocking.py). 2 ranks or more.
 *
 *   blocking_coll ITERATIONS SLEEP_MS [inside]
 *
 * D is a duplicate of MPI_COMM_WORLD. Each iteration I:
 *   rank 0   starts MPI_Ibarrier(D), prints "rank 0 iteration I", sleeps
 *            SLEEP_MS, then MPI_Comm_dup(WORLD), an MPI_Allreduce on the
 *            duplicate, MPI_Comm_free, and waits for the barrier;
 *   others   sleep SLEEP_MS, then the same MPI_Comm_dup, MPI_Allreduce and
 *            MPI_Comm_free, and only then MPI_Ibarrier(D) and its wait.
 * A checkpoint in the sleeps finds the others behind rank 0 on D, with an
 * MPI_Comm_dup to pass first: inside it they would wait for rank 0, which
 * is stopped. With "inside", the others do not sleep first: they come to
 * the MPI_Comm_dup at once and wait in it for rank 0, so a checkpoint in
 * rank 0's sleep finds them there (before the entry barrier, inside the
 * real call, where no thread can stop: the checkpoint failed after 10 s).
 * Each rank checks the Allreduce; at the end rank 0 prints
 * "PASS ranks=N iterations=I", anything wrong a FAIL line. */
#include <string.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "fail.h"

static void with_new_comm(int rank, int size, int it)
{
	MPI_Comm c;
	long v = rank + it, sum = 0;

	MPI_Comm_dup(MPI_COMM_WORLD, &c);
	MPI_Allreduce(&v, &sum, 1, MPI_LONG, MPI_SUM, c);
	if (sum != (long)size * (size - 1) / 2 + (long)size * it)
		fail(rank, it, "the sum on the new communicator");
	MPI_Comm_free(&c);
}

int main(int argc, char **argv)
{
	int rank, size, iters = argc > 1 ? atoi(argv[1]) : 10, ms = argc > 2 ? atoi(argv[2]) : 300;
	int inside = argc > 3 && !strcmp(argv[3], "inside");
	MPI_Comm d;
	MPI_Request r;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	MPI_Comm_dup(MPI_COMM_WORLD, &d);
	for (int it = 0; it < iters; it++) {
		struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

		if (rank == 0) {
			MPI_Ibarrier(d, &r);
			printf("rank 0 iteration %d\n", it);
			fflush(stdout);
			nanosleep(&ts, NULL);
			with_new_comm(rank, size, it);
		} else {
			if (!inside)
				nanosleep(&ts, NULL);
			with_new_comm(rank, size, it);
			MPI_Ibarrier(d, &r);
		}
		MPI_Wait(&r, MPI_STATUS_IGNORE);
	}
	if (rank == 0)
		printf("PASS ranks=%d iterations=%d\n", size, iters);
	MPI_Comm_free(&d);
	MPI_Finalize();
	return 0;
}

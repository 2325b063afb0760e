/* comm_held.c - a communicator held for the first half of the run, then
 * freed (tests/split/test_coll.py).
 *
 *   comm_held ITERATIONS SLEEP_MS
 *
 * Dups MPI_COMM_WORLD; then each iteration prints "rank R iteration I",
 * checks an MPI_Allreduce on the dup (before the half) or on
 * MPI_COMM_WORLD (after), and sleeps SLEEP_MS. At the half every rank
 * frees the dup and rank 0 prints "freed". At the end rank 0 prints
 * "PASS ranks=N iterations=I checks=K". With the lower half's duplicate
 * of the dup made to fail (STASIS_FAULT=split.coll.dup), a checkpoint
 * before the half is refused and one after it is taken. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "fail.h"

int main(int argc, char **argv)
{
	int iters = argc > 1 ? atoi(argv[1]) : 8, rank, size;
	long ms = argc > 2 ? atol(argv[2]) : 100, checks = 0, total = 0;
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };
	MPI_Comm held;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	MPI_Comm_dup(MPI_COMM_WORLD, &held);
	for (int it = 0; it < iters; it++) {
		int one = 1, n = 0;

		if (it == iters / 2) {
			MPI_Comm_free(&held);
			if (rank == 0) {
				printf("freed\n");
				fflush(stdout);
			}
		}
		printf("rank %d iteration %d\n", rank, it);
		fflush(stdout);
		MPI_Allreduce(&one, &n, 1, MPI_INT, MPI_SUM, it < iters / 2 ? held : MPI_COMM_WORLD);
		fail_unless(rank, it, "the sum", n, size);
		checks++;
		nanosleep(&ts, NULL);
	}
	MPI_Reduce(&checks, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
	if (rank == 0) {
		printf("%s ranks=%d iterations=%d checks=%ld\n",
		       total == (long)size * iters ? "PASS" : "FAIL", size, iters, total);
		fflush(stdout);
	}
	MPI_Finalize();
	return 0;
}

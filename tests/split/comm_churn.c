/* comm_churn.c - communicators made and freed in every iteration, with the
 * ranks apart between the two (tests/split).
 *
 *   comm_churn ITERATIONS SLEEP_MS [PAIRS [FILE]]
 *
 * Each iteration prints "rank R iteration I", dups MPI_COMM_WORLD, checks an
 * MPI_Allreduce on the dup, and frees it; even ranks sleep SLEEP_MS after
 * the free, odd ranks before it. A checkpoint in the sleep finds the even
 * ranks done with the dup and the odd ones still holding it: the counts of
 * collectives must still be agreed on it (docs/split.md, "Collectives at a
 * checkpoint": a freed communicator is retired, not forgotten) and a
 * restart must make it again on every member. Every 8th iteration the dup
 * is split by parity instead and both are freed in the same way. Before
 * the first iteration and after the last, PAIRS dups of MPI_COMM_WORLD
 * are made and freed at once, each checked with an MPI_Allreduce (more
 * than MPICH's 2048 context ids: under Stasis the lower half's
 * duplicates of the freed ones must go as well); with PAIRS, HELD dups
 * are then made, checked and held together. At the end rank 0 prints
 * "PASS ranks=N iterations=I checks=K", then every rank frees the HELD
 * dups one after the other just before MPI_Finalize. With FILE, each pair
 * also opens FILE on MPI_COMM_WORLD and closes it (under Stasis the file
 * has a communicator of its own, docs/split.md). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define HELD 16

static MPI_Comm kept[HELD];
static const char *path;

/* pairs dup/free pairs, then held dups kept: the checks they made, or
 * aborts the job */
static long churn(int pairs, int rank, int size, int held)
{
	for (int p = 0; p < pairs + held; p++) {
		MPI_Comm dup;
		int one = 1, n = 0, ret = MPI_Comm_dup(MPI_COMM_WORLD, &dup);

		if (ret != MPI_SUCCESS) {
			printf("FAIL rank %d: MPI_Comm_dup failed at pair %d\n", rank, p);
			fflush(stdout);
			MPI_Abort(MPI_COMM_WORLD, 3);
		}
		MPI_Allreduce(&one, &n, 1, MPI_INT, MPI_SUM, dup);
		if (n != size) {
			printf("FAIL rank %d: pair %d: sum %d, want %d\n", rank, p, n, size);
			fflush(stdout);
			MPI_Abort(MPI_COMM_WORLD, 3);
		}
		if (path && p < pairs) {
			MPI_File f;

			if (MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR,
					  MPI_INFO_NULL, &f) != MPI_SUCCESS) {
				printf("FAIL rank %d: MPI_File_open failed at pair %d\n", rank, p);
				fflush(stdout);
				MPI_Abort(MPI_COMM_WORLD, 3);
			}
			MPI_File_close(&f);
		}
		if (p < pairs)
			MPI_Comm_free(&dup);
		else
			kept[p - pairs] = dup;
	}
	return pairs + held;
}

int main(int argc, char **argv)
{
	int iters = argc > 1 ? atoi(argv[1]) : 20, rank, size;
	long ms = argc > 2 ? atol(argv[2]) : 100, checks = 0, total = 0;
	int pairs = argc > 3 ? atoi(argv[3]) : 0;

	path = argc > 4 ? argv[4] : NULL;
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	checks += churn(pairs, rank, size, 0);
	for (int it = 0; it < iters; it++) {
		MPI_Comm dup, half = MPI_COMM_NULL;
		long v = rank + it, sum = 0, want = (long)size * (size - 1) / 2 + (long)size * it;

		printf("rank %d iteration %d\n", rank, it);
		fflush(stdout);
		MPI_Comm_dup(MPI_COMM_WORLD, &dup);
		MPI_Allreduce(&v, &sum, 1, MPI_LONG, MPI_SUM, dup);
		checks++;
		if (sum != want) {
			printf("FAIL rank %d: iteration %d: sum %ld, want %ld\n", rank, it, sum, want);
			fflush(stdout);
			MPI_Abort(MPI_COMM_WORLD, 3);
		}
		if (it % 8 == 7)
			MPI_Comm_split(dup, rank % 2, rank, &half);
		if (rank % 2)
			nanosleep(&ts, NULL);
		if (half != MPI_COMM_NULL)
			MPI_Comm_free(&half);
		MPI_Comm_free(&dup);
		if (rank % 2 == 0)
			nanosleep(&ts, NULL);
	}
	checks += churn(pairs, rank, size, pairs ? HELD : 0);
	MPI_Reduce(&checks, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
	if (rank == 0) {
		printf("%s ranks=%d iterations=%d checks=%ld\n",
		       total == (long)size * (iters + 2L * pairs + (pairs ? HELD : 0)) ? "PASS" : "FAIL", size, iters,
		       total);
		fflush(stdout);
	}
	for (int k = 0; pairs && k < HELD; k++)
		MPI_Comm_free(&kept[k]);
	MPI_Finalize();
	return 0;
}

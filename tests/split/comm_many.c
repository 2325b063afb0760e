/* comm_many.c - as many communicators as the MPI gives the program
 * (tests/split).
 *
 *   comm_many COUNT SLEEP_MS
 *
 * COUNT dups of MPI_COMM_WORLD are made and held, each checked with an
 * MPI_Allreduce; "rank R made COUNT", then SLEEP_MS in 10 ms naps (the
 * checkpoint, kill and restart come there), then each dup is checked
 * again, with a value of its own, and freed, and rank 0 prints
 * "PASS ranks=N comms=COUNT checks=K". Under Stasis each communicator the
 * program holds used to cost the lower half a second one, so the program
 * ran out at about half the native count (docs/split.md, "Collectives at
 * a checkpoint"). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static void fail(int rank, const char *what, int i)
{
	printf("FAIL rank %d: %s at communicator %d\n", rank, what, i);
	fflush(stdout);
	MPI_Abort(MPI_COMM_WORLD, 3);
}

/* an MPI_Allreduce on each communicator, of a value of its own: the checks */
static long check(MPI_Comm *c, int n, int rank, int size, int salt)
{
	for (int i = 0; i < n; i++) {
		int v = i * salt + rank, sum = 0;

		if (MPI_Allreduce(&v, &sum, 1, MPI_INT, MPI_SUM, c[i]) != MPI_SUCCESS ||
		    sum != size * i * salt + size * (size - 1) / 2)
			fail(rank, "wrong sum", i);
	}
	return n;
}

int main(int argc, char **argv)
{
	int rank = 0, size = 1, n = argc > 1 ? atoi(argv[1]) : 0;
	int sleep_ms = argc > 2 ? atoi(argv[2]) : 0, cap = n > 0 ? n : 1;
	struct timespec nap = { 0, 10 * 1000 * 1000 };
	MPI_Comm *c = calloc((size_t)cap, sizeof(*c));
	long checks = 0, all = 0;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (!c)
		fail(rank, "no memory", 0);
	for (int i = 0; i < n; i++)
		if (MPI_Comm_dup(MPI_COMM_WORLD, &c[i]) != MPI_SUCCESS)
			fail(rank, "MPI_Comm_dup failed", i);
	checks += check(c, n, rank, size, 1);
	printf("rank %d made %d\n", rank, n);
	fflush(stdout);
	for (int t = 0; t < sleep_ms / 10; t++)
		nanosleep(&nap, NULL);
	checks += check(c, n, rank, size, 3);
	for (int i = 0; i < n; i++)
		MPI_Comm_free(&c[i]);
	MPI_Reduce(&checks, &all, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
	if (rank == 0)
		printf("PASS ranks=%d comms=%d checks=%ld\n", size, n, all);
	MPI_Finalize();
	free(c);
	return 0;
}

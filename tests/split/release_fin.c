/* release_fin.c - a rank released by a checkpoint's release runs into
 * MPI_Finalize while the others are still stopped
 * (tests/split/test_release.py). 3 ranks.
 *
 *   release_fin SLEEP_MS
 *
 * SUB is ranks 1 and 2. Rank 0 prints "rank 0 ready", sleeps SLEEP_MS,
 * sends rank 1 a value and finalizes: no collective on its way. Rank 1
 * receives it, then MPI_Barrier(SUB); rank 2 is in MPI_Barrier(SUB) from the
 * start. A checkpoint in rank 0's sleep finds rank 1 behind on SUB and
 * stuck in its receive; the release lets rank 0 run, and it reaches
 * MPI_Finalize while ranks 1 and 2 are still stopped: it must stop there,
 * not enter the real MPI_Finalize. After MPI_Finalize each rank prints
 * "rank R done" (rank 1 with the value it received). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv)
{
	int rank, size, ms = argc > 1 ? atoi(argv[1]) : 1000;
	long v = 0;
	MPI_Comm sub;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	MPI_Comm_split(MPI_COMM_WORLD, rank == 1 || rank == 2 ? 0 : MPI_UNDEFINED, rank, &sub);
	MPI_Barrier(MPI_COMM_WORLD);
	if (rank == 0) {
		struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

		printf("rank 0 ready\n");
		fflush(stdout);
		nanosleep(&ts, NULL);
		v = 4242;
		MPI_Send(&v, 1, MPI_LONG, 1, 5, MPI_COMM_WORLD);
	} else if (rank <= 2) {
		if (rank == 1)
			MPI_Recv(&v, 1, MPI_LONG, 0, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		MPI_Barrier(sub);
		MPI_Comm_free(&sub);
	}
	MPI_Finalize();
	printf("rank %d done %ld\n", rank, v);
	return 0;
}

/* spares.c - what a rank can learn of MPI_COMM_WORLD (tests/split,
 * test_spares.py).
 *
 *   spares ITERATIONS SLEEP_MS STATUS
 *
 * Each rank prints what MPI_COMM_WORLD, a communicator split from it,
 * MPI_COMM_SELF's group, a message round the ring and the launcher's
 * world-size variable tell it; between,
 * ITERATIONS reductions over MPI_COMM_WORLD, one every SLEEP_MS (rank 0
 * prints each), each checked. A run above lower halves with spare ranks
 * must print what a native run prints, and end with STATUS after
 * MPI_Finalize.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv)
{
	int rank, size, left, right, got = -1, sum = 0, half, hrank, self = -1, cmp = -1, err = 0;
	int iters = argc > 1 ? atoi(argv[1]) : 0, ms = argc > 2 ? atoi(argv[2]) : 0;
	MPI_Comm dup, split;
	MPI_Group wg, sg;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	right = (rank + 1) % size;
	left = (rank + size - 1) % size;
	MPI_Sendrecv(&rank, 1, MPI_INT, right, 7, &got, 1, MPI_INT, left, 7, MPI_COMM_WORLD,
		     MPI_STATUS_IGNORE);
	MPI_Comm_dup(MPI_COMM_WORLD, &dup);
	MPI_Comm_compare(MPI_COMM_WORLD, dup, &cmp);
	MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &split);
	MPI_Comm_size(split, &half);
	MPI_Comm_rank(split, &hrank);
	MPI_Comm_group(MPI_COMM_WORLD, &wg);
	MPI_Comm_group(MPI_COMM_SELF, &sg);
	MPI_Group_translate_ranks(sg, 1, (int[]){ 0 }, wg, &self);
	for (int it = 0; it < iters; it++) {
		int v = rank + it, all = 0;
		struct timespec nap = { ms / 1000, (ms % 1000) * 1000000L };

		MPI_Allreduce(&v, &all, 1, MPI_INT, MPI_SUM, dup);
		if (all != size * (size - 1) / 2 + size * it)
			err++;
		if (rank == 0)
			printf("rank 0 iteration %d\n", it), fflush(stdout);
		nanosleep(&nap, NULL);
	}
	MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	printf("rank %d of %d: from %d, sum %d, congruent %d, half %d of %d, self %d, errors %d, "
	       "launcher's size %s\n", rank, size, got, sum, cmp == MPI_CONGRUENT, hrank, half, self,
	       err, getenv("OMPI_COMM_WORLD_SIZE") ? getenv("OMPI_COMM_WORLD_SIZE") :
	       getenv("PMI_SIZE") ? getenv("PMI_SIZE") : "-");
	MPI_Group_free(&wg);
	MPI_Group_free(&sg);
	MPI_Comm_free(&split);
	MPI_Comm_free(&dup);
	MPI_Finalize();
	return argc > 3 ? atoi(argv[3]) : 0;
}

/* unsupported.c - calls a function the split process does not support
 * yet (MPI_Win_set_name): under Stasis it must name the function and end the
 * job, never run on silently; natively it prints "created". */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
	int rank;
	long *base;
	MPI_Win win;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Win_allocate(sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
	MPI_Win_set_name(win, "w");
	if (rank == 0)
		printf("created\n");
	MPI_Win_free(&win);
	MPI_Finalize();
	return 0;
}

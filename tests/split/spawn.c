/* spawn.c - calls MPI_Comm_get_parent (the launcher's ranks have none)
 * and then MPI_Comm_spawn: under Stasis the spawn is refused at the call,
 * in one line that says why, and the job ends; natively rank 0 prints
 * "no parent" and then "spawned" (tests/split). */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
	MPI_Comm parent, child;
	int rank, errs[1];

	MPI_Init(&argc, &argv);
	MPI_Comm_get_parent(&parent);
	if (parent != MPI_COMM_NULL) {   /* the spawned child, natively */
		MPI_Comm_disconnect(&parent);
		MPI_Finalize();
		return 0;
	}
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	if (rank == 0)
		printf("no parent\n");
	fflush(stdout);
	MPI_Comm_spawn(argv[0], MPI_ARGV_NULL, 1, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &child, errs);
	if (rank == 0)
		printf("spawned\n");
	MPI_Comm_disconnect(&child);
	MPI_Finalize();
	return 0;
}

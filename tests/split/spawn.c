/* spawn.c - calls MPI_Comm_get_parent (the launcher's ranks have none)
 * and then MPI_Comm_spawn: under Stasis the spawn is refused at the call,
 * in one line that says why, and the job ends; natively rank 0 prints
 * "no parent" and then "spawned" (tests/split).
 *
 *   spawn [PROGRAM ARG...]
 *
 * With PROGRAM (natively, on one rank), it spawns one PROGRAM ARG...
 * "sends" instead, e.g. a lower half running this program: a spawned
 * process whose last argument is "sends" sends 42 to its parent over the
 * communicator MPI_Comm_get_parent gives, frees it and prints "child
 * sent"; the parent prints "parent got 42". */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

static int child(MPI_Comm parent, int argc, char **argv)
{
	int v = 42;

	if (argc < 2 || strcmp(argv[argc - 1], "sends")) {
		MPI_Comm_disconnect(&parent);
		return MPI_Finalize();
	}
	MPI_Send(&v, 1, MPI_INT, 0, 7, parent);
	printf("child sent\n");
	fflush(stdout);
	MPI_Comm_free(&parent);
	return MPI_Finalize();
}

int main(int argc, char **argv)
{
	MPI_Comm parent, kid;
	int rank, errs[1], v = 0;
	char *args[16] = { NULL };

	MPI_Init(&argc, &argv);
	MPI_Comm_get_parent(&parent);
	if (parent != MPI_COMM_NULL)   /* the spawned child */
		return child(parent, argc, argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	if (argc > 1) {   /* a parent of PROGRAM ARG... "sends" */
		for (int i = 2; i < argc && i < 16; i++)
			args[i - 2] = argv[i];
		args[argc - 2 < 14 ? argc - 2 : 14] = "sends";
		MPI_Comm_spawn(argv[1], args, 1, MPI_INFO_NULL, 0, MPI_COMM_SELF, &kid, errs);
		MPI_Recv(&v, 1, MPI_INT, 0, 7, kid, MPI_STATUS_IGNORE);
		printf("parent got %d\n", v);
		fflush(stdout);
		MPI_Comm_free(&kid);
		MPI_Finalize();
		return 0;
	}
	if (rank == 0)
		printf("no parent\n");
	fflush(stdout);
	MPI_Comm_spawn(argv[0], MPI_ARGV_NULL, 1, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &kid, errs);
	if (rank == 0)
		printf("spawned\n");
	MPI_Comm_disconnect(&kid);
	MPI_Finalize();
	return 0;
}

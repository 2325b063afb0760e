/* waitall_err.c - an error that MPI_Waitall saw before a checkpoint
 * stopped it is still returned after the restart
 * (tests/split/test_errh.py). 2 ranks.
 *
 * Rank 1 posts a receive that rank 0 answers only once the file "go"
 * exists in the working directory (tag 7) and a receive of 2 ints for rank
 * 0's 4 (tag 8: truncated, it fails at once), prints "in waitall" and
 * completes both with one MPI_Waitall. The test checkpoints the job
 * there, kills it, restarts it and only then creates "go". MPI_Waitall
 * must return MPI_ERR_IN_STATUS with MPI_SUCCESS in the first status and
 * MPI_ERR_TRUNCATE in the second; rank 0 then prints "PASS", anything
 * else a FAIL line. */
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>

#include "fail.h"

int main(int argc, char **argv)
{
	int rank, four[4] = { 1, 2, 3, 4 }, two[2], one = 0, cls = -1, ret;
	MPI_Request r[2];
	MPI_Status st[2];

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	if (rank == 0) {
		MPI_Send(four, 4, MPI_INT, 1, 8, MPI_COMM_WORLD);
		while (access("go", F_OK) != 0)
			usleep(20000);
		MPI_Send(&four[3], 1, MPI_INT, 1, 7, MPI_COMM_WORLD);
	} else if (rank == 1) {
		MPI_Irecv(&one, 1, MPI_INT, 0, 7, MPI_COMM_WORLD, &r[0]);
		MPI_Irecv(two, 2, MPI_INT, 0, 8, MPI_COMM_WORLD, &r[1]);
		printf("in waitall\n");
		fflush(stdout);
		st[0].MPI_ERROR = st[1].MPI_ERROR = -1;
		ret = MPI_Waitall(2, r, st);
		MPI_Error_class(st[1].MPI_ERROR, &cls);
		if (ret != MPI_ERR_IN_STATUS)
			fail(rank, 0, "MPI_Waitall did not return MPI_ERR_IN_STATUS");
		if (cls != MPI_ERR_TRUNCATE || st[0].MPI_ERROR != MPI_SUCCESS || one != 4)
			fail(rank, 0, "MPI_Waitall's statuses or message");
	}
	MPI_Barrier(MPI_COMM_WORLD);
	if (rank == 0)
		printf("PASS\n");
	MPI_Finalize();
	return 0;
}

/* quit.c - the program ends a rank itself, without MPI_Finalize
 * (docs/coordinator.md, "Events and recovery policies").
 *
 *   quit ITERATIONS SLEEP_MS AT exit|abort|fork
 *
 * Each iteration prints "rank R iteration I", joins a barrier and sleeps
 * SLEEP_MS; at iteration AT rank 1 calls exit(3), or MPI_Abort with
 * error code 3, or (fork) forks a child that calls exit(0) and goes on:
 * the child's end is not the rank's. Otherwise rank 0 prints "PASS" after
 * MPI_Finalize. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	int rank, iters = argc > 1 ? atoi(argv[1]) : 10, at = argc > 3 ? atoi(argv[3]) : 3;
	long sleep_ms = argc > 2 ? atol(argv[2]) : 100;
	struct timespec ts = { sleep_ms / 1000, (sleep_ms % 1000) * 1000000 };
	int do_abort = argc > 4 && !strcmp(argv[4], "abort");
	int do_fork = argc > 4 && !strcmp(argv[4], "fork");
	pid_t child;
	int status;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	for (int it = 0; it < iters; it++) {
		printf("rank %d iteration %d\n", rank, it);
		fflush(stdout);
		if (rank == 1 && it == at && do_fork) {
			child = fork();
			if (child == 0)
				exit(0);   /* runs the program's exit handlers */
			if (child < 0 || waitpid(child, &status, 0) != child || status != 0) {
				printf("rank 1: FAIL the forked child ended with status %#x\n", status);
				exit(1);
			}
		} else if (rank == 1 && it == at) {
			if (do_abort)
				MPI_Abort(MPI_COMM_WORLD, 3);
			exit(3);
		}
		MPI_Barrier(MPI_COMM_WORLD);
		nanosleep(&ts, NULL);
	}
	MPI_Finalize();
	if (rank == 0)
		printf("PASS\n");
	return 0;
}

/* child.c - a rank whose program has a child process (tests/split,
 * test_child.py).
 *
 *   child ITERATIONS SLEEP_MS
 *
 * Rank 1 forks a child that shares nothing with it (no pipe) and waits
 * for SIGHUP, then exits with status 7; every rank passes ITERATIONS barriers, one every
 * SLEEP_MS (rank 0 prints each); at the end rank 1 sends it SIGHUP, reaps
 * the child and prints its status. A checkpoint while the child lives
 * must be refused (the split process does not save process trees), and
 * the job must run on to the same end.
 */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void bye(int sig)
{
	(void)sig;
	_exit(7);
}

int main(int argc, char **argv)
{
	int rank, status = 0;
	int iters = argc > 1 ? atoi(argv[1]) : 0, ms = argc > 2 ? atoi(argv[2]) : 0;
	pid_t pid = -1;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	if (rank == 1) {
		sigset_t hup, old;

		/* SIGHUP blocked across the fork: the child takes it only once its
		 * handler is in place */
		sigemptyset(&hup);
		sigaddset(&hup, SIGHUP);
		sigprocmask(SIG_BLOCK, &hup, &old);
		if ((pid = fork()) < 0)
			return perror("child: fork"), 1;
		if (pid == 0) {
			signal(SIGHUP, bye);
			sigprocmask(SIG_SETMASK, &old, NULL);
			for (;;)
				pause();
		}
		sigprocmask(SIG_SETMASK, &old, NULL);
		printf("rank 1 child pid %d\n", (int)pid);
		fflush(stdout);
	}
	for (int it = 0; it < iters; it++) {
		struct timespec nap = { ms / 1000, (ms % 1000) * 1000000L };

		MPI_Barrier(MPI_COMM_WORLD);
		if (rank == 0)
			printf("rank 0 iteration %d\n", it), fflush(stdout);
		nanosleep(&nap, NULL);
	}
	if (rank == 1) {
		kill(pid, SIGHUP);
		if (waitpid(pid, &status, 0) != pid)
			return perror("child: waitpid"), 1;
		printf("rank 1 child status %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
		fflush(stdout);
	}
	MPI_Finalize();
	return 0;
}

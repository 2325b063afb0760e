/* startup.c - a checkpoint requested while the program is still starting
 * waits for its MPI_Init (docs/split.md, "The lower half"): before that
 * the upper half may hold what no restart gives back.
 *
 *   startup ITERATIONS SLEEP_MS
 *
 * A constructor opens /proc/self/maps, prints "starting" and sleeps 2 s
 * before reading it: a rank stopped there and restarted would find the
 * descriptor gone. Then each iteration sleeps SLEEP_MS and rank 0 prints
 * "rank 0 iteration I"; at the end rank 0 prints "PASS ranks=N
 * iterations=I". A failed check prints "FAIL ..." and exits with 1. */
#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int held = -1;

__attribute__((constructor)) static void starting(void)
{
	char c;

	held = open("/proc/self/maps", O_RDONLY);
	printf("starting\n");
	fflush(stdout);
	sleep(2);
	if (held < 0 || read(held, &c, 1) != 1) {
		printf("FAIL the descriptor opened before the sleep cannot be read\n");
		fflush(stdout);
		_exit(1);
	}
	close(held);
}

int main(int argc, char **argv)
{
	int rank, size, iters = argc > 1 ? atoi(argv[1]) : 10;
	long ms = argc > 2 ? atol(argv[2]) : 100;
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	for (int it = 0; it < iters; it++) {
		nanosleep(&ts, NULL);
		if (rank == 0) {
			printf("rank 0 iteration %d\n", it);
			fflush(stdout);
		}
	}
	MPI_Barrier(MPI_COMM_WORLD);
	if (rank == 0)
		printf("PASS ranks=%d iterations=%d\n", size, iters);
	MPI_Finalize();
	return 0;
}

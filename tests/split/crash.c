/* crash.c - the program's own crash, reported as natively (docs/split.md,
 * "Signals"): Open MPI's SIGSEGV handler, lower-half code, runs on the
 * lower half's TLS although the fault arrives on the program's thread.
 *
 *   crash ITERATIONS SLEEP_MS AT
 *
 * Each iteration prints "rank R iteration I" and sleeps SLEEP_MS; at
 * iteration AT rank 0 writes to address 8. Natively Open MPI's handler
 * then prints "Signal: Segmentation fault (11)" and "Failing at address:
 * 0x8" and the rank dies of SIGSEGV; a handler running on the upper
 * half's TLS crashed in libc instead (strsignal's locale), silently. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv)
{
	int rank, iters = argc > 1 ? atoi(argv[1]) : 10, at = argc > 3 ? atoi(argv[3]) : 5;
	long sleep_ms = argc > 2 ? atol(argv[2]) : 100;
	struct timespec ts = { sleep_ms / 1000, (sleep_ms % 1000) * 1000000 };

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	for (int it = 0; it < iters; it++) {
		printf("rank %d iteration %d\n", rank, it);
		fflush(stdout);
		if (rank == 0 && it == at)
			*(volatile int *)(argc > 4 ? (long)atoi(argv[4]) : 8L) = 1;
		nanosleep(&ts, NULL);
	}
	MPI_Barrier(MPI_COMM_WORLD);
	if (rank == 0)
		printf("PASS (no crash)\n");
	MPI_Finalize();
	return 0;
}

/* blocking.c - ranks that wait in blocking calls across a checkpoint
 * (tests/split/test_blocking.py).
 *
 *   blocking ITERATIONS SLEEP_MS
 *
 * Each iteration rank 0 prints "rank 0 iteration I" and sleeps SLEEP_MS while
 * every other rank already waits for it: odd ranks in MPI_Recv, even ones in
 * MPI_Sendrecv (the send half to rank 0 completes at once, the receive
 * waits). A checkpoint taken in the sleep so finds them inside the call.
 * Then rank 0 sends each rank 64 KiB (over the eager limits) and 8 bytes,
 * receives every Sendrecv's message and an MPI_Ssend acknowledgement of
 * each rank. Every payload depends on (rank, iteration, index) and is
 * checked, with the status; rank 0 prints "PASS ranks=N iterations=I" at
 * the end, any wrong value a FAIL line and the job aborts. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "fail.h"

#define BIG (64 * 1024 / 8)

static uint64_t word(int rank, int it, int i)
{
	return ((uint64_t)rank << 48) ^ ((uint64_t)it << 24) ^ (uint64_t)i;
}

int main(int argc, char **argv)
{
	int rank, size, iters = argc > 1 ? atoi(argv[1]) : 10, ms = argc > 2 ? atoi(argv[2]) : 200;
	static uint64_t big[BIG];
	uint64_t small, back;
	MPI_Status st;
	int count;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	for (int it = 0; it < iters; it++) {
		if (rank == 0) {
			struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

			printf("rank 0 iteration %d\n", it);
			fflush(stdout);
			nanosleep(&ts, NULL);
			for (int r = 1; r < size; r++) {
				for (int i = 0; i < BIG; i++)
					big[i] = word(r, it, i);
				small = word(r, it, -1);
				if (r % 2)
					MPI_Send(big, BIG, MPI_UINT64_T, r, 1, MPI_COMM_WORLD);
				else
					MPI_Send(&small, 1, MPI_UINT64_T, r, 2, MPI_COMM_WORLD);
			}
			for (int r = 2; r < size; r += 2) {
				MPI_Recv(&back, 1, MPI_UINT64_T, r, 3, MPI_COMM_WORLD, &st);
				if (back != word(r, it, -2) || st.MPI_SOURCE != r || st.MPI_TAG != 3)
					fail(rank, it, "Sendrecv's message to rank 0");
			}
			for (int r = 1; r < size; r++) {
				MPI_Recv(&back, 1, MPI_UINT64_T, MPI_ANY_SOURCE, 4, MPI_COMM_WORLD, &st);
				if (back != word(st.MPI_SOURCE, it, -3))
					fail(rank, it, "acknowledgement");
			}
		} else {
			if (rank % 2) {
				MPI_Recv(big, BIG, MPI_UINT64_T, 0, 1, MPI_COMM_WORLD, &st);
				MPI_Get_count(&st, MPI_UINT64_T, &count);
				if (count != BIG || st.MPI_SOURCE != 0 || st.MPI_TAG != 1)
					fail(rank, it, "MPI_Recv's status");
				for (int i = 0; i < BIG; i++)
					if (big[i] != word(rank, it, i))
						fail(rank, it, "MPI_Recv's data");
			} else {
				uint64_t out = word(rank, it, -2);

				MPI_Sendrecv(&out, 1, MPI_UINT64_T, 0, 3, &small, 1, MPI_UINT64_T, 0, 2,
					     MPI_COMM_WORLD, &st);
				if (small != word(rank, it, -1) || st.MPI_SOURCE != 0 || st.MPI_TAG != 2)
					fail(rank, it, "MPI_Sendrecv's data or status");
			}
			back = word(rank, it, -3);
			MPI_Ssend(&back, 1, MPI_UINT64_T, 0, 4, MPI_COMM_WORLD);
		}
	}
	if (rank == 0)
		printf("PASS ranks=%d iterations=%d\n", size, iters);
	MPI_Finalize();
	return 0;
}

/* pingpong.c - ranks 0 and 1 bounce a message: prints the one-way latency
 * of SIZE-byte messages in microseconds and the bandwidth in MiB/s.
 * usage: pingpong SIZE ITERATIONS */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
	int rank, size = argc > 1 ? atoi(argv[1]) : 8, iters = argc > 2 ? atoi(argv[2]) : 10000;
	char *buf;
	double t;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	buf = malloc((size_t)size);
	memset(buf, rank, (size_t)size);
	for (int phase = 0; phase < 2; phase++) {   /* warm-up, then measured */
		int n = phase ? iters : iters / 10 + 1;

		MPI_Barrier(MPI_COMM_WORLD);
		t = MPI_Wtime();
		for (int i = 0; i < n; i++) {
			if (rank == 0) {
				MPI_Send(buf, size, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
				MPI_Recv(buf, size, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			} else if (rank == 1) {
				MPI_Recv(buf, size, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				MPI_Send(buf, size, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
			}
		}
		t = MPI_Wtime() - t;
		if (phase && rank == 0)
			printf("latency_us %.4f bw_mibs %.2f\n", t / (2.0 * n) * 1e6,
			       2.0 * n * size / t / (1 << 20));
	}
	free(buf);
	MPI_Finalize();
	return 0;
}

/* pingpong.c - ranks 0 and 1 bounce a message: prints the one-way latency
 * of SIZE-byte messages in microseconds and the bandwidth in MiB/s.
 * With "thread", MPI is initialized at MPI_THREAD_MULTIPLE and the
 * bouncing is done by a thread of each rank other than the main one,
 * which waits in pthread_join (bench/mpi/run.py, mt_latency_overhead).
 * Both figures come from the median of batches of round trips
 * (batches.h); mean_us is the whole phase's mean latency. Built with
 * -DFS_FLOOR, its sends and receives cross as a split process's do
 * (fsfloor.h).
 * usage: pingpong SIZE ITERATIONS [thread] */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batches.h"
#include "fsfloor.h"

static int rank, size, iters;

static void *bounce(void *arg)
{
	char *buf = malloc((size_t)size);
	struct batches b;
	double t, med;

	memset(buf, rank, (size_t)size);
	for (int phase = 0; phase < 2; phase++) {   /* warm-up, then measured */
		int n = phase ? iters : iters / 10 + 1;

		batches_init(&b, n);
		MPI_Barrier(MPI_COMM_WORLD);
		t = MPI_Wtime();
		batches_start(&b);
		for (int i = 0; i < n; i++) {
			if (rank == 0) {
				MPI_Send(buf, size, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
				MPI_Recv(buf, size, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			} else if (rank == 1) {
				MPI_Recv(buf, size, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				MPI_Send(buf, size, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
			}
			batches_step(&b, i);
		}
		t = MPI_Wtime() - t;
		med = batches_median(&b);
		if (phase && rank == 0)
			printf("%slatency_us %.4f bw_mibs %.2f mean_us %.4f\n", arg ? "mt_" : "",
			       med / 2 * 1e6, 2.0 * size / med / (1 << 20), t / (2.0 * n) * 1e6);
		batches_free(&b);
	}
	free(buf);
	return NULL;
}

int main(int argc, char **argv)
{
	int threaded = argc > 3 && !strcmp(argv[3], "thread"), provided;
	pthread_t th;

	size = argc > 1 ? atoi(argv[1]) : 8;
	iters = argc > 2 ? atoi(argv[2]) : 10000;
	MPI_Init_thread(&argc, &argv, threaded ? MPI_THREAD_MULTIPLE : MPI_THREAD_SINGLE,
			&provided);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	if (threaded && provided != MPI_THREAD_MULTIPLE) {
		fprintf(stderr, "pingpong: MPI_THREAD_MULTIPLE not provided (%d)\n", provided);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	if (threaded) {
		pthread_create(&th, NULL, bounce, &threaded);
		pthread_join(th, NULL);
	} else {
		bounce(NULL);
	}
	MPI_Finalize();
	return 0;
}

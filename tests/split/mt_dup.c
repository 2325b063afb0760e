/* mt_dup.c - two threads of each rank making communicators at once
 * (MPI_THREAD_MULTIPLE; docs/split.md, "MPI from every thread";
 * tests/split/test_threads.py). 2 ranks.
 *
 *   mt_dup ITERATIONS
 *
 * The main thread duplicates MPI_COMM_WORLD twice, A and B. Then thread 0
 * of rank 0 and thread 1 of rank 1 duplicate A, the two others B, each
 * ITERATIONS times, with an MPI_Allreduce on the new communicator checked
 * and an MPI_Comm_free: each rank has a thread inside MPI_Comm_dup of A
 * while the other rank's first thread may be inside that of B. A rank
 * whose call keeps every other thread of it out of MPI until its
 * communicator is made waits for good; SIGALRM after 60 s ends such a
 * run. Rank 0 prints "PASS ranks=2 iterations=I". */
#include <mpi.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "fail.h"

static MPI_Comm base[2];
static int rank, size, iters;

static void *dups(void *arg)
{
	MPI_Comm c = base[((int)(intptr_t)arg + rank) % 2];

	for (int i = 0; i < iters; i++) {
		MPI_Comm d;
		int one = 1, sum = 0;

		MPI_Comm_dup(c, &d);
		MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, d);
		fail_unless(rank, i, "the sum over the new communicator", sum, size);
		MPI_Comm_free(&d);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t th[2];
	int provided;

	MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (argc < 2 || size != 2)
		fail(rank, 0, "usage: mt_dup ITERATIONS, on 2 ranks");
	if (provided != MPI_THREAD_MULTIPLE)
		fail(rank, 0, "MPI_THREAD_MULTIPLE is not provided");
	iters = atoi(argv[1]);
	alarm(60);
	MPI_Comm_dup(MPI_COMM_WORLD, &base[0]);
	MPI_Comm_dup(MPI_COMM_WORLD, &base[1]);
	for (int t = 0; t < 2; t++)
		pthread_create(&th[t], NULL, dups, (void *)(intptr_t)t);
	for (int t = 0; t < 2; t++)
		pthread_join(th[t], NULL);
	MPI_Comm_free(&base[0]);
	MPI_Comm_free(&base[1]);
	MPI_Barrier(MPI_COMM_WORLD);
	if (rank == 0)
		printf("PASS ranks=2 iterations=%d\n", iters);
	MPI_Finalize();
	return 0;
}

/* mt.c - MPI from every thread (MPI_THREAD_MULTIPLE; docs/split.md, "MPI
 * from every thread"; tests/split/test_threads.py). 2 ranks or more.
 *
 *   mt ITERATIONS SLEEP_MS [serialized]
 *
 * Each rank runs 4 threads that all call MPI at once, each on its own
 * duplicate of MPI_COMM_WORLD for its collectives, as hybrid codes do.
 * Every iteration I, thread T of rank R
 *   - passes v(R, T, I) round the ring on its communicator (MPI_Isend to
 *     the right, MPI_Recv from the left, MPI_Wait), every other step after
 *     a nap on one side, so a checkpoint finds threads waiting in MPI;
 *   - passes it the other way on MPI_COMM_WORLD, shared by the threads,
 *     with tag T (MPI_Sendrecv);
 *   - sums it over the ranks with MPI_Allreduce on its communicator;
 * checks each value, folds the sum into its checksum and naps (thread T
 * for (T + 1) / 4 of SLEEP_MS). Thread 3 of rank 0 prints "rank 0
 * iteration I". At the end rank 0 prints each
 * thread's checksum (combined over the ranks) and "PASS ranks=N
 * iterations=I threads=4"; anything wrong a FAIL line. The checksums
 * depend only on the ranks and iterations: a run checkpointed, killed and
 * restarted prints what an uninterrupted one does.
 *
 * With "serialized" it asks for MPI_THREAD_SERIALIZED and makes the same
 * exchanges with non-blocking calls (MPI_Iallreduce for the sum), each
 * call, and each MPI_Testall of the loops that wait, under one mutex of
 * the program's: one thread inside MPI at a time, any thread. */
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fail.h"

#define THREADS 4

static int rank, size, iters, sleep_ms, serialized;
static pthread_mutex_t one = PTHREAD_MUTEX_INITIALIZER;
static MPI_Comm comms[THREADS];
static uint64_t sums[THREADS];

static long v(int r, int t, int i)
{
	return (long)(r + 1) * 1000003 + (long)t * 7919 + (long)i * 31;
}

static void nap(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

/* serialized: one thread inside MPI at a time, by the program's mutex */
#define ONE(call)                          \
	do {                               \
		pthread_mutex_lock(&one);  \
		call;                      \
		pthread_mutex_unlock(&one); \
	} while (0)

static void wait_one_at_a_time(int n, MPI_Request *q)
{
	MPI_Status st[4];
	int done = 0;

	for (;;) {
		ONE(MPI_Testall(n, q, &done, st));
		if (done)
			return;
		sched_yield();
	}
}

static void *worker(void *arg)
{
	int t = (int)(intptr_t)arg, right = (rank + 1) % size, left = (rank + size - 1) % size;
	MPI_Comm c = comms[t];
	uint64_t sum = 0;

	for (int i = 0; i < iters; i++) {
		long out = v(rank, t, i), in = -1, back = -1, all = -1, want = 0;
		MPI_Request r;

		if ((rank + t + i) % 2)
			nap(sleep_ms / 4);
		if (serialized) {
			MPI_Request q[4];

			ONE(MPI_Isend(&out, 1, MPI_LONG, right, i % 64, c, &q[0]));
			ONE(MPI_Irecv(&in, 1, MPI_LONG, left, i % 64, c, &q[1]));
			ONE(MPI_Isend(&out, 1, MPI_LONG, left, t, MPI_COMM_WORLD, &q[2]));
			ONE(MPI_Irecv(&back, 1, MPI_LONG, right, t, MPI_COMM_WORLD, &q[3]));
			wait_one_at_a_time(4, q);
			ONE(MPI_Iallreduce(&out, &all, 1, MPI_LONG, MPI_SUM, c, &q[0]));
			wait_one_at_a_time(1, q);
		} else {
			MPI_Isend(&out, 1, MPI_LONG, right, i % 64, c, &r);
			MPI_Recv(&in, 1, MPI_LONG, left, i % 64, c, MPI_STATUS_IGNORE);
			MPI_Wait(&r, MPI_STATUS_IGNORE);
			MPI_Sendrecv(&out, 1, MPI_LONG, left, t, &back, 1, MPI_LONG, right, t,
				     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			MPI_Allreduce(&out, &all, 1, MPI_LONG, MPI_SUM, c);
		}
		fail_unless(rank, i, "the ring's value", in, v(left, t, i));
		fail_unless(rank, i, "the value back on MPI_COMM_WORLD", back, v(right, t, i));
		for (int k = 0; k < size; k++)
			want += v(k, t, i);
		fail_unless(rank, i, "the sum", all, want);
		sum = sum * 1099511628211ull + (uint64_t)all;
		if (rank == 0 && t == THREADS - 1) {   /* the slowest: lines until the end */
			printf("rank 0 iteration %d\n", i);
			fflush(stdout);
		}
		nap(sleep_ms * (t + 1) / THREADS);
	}
	sums[t] = sum;
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t th[THREADS];
	uint64_t all[THREADS];
	int provided;

	serialized = argc > 3 && !strcmp(argv[3], "serialized");
	MPI_Init_thread(&argc, &argv, serialized ? MPI_THREAD_SERIALIZED : MPI_THREAD_MULTIPLE,
			&provided);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (argc < 3 || size < 2)
		fail(rank, 0, "usage: mt ITERATIONS SLEEP_MS [serialized], on 2 ranks or more");
	if (provided < (serialized ? MPI_THREAD_SERIALIZED : MPI_THREAD_MULTIPLE))
		fail_unless(rank, 0, "the thread level provided", provided,
			    serialized ? MPI_THREAD_SERIALIZED : MPI_THREAD_MULTIPLE);
	iters = atoi(argv[1]);
	sleep_ms = atoi(argv[2]);
	for (int t = 0; t < THREADS; t++)
		MPI_Comm_dup(MPI_COMM_WORLD, &comms[t]);
	for (int t = 0; t < THREADS; t++)
		pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t);
	for (int t = 0; t < THREADS; t++)
		pthread_join(th[t], NULL);
	MPI_Allreduce(sums, all, THREADS, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
	for (int t = 0; t < THREADS; t++)
		MPI_Comm_free(&comms[t]);
	if (rank == 0) {
		for (int t = 0; t < THREADS; t++)
			printf("thread %d checksum %016llx\n", t, (unsigned long long)all[t]);
		printf("PASS ranks=%d iterations=%d threads=%d\n", size, iters, THREADS);
	}
	MPI_Finalize();
	return 0;
}

/* threads.c - a hybrid rank: OpenMP threads and pthreads beside the MPI
 * calls of the main thread (MPI_THREAD_FUNNELED; docs/split.md, "Threaded
 * ranks"; tests/split/test_threads.py). 2 ranks or more.
 *
 *   threads ITERATIONS SLEEP_MS [SLEEPERS]
 *
 * Besides the main thread each rank runs
 *   a ticker   a pthread that steps x = lcg(x) for ever, keeping x and its
 *              step count in registers and a __thread variable, publishing
 *              both under a mutex every step, counting the SIGUSR1 that the
 *              main thread sends it with pthread_kill (which uses the
 *              thread id glibc keeps);
 *   a waiter   a pthread blocked in pthread_cond_wait until the main thread
 *              broadcasts the next iteration number;
 *   OpenMP     a team of 3 (libgomp's pool) for a parallel loop every
 *              iteration;
 *   sleepers   SLEEPERS more pthreads (default 0), each counting its naps
 *              of 20 ms; every iteration each count must have moved (naps
 *              of 1 ms, 59 sleepers a rank, took the 2 CPUs: the job's
 *              output and the checkpoint request came after its end).
 * Each iteration rank 0 starts an MPI_Ibarrier, prints "rank 0 iteration I"
 * and sleeps SLEEP_MS; the others sleep, run the OpenMP loop and only then
 * start theirs: a checkpoint in the sleep finds them behind rank 0, and they
 * need their OpenMP threads to get there. Then every main thread checks an
 * MPI_Allreduce of the OpenMP sums, the ticker's published x against its
 * own computation from the last pair (the ticker must still run), the
 * waiter's count and the SIGUSR1 count. At the end
 * both pthreads are stopped and joined (pthread_join waits for the thread
 * id that the kernel clears). Rank 0 prints "PASS ranks=N iterations=I",
 * anything wrong a FAIL line. */
#include <mpi.h>
#include <omp.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "fail.h"

#define N (1 << 16)

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static uint64_t pub_x, pub_n;       /* the ticker's, under mu */
static int stop;                    /* under mu */
static int announced, seen;         /* the waiter's, under mu */
static volatile sig_atomic_t usr1;  /* SIGUSR1 handled on the ticker */
static __thread uint64_t tls_steps;
static __thread int is_ticker;
static double data[N];
static volatile uint64_t naps[128];   /* the sleepers' */
static volatile int sleepers_stop;

static uint64_t lcg(uint64_t x)
{
	return x * 6364136223846793005ull + 1442695040888963407ull;
}

static void on_usr1(int sig)
{
	(void)sig;
	if (is_ticker)
		usr1++;
}

static void *ticker(void *arg)
{
	uint64_t x = (uintptr_t)arg, n = 0;
	struct timespec ts = { 0, 200000 };

	is_ticker = 1;
	for (;;) {
		x = lcg(x);
		n++;
		tls_steps++;
		pthread_mutex_lock(&mu);
		if (tls_steps != n) {
			pthread_mutex_unlock(&mu);
			printf("FAIL ticker: its __thread count %llu, its own %llu\n",
			       (unsigned long long)tls_steps, (unsigned long long)n);
			fflush(stdout);
			abort();
		}
		pub_x = x;
		pub_n = n;
		if (stop) {
			pthread_mutex_unlock(&mu);
			return (void *)(uintptr_t)n;
		}
		pthread_mutex_unlock(&mu);
		nanosleep(&ts, NULL);
	}
}

static void *waiter(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&mu);
	for (;;) {
		while (announced == seen && !stop)
			pthread_cond_wait(&cv, &mu);
		if (announced == seen)
			break;
		seen++;
	}
	pthread_mutex_unlock(&mu);
	return (void *)(intptr_t)seen;
}

static void *sleeper(void *arg)
{
	volatile uint64_t *mine = &naps[(uintptr_t)arg];
	struct timespec ts = { 0, 20 * 1000000 };

	while (!sleepers_stop) {
		nanosleep(&ts, NULL);
		++*mine;
	}
	return (void *)(uintptr_t)*mine;
}

/* every sleeper naps again within 5 s of *last */
static void sleepers_moved(int rank, int it, int n, uint64_t *last)
{
	for (int i = 0; i < n; i++) {
		int tries = 0;

		for (; naps[i] == last[i] && tries < 5000; tries++) {
			struct timespec ts = { 0, 1000000 };

			nanosleep(&ts, NULL);
		}
		if (tries == 5000)
			fail(rank, it, "a sleeper does not run");
		last[i] = naps[i];
	}
}

/* *v (read under mu) reaches want within 5 s */
static int settles(volatile int *v, int want)
{
	for (int tries = 0; tries < 5000; tries++) {
		struct timespec ts = { 0, 1000000 };
		int now;

		pthread_mutex_lock(&mu);
		now = *v;
		pthread_mutex_unlock(&mu);
		if (now == want)
			return 1;
		nanosleep(&ts, NULL);
	}
	return 0;
}

/* the ticker's published pair, after it has moved on from (*n, *x) */
static void ticker_moved(int rank, int it, uint64_t *x, uint64_t *n)
{
	for (int tries = 0; tries < 5000; tries++) {
		uint64_t nx, nn, y;
		struct timespec ts = { 0, 1000000 };

		pthread_mutex_lock(&mu);
		nx = pub_x;
		nn = pub_n;
		pthread_mutex_unlock(&mu);
		if (nn > *n) {
			y = *x;
			for (uint64_t i = *n; i < nn; i++)
				y = lcg(y);
			if (y != nx)
				fail(rank, it, "the ticker's x after its steps");
			*x = nx;
			*n = nn;
			return;
		}
		nanosleep(&ts, NULL);
	}
	fail(rank, it, "the ticker does not run");
}

int main(int argc, char **argv)
{
	int rank, size, provided, iters = argc > 1 ? atoi(argv[1]) : 10;
	int ms = argc > 2 ? atoi(argv[2]) : 300;
	int nsleep = argc > 3 ? atoi(argv[3]) : 0;
	uint64_t seed, x, n = 0, last[128] = { 0 };
	pthread_t tick, wait, sleepers[128];
	void *ret;

	MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (provided < MPI_THREAD_FUNNELED)
		fail(rank, -1, "MPI_THREAD_FUNNELED not provided");
	signal(SIGUSR1, on_usr1);
	for (int i = 0; i < N; i++)
		data[i] = (double)((i * 7 + rank) % 1000);
	seed = x = 1000003ull * (uint64_t)(rank + 1);
	pthread_create(&tick, NULL, ticker, (void *)(uintptr_t)seed);
	pthread_create(&wait, NULL, waiter, NULL);
	if (nsleep < 0 || nsleep > 128)
		fail(rank, -1, "SLEEPERS is 0 to 128");
	for (int i = 0; i < nsleep; i++)
		if (pthread_create(&sleepers[i], NULL, sleeper, (void *)(uintptr_t)i) != 0)
			fail(rank, -1, "pthread_create of a sleeper");
	for (int it = 0; it < iters; it++) {
		struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
		double s = 0, all = 0, want = 0;
		int team = 0;
		MPI_Request r;

		if (rank == 0) {
			MPI_Ibarrier(MPI_COMM_WORLD, &r);
			printf("rank 0 iteration %d\n", it);
			fflush(stdout);
		}
		nanosleep(&ts, NULL);
		/* pthread_kill finds every thread by the id in its struct pthread */
		if (pthread_kill(tick, 0) != 0 || pthread_kill(wait, 0) != 0)
			fail(rank, it, "pthread_kill(0) does not find a thread");
		for (int i = 0; i < nsleep; i++)
			if (pthread_kill(sleepers[i], 0) != 0)
				fail(rank, it, "pthread_kill(0) does not find a sleeper");
#pragma omp parallel for num_threads(3) reduction(+ : s) reduction(max : team)
		for (int i = 0; i < N; i++) {
			s += data[i] * (it + 1);
			team = omp_get_num_threads();
		}
		if (team != 3)
			fail(rank, it, "the OpenMP team is not 3 threads");
		if (rank != 0)
			MPI_Ibarrier(MPI_COMM_WORLD, &r);
		MPI_Wait(&r, MPI_STATUS_IGNORE);
		MPI_Allreduce(&s, &all, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
		for (int r = 0; r < size; r++)
			for (int i = 0; i < N; i++)
				want += (double)((i * 7 + r) % 1000) * (it + 1);
		if (all != want)
			fail(rank, it, "the sum of the OpenMP sums");
		ticker_moved(rank, it, &x, &n);
		sleepers_moved(rank, it, nsleep, last);
		pthread_mutex_lock(&mu);
		announced++;
		pthread_cond_broadcast(&cv);
		pthread_mutex_unlock(&mu);
		if (!settles(&seen, it + 1))
			fail(rank, it, "the waiter did not wake");
		if (pthread_kill(tick, SIGUSR1) != 0 || !settles((volatile int *)&usr1, it + 1))
			fail(rank, it, "SIGUSR1 did not reach the ticker");
	}
	pthread_mutex_lock(&mu);
	stop = 1;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
	if (pthread_join(tick, &ret) != 0 || (uintptr_t)ret < n)
		fail(rank, iters, "joining the ticker");
	if (pthread_join(wait, &ret) != 0 || (intptr_t)ret != iters)
		fail(rank, iters, "joining the waiter: it did not see every iteration");
	sleepers_stop = 1;
	for (int i = 0; i < nsleep; i++)
		if (pthread_join(sleepers[i], &ret) != 0 || (uintptr_t)ret < last[i])
			fail(rank, iters, "joining a sleeper");
	MPI_Barrier(MPI_COMM_WORLD);
	if (rank == 0)
		printf("PASS ranks=%d iterations=%d\n", size, iters);
	MPI_Finalize();
	return 0;
}

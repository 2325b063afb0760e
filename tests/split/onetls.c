/* onetls.c - a rank whose own TLS and pthread keys must come through
 * every MPI call intact (tests/split/test_onetls.py).
 *
 *   onetls ITERATIONS
 *
 * It makes a pthread key before MPI_Init and gives it a heap value, and
 * fills a static TLS array (TLS_KIB KiB, a compile-time size: 1 by
 * default, 96 for a program whose static TLS is larger than the room one
 * thread pointer keeps for it). Each iteration runs an Allreduce and a
 * Send/Recv ring, then checks the array and the key's value. At the end
 * MPI_Finalize runs the lower half's key destructors: one that took the
 * program's key for its own frees the program's value (glibc aborts).
 * A timer's SIGALRM every 0.5 ms, while rank 0 holds back its part of
 * the ring for 2 ms an iteration (rank 1 waits inside MPI_Sendrecv),
 * runs a handler that counts in a shared library's TLS (onetls_lib.c,
 * through the DTV) and in a global: the two counts agree at the end
 * only if every handler found the program's DTV.
 * Rank 0 prints PASS.
 *
 *   onetls exe
 *
 * Each rank prints the name of the executable it runs in: its lower half.
 *
 *   onetls dlopen LIB N
 *
 * LIB (onetls_lib.c built with ONETLS_BIG: 72 KiB of initial-exec TLS)
 * opened after MPI_Init and its TLS filled, N rounds of calls, then
 * each rank prints how many of its words changed.
 *
 *   onetls cancel N
 *
 * A thread writing N records through MPI-IO is canceled; each rank
 * prints whether it ended canceled and how many it wrote.
 *
 *   onetls threads N
 *
 * N threads one after another, each calling MPI and ending; each rank
 * prints how much its resident memory grew from the N/10th to the last. */
#include <dlfcn.h>
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#ifndef TLS_KIB
#define TLS_KIB 1
#endif

static __thread uint64_t own[TLS_KIB * 1024 / 8];
static int rank;
static volatile long handled;

long onetls_hit(void);

static void on_alarm(int sig)
{
	(void)sig;
	handled++;
	onetls_hit();
}

static void hold_back(void)
{
	struct timespec t0, t;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	do
		clock_gettime(CLOCK_MONOTONIC, &t);
	while ((t.tv_sec - t0.tv_sec) * 1000000000L + t.tv_nsec - t0.tv_nsec < 2000000);
}

static void fail(const char *what, long it)
{
	printf("FAIL rank %d iteration %ld: %s\n", rank, it, what);
	fflush(stdout);
	MPI_Abort(MPI_COMM_WORLD, 3);
}

/* the rank's resident memory, in KiB */
static long rss_kib(void)
{
	char line[256];
	long kib = -1;
	FILE *f = fopen("/proc/self/status", "r");

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld", &kib) == 1)
			break;
	if (f)
		fclose(f);
	return kib;
}

/* one short-lived thread's MPI: a datatype made and freed (the lower
 * half mallocs and frees on this thread's TLS), a reduction */
static void *churn_one(void *arg)
{
	MPI_Datatype t;
	long in = 3, out = 0;

	(void)arg;
	MPI_Type_contiguous(2, MPI_LONG, &t);
	MPI_Type_commit(&t);
	MPI_Type_free(&t);
	MPI_Allreduce(&in, &out, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
	return (void *)out;
}

/* cancel N: a thread writes N records to a file of its own through
 * MPI-IO (the lower half's libc writes: cancellation points) and calls
 * nothing else that is one; the main thread cancels it once it started.
 * It must write them all, and end canceled at its own next cancellation
 * point, after MPI. */
static volatile int writer_started;
static volatile long written;

static void *writer(void *arg)
{
	long n = (long)arg, rec[8];
	char name[64];
	MPI_File f;

	snprintf(name, sizeof(name), "onetls-cancel-%d-%d.dat", rank, (int)getpid());
	if (MPI_File_open(MPI_COMM_SELF, name, MPI_MODE_CREATE | MPI_MODE_WRONLY |
			  MPI_MODE_DELETE_ON_CLOSE, MPI_INFO_NULL, &f) != MPI_SUCCESS)
		return NULL;
	writer_started = 1;
	for (long i = 0; i < n; i++) {
		for (int k = 0; k < 8; k++)
			rec[k] = i;
		if (MPI_File_write_at(f, i * (long)sizeof(rec), rec, 8, MPI_LONG,
				      MPI_STATUS_IGNORE) != MPI_SUCCESS)
			break;
		written = i + 1;
	}
	MPI_File_close(&f);
	pthread_testcancel();
	return NULL;
}

static int cancel_inside(long n)
{
	pthread_t t;
	void *got = NULL;

	if (pthread_create(&t, NULL, writer, (void *)n) != 0)
		fail("a thread", 0);
	while (!writer_started)
		usleep(100);
	if (pthread_cancel(t) != 0 || pthread_join(t, &got) != 0)
		fail("pthread_cancel", 0);
	printf("rank %d: canceled=%d written=%ld\n", rank, got == PTHREAD_CANCELED, written);
	return 0;
}

/* dlopen LIB N: LIB (onetls_lib.c with ONETLS_BIG) opened after
 * MPI_Init, its TLS filled, then N rounds of Allreduce and Sendrecv; its
 * TLS must be as it was filled */
static int big_tls(const char *lib, long n)
{
	void *h = dlopen(lib, RTLD_NOW);
	void (*fill)(unsigned long);
	long (*bad)(unsigned long);
	long bad_words;
	int size;

	if (!h) {
		printf("FAIL rank %d: dlopen: %s\n", rank, dlerror());
		return 1;
	}
	fill = (void (*)(unsigned long))dlsym(h, "onetls_big_fill");
	bad = (long (*)(unsigned long))dlsym(h, "onetls_big_bad");
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	fill(0x5a5a0000ul + rank);
	for (long it = 0; it < n; it++) {
		long in = it, out = 0, got = -1;
		int to = (rank + 1) % size, from = (rank + size - 1) % size;
		void *p = malloc(100 + it % 1000);

		MPI_Allreduce(&in, &out, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
		MPI_Sendrecv(&in, 1, MPI_LONG, to, 0, &got, 1, MPI_LONG, from, 0,
			     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		free(p);
		if (out != it * size || got != it)
			fail("a call after dlopen", it);
	}
	bad_words = bad(0x5a5a0000ul + rank);
	printf("rank %d: dlopen'ed TLS words changed=%ld\n", rank, bad_words);
	return 0;
}

/* threads N: N threads one after another, each calling MPI once and
 * ending; the rank's memory after the first N/10 and after all of them
 * (a thread that ends must leave no lower-half TLS behind) */
static int churn(long n)
{
	long at = 0;
	int size;

	MPI_Comm_size(MPI_COMM_WORLD, &size);
	for (long i = 0; i < n; i++) {
		pthread_t t;
		void *got = NULL;

		if (i == n / 10)
			at = rss_kib();
		if (pthread_create(&t, NULL, churn_one, NULL) != 0 || pthread_join(t, &got) != 0)
			fail("a thread", i);
		if ((long)got != 3L * size)
			fail("a thread's Allreduce", i);
	}
	printf("rank %d: threads=%ld grew_kib=%ld\n", rank, n, rss_kib() - at);
	return 0;
}

int main(int argc, char **argv)
{
	long iters = argc > 1 ? atol(argv[1]) : 100;
	pthread_key_t key;
	uint64_t *value = malloc(64);
	int size;

	if (!value || pthread_key_create(&key, free) != 0 || pthread_setspecific(key, value) != 0)
		return 2;
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (argc > 1 && !strcmp(argv[1], "exe")) {
		char exe[4096];
		ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

		exe[n > 0 ? n : 0] = '\0';
		printf("rank %d: exe=%s\n", rank, strrchr(exe, '/') ? strrchr(exe, '/') + 1 : exe);
		MPI_Finalize();
		return 0;
	}
	if (argc > 3 && !strcmp(argv[1], "dlopen")) {
		big_tls(argv[2], atol(argv[3]));
		MPI_Barrier(MPI_COMM_WORLD);
		MPI_Finalize();
		return 0;
	}
	if (argc > 2 && (!strcmp(argv[1], "threads") || !strcmp(argv[1], "cancel"))) {
		if (argv[1][0] == 't')
			churn(atol(argv[2]));
		else
			cancel_inside(atol(argv[2]));
		MPI_Barrier(MPI_COMM_WORLD);
		MPI_Finalize();
		return 0;
	}
	for (size_t i = 0; i < sizeof(own) / 8; i++)
		own[i] = ((uint64_t)rank << 40) ^ i;
	struct sigaction sa = { .sa_handler = on_alarm, .sa_flags = SA_RESTART };
	struct itimerval every = { { 0, 500 }, { 0, 500 } }, off = { { 0, 0 }, { 0, 0 } };

	sigaction(SIGALRM, &sa, NULL);
	setitimer(ITIMER_REAL, &every, NULL);
	for (long it = 0; it < iters; it++) {
		long in = rank + it, out = 0, got = -1;
		int to = (rank + 1) % size, from = (rank + size - 1) % size;

		if (rank == 0)
			hold_back();

		MPI_Allreduce(&in, &out, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
		if (out != (long)size * (size - 1) / 2 + size * it)
			fail("Allreduce", it);
		MPI_Sendrecv(&in, 1, MPI_LONG, to, 0, &got, 1, MPI_LONG, from, 0,
			     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		if (got != from + it)
			fail("Sendrecv", it);
		for (size_t i = 0; i < sizeof(own) / 8; i++)
			if (own[i] != (((uint64_t)rank << 40) ^ i))
				fail("static TLS", it);
		if (pthread_getspecific(key) != value)
			fail("pthread key", it);
	}
	setitimer(ITIMER_REAL, &off, NULL);
	if (onetls_hit() != handled + 1)
		fail("a signal handler's TLS", iters);
	MPI_Finalize();
	if (rank == 0)
		printf("PASS ranks=%d iterations=%ld\n", size, iters);
	return 0;
}

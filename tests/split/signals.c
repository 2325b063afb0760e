/* signals.c - a signal sent to the process runs the program's handler on
 * one of the program's threads, never on one of the lower half's (docs/
 * split.md, "The lower half"): there it would run on the lower half's TLS.
 *
 *   signals ITERATIONS SLEEP_MS
 *
 * Each iteration the main thread blocks SIGUSR1, sends it to the process
 * (kill: process-directed), sleeps SLEEP_MS and checks that no thread took
 * it meanwhile (the program has no other thread: MPI's, the checkpoint
 * thread and the lazy restore's are the lower half's and block every
 * signal), then unblocks it: the handler runs at once, on the main thread.
 * Then it arms a 500 us ITIMER_REAL whose SIGALRM handler (installed with
 * signal()) checks the address of a __thread variable against the main
 * thread's, and loops on MPI_Allreduce for 30 ms: most alarms arrive while
 * the thread is inside MPI, on the lower half's FS base, and the handler
 * must still find the program's TLS (uh_signal.c). At the end at least
 * half the iterations must have seen an alarm (a restart does not bring
 * the timer back: the iteration it was armed in may see none).
 * It prints "rank R iteration I"; a failed check prints "rank R: FAIL ..."
 * and exits with status 1. At the end rank 0 prints
 * "PASS ranks=N iterations=I". */
#define _GNU_SOURCE
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t taken;
static volatile long taken_by;
static __thread long tls_word;
static long *volatile main_tls;       /* &tls_word on the main thread */
static volatile sig_atomic_t alarms, off_tls;

static void on_alarm(int sig)
{
	(void)sig;
	if (&tls_word != main_tls)
		off_tls++;
	else
		tls_word++;
	alarms++;
}

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static void on_usr1(int sig)
{
	(void)sig;
	taken_by = syscall(SYS_gettid);
	taken++;
}

static void fail(int rank, int it, const char *what, long tid)
{
	printf("rank %d: FAIL iteration %d: %s (thread %ld, main thread %ld)\n", rank, it, what,
	       tid, (long)getpid());
	fflush(stdout);
	_exit(1);
}

int main(int argc, char **argv)
{
	int rank, size, iters = argc > 1 ? atoi(argv[1]) : 10;
	long ms = argc > 2 ? atol(argv[2]) : 100;
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };
	struct sigaction sa = { .sa_handler = on_usr1 };
	sigset_t usr1;
	struct itimerval on = { { 0, 500 }, { 0, 500 } }, off = { { 0, 0 }, { 0, 0 } };
	int alarmed = 0;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR1, &sa, NULL);
	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	main_tls = &tls_word;
	signal(SIGALRM, on_alarm);
	for (int it = 0; it < iters; it++) {
		taken = 0;
		sigprocmask(SIG_BLOCK, &usr1, NULL);
		kill(getpid(), SIGUSR1);
		nanosleep(&ts, NULL);   /* a checkpoint may stop and restart it here */
		if (taken)
			fail(rank, it, "SIGUSR1, blocked by the only thread of the program, was taken",
			     taken_by);
		sigprocmask(SIG_UNBLOCK, &usr1, NULL);
		if (taken != 1 || taken_by != getpid())
			fail(rank, it, "SIGUSR1 did not run its handler on the main thread", taken_by);
		MPI_Barrier(MPI_COMM_WORLD);
		alarms = 0;
		setitimer(ITIMER_REAL, &on, NULL);
		for (double end = now() + 0.03;;) {
			int mine = now() > end, all = 0;

			MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
			if (all)
				break;
		}
		setitimer(ITIMER_REAL, &off, NULL);
		if (off_tls)
			fail(rank, it, "SIGALRM's handler ran on a TLS not the program's", (long)off_tls);
		alarmed += alarms > 0;
		printf("rank %d iteration %d\n", rank, it);
		fflush(stdout);
	}
	if (alarmed < iters / 2)
		fail(rank, iters, "SIGALRM was seen in fewer than half the iterations", alarmed);
	if (rank == 0)
		printf("PASS ranks=%d iterations=%d\n", size, iters);
	MPI_Finalize();
	return 0;
}

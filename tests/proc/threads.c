/* threads.c - 8 threads with TLS, a mutex and condition variables keep
 * running across checkpoint/restart; pids and tids stay what the program
 * saw (getpid, gettid, pthread_kill), a recursive mutex held by main stays
 * held by main, and every thread's rseq registration is valid again. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "zdtm.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#define NTHREADS 8

extern const ptrdiff_t __rseq_offset __attribute__((weak));
extern const unsigned int __rseq_size __attribute__((weak));

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t held;                 /* recursive, held by main */
static uint64_t counter;
static atomic_int stop_workers, usr1_seen[NTHREADS];
static __thread uint64_t tls_value;
static pid_t tids[NTHREADS];
static pthread_t threads[NTHREADS];

static void on_usr1(int sig)
{
	(void)sig;
	for (int i = 0; i < NTHREADS; i++)
		if (tids[i] == (pid_t)syscall(SYS_gettid))
			atomic_fetch_add(&usr1_seen[i], 1);
}

/* 0: registered (the kernel refuses a second registration with EBUSY) */
static int rseq_registered(void)
{
	void *area;
	long r;

	if (!&__rseq_size || !__rseq_size)
		return 0;   /* glibc without rseq: nothing to check */
	area = (char *)__builtin_thread_pointer() + __rseq_offset;
	r = syscall(SYS_rseq, area, 32, 0, 0x53053053);
	if (r == 0) {
		syscall(SYS_rseq, area, 32, 1 /* unregister */, 0x53053053);
		return -1;
	}
	return errno == EBUSY ? 0 : -1;
}

struct worker {
	int index;
	int failed;
};

static void *worker(void *arg)
{
	struct worker *w = arg;
	pid_t tid = (pid_t)syscall(SYS_gettid);

	tids[w->index] = tid;
	tls_value = 1000u * (unsigned)w->index;
	while (!atomic_load(&stop_workers)) {
		pthread_mutex_lock(&lock);
		counter++;
		tls_value++;
		pthread_cond_broadcast(&cond);
		pthread_mutex_unlock(&lock);
		if (pthread_mutex_trylock(&held) != EBUSY)
			w->failed |= 1;
		usleep(1000);
	}
	if ((pid_t)syscall(SYS_gettid) != tid)
		w->failed |= 2;
	if (tls_value < 1000u * (unsigned)w->index)
		w->failed |= 4;
	if (rseq_registered() != 0)
		w->failed |= 8;
	return NULL;
}

int main(void)
{
	pthread_mutexattr_t ma;
	struct worker ws[NTHREADS];
	pid_t pid = getpid(), main_tid = (pid_t)syscall(SYS_gettid);
	uint64_t seen;

	signal(SIGUSR1, on_usr1);
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&held, &ma);
	pthread_mutex_lock(&held);
	pthread_mutex_lock(&held);   /* depth 2 */
	for (int i = 0; i < NTHREADS; i++) {
		ws[i] = (struct worker){ i, 0 };
		if (pthread_create(&threads[i], NULL, worker, &ws[i]) != 0) {
			zdtm_fail("pthread_create");
			return zdtm_end();
		}
	}
	while (1) {
		int all = 1;

		for (int i = 0; i < NTHREADS; i++)
			all &= tids[i] != 0;
		if (all)
			break;
		usleep(1000);
	}
	zdtm_ready();
	/* identity */
	if (getpid() != pid)
		zdtm_fail("getpid changed: %d -> %d", pid, getpid());
	if ((pid_t)syscall(SYS_gettid) != main_tid)
		zdtm_fail("main tid changed");
	if (rseq_registered() != 0)
		zdtm_fail("main thread's rseq area is not registered");
	/* the threads still make progress */
	pthread_mutex_lock(&lock);
	seen = counter;
	for (int k = 0; k < 50; k++)
		pthread_cond_wait(&cond, &lock);
	if (counter <= seen)
		zdtm_fail("workers made no progress");
	pthread_mutex_unlock(&lock);
	/* pthread_kill reaches each thread by its tid */
	for (int i = 0; i < NTHREADS; i++)
		pthread_kill(threads[i], SIGUSR1);
	for (int k = 0; k < 200; k++) {
		int all = 1;

		for (int i = 0; i < NTHREADS; i++)
			all &= atomic_load(&usr1_seen[i]) > 0;
		if (all)
			break;
		usleep(5000);
	}
	for (int i = 0; i < NTHREADS; i++)
		if (!atomic_load(&usr1_seen[i]))
			zdtm_fail("thread %d did not get its pthread_kill", i);
	/* the recursive mutex is still main's, at depth 2 */
	if (pthread_mutex_unlock(&held) != 0 || pthread_mutex_unlock(&held) != 0)
		zdtm_fail("main no longer holds its recursive mutex");
	atomic_store(&stop_workers, 1);
	for (int i = 0; i < NTHREADS; i++) {
		pthread_join(threads[i], NULL);
		if (ws[i].failed)
			zdtm_fail("thread %d failed checks 0x%x", i, ws[i].failed);
	}
	return zdtm_end();
}

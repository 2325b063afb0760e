/* signals.c - signal handlers, the signal mask, pending signals (one sent
 * to the thread, one to the process, both blocked) and a running interval
 * timer survive checkpoint/restart. */
#include "zdtm.h"

#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/time.h>

static atomic_int usr1, usr2, alarms, hups, winches;

static void on_usr1(int sig) { (void)sig; atomic_fetch_add(&usr1, 1); }
static void on_usr2(int sig, siginfo_t *si, void *uc) { (void)sig; (void)si; (void)uc; atomic_fetch_add(&usr2, 1); }
static void on_alarm(int sig) { (void)sig; atomic_fetch_add(&alarms, 1); }
static void on_hup(int sig) { (void)sig; atomic_fetch_add(&hups, 1); }
static void on_winch(int sig) { (void)sig; atomic_fetch_add(&winches, 1); }

int main(void)
{
	struct sigaction sa, got;
	struct itimerval it = { { 0, 50000 }, { 0, 50000 } };   /* every 50 ms */
	sigset_t mask, now;

	signal(SIGUSR1, on_usr1);
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_usr2;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigaddset(&sa.sa_mask, SIGINT);
	sigaction(SIGUSR2, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	signal(SIGALRM, on_alarm);
	sigemptyset(&mask);
	sigaddset(&mask, SIGHUP);
	sigaddset(&mask, SIGWINCH);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	signal(SIGHUP, on_hup);
	signal(SIGWINCH, on_winch);
	raise(SIGWINCH);            /* pending for this thread */
	kill(getpid(), SIGHUP);     /* pending for the process */
	setitimer(ITIMER_REAL, &it, NULL);
	zdtm_ready();

	sigpending(&now);
	if (!sigismember(&now, SIGHUP) || !sigismember(&now, SIGWINCH))
		zdtm_fail("pending signals lost (SIGHUP %d, SIGWINCH %d)", sigismember(&now, SIGHUP),
			  sigismember(&now, SIGWINCH));
	sigprocmask(SIG_UNBLOCK, &mask, NULL);
	if (hups != 1 || winches != 1)
		zdtm_fail("pending signals delivered %d and %d times, not once", hups, winches);
	sigprocmask(SIG_BLOCK, &mask, NULL);

	sigprocmask(SIG_BLOCK, NULL, &now);
	if (!sigismember(&now, SIGHUP) || !sigismember(&now, SIGWINCH) || sigismember(&now, SIGUSR1))
		zdtm_fail("signal mask not restored");
	sigaction(SIGUSR2, NULL, &got);
	if (got.sa_sigaction != on_usr2 || !(got.sa_flags & SA_SIGINFO) || !sigismember(&got.sa_mask, SIGINT))
		zdtm_fail("SIGUSR2 disposition not restored");
	sigaction(SIGPIPE, NULL, &got);
	if (got.sa_handler != SIG_IGN)
		zdtm_fail("SIGPIPE is no longer ignored");
	raise(SIGUSR1);
	raise(SIGUSR2);
	if (usr1 != 1 || usr2 != 1)
		zdtm_fail("handlers did not run (%d, %d)", usr1, usr2);
	int before = atomic_load(&alarms);
	struct timespec ts = { 0, 300 * 1000 * 1000 };
	while (nanosleep(&ts, &ts) != 0)
		;
	if (atomic_load(&alarms) <= before)
		zdtm_fail("the interval timer no longer fires");
	getitimer(ITIMER_REAL, &it);
	if (it.it_interval.tv_usec != 50000)
		zdtm_fail("the interval timer's interval changed");
	return zdtm_end();
}

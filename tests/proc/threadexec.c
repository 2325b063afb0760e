/* threadexec.c - a threaded program in which a thread other than the main
 * one execs another program (threadexec PROG ARGS...) while three more
 * spin: the kernel ends them and the agent's thread, and the agent goes on
 * in PROG. */
#include "zdtm.h"

#include <pthread.h>

static char **target;

static void *spin(void *arg)
{
	volatile unsigned long n = 0;

	(void)arg;
	for (;;)
		n++;
	return NULL;
}

static void *execer(void *arg)
{
	struct timespec ts = { 0, 20 * 1000 * 1000 };

	(void)arg;
	nanosleep(&ts, NULL);
	execv(target[0], target);
	zdtm_fail("execv %s", target[0]);
	exit(zdtm_end());
}

int main(int argc, char **argv)
{
	pthread_t t;

	if (argc < 2) {
		zdtm_fail("usage: threadexec PROG ARGS...");
		return zdtm_end();
	}
	target = argv + 1;
	for (int i = 0; i < 3; i++)
		if (pthread_create(&t, NULL, spin, NULL) != 0)
			zdtm_fail("pthread_create");
	if (pthread_create(&t, NULL, execer, NULL) != 0)
		zdtm_fail("pthread_create");
	pause();
	return zdtm_end();
}

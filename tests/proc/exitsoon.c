/* exitsoon.c - a child that ends as soon as it runs again after a restart
 * (its nanosleep returns EINTR then): its agent may not have said
 * RESTARTED yet, and the restart must go on without it. The parent forks
 * a new such child whenever one ended, and checks at the end that each
 * ended with status 5 and that at least one did (after a restart). */
#include "zdtm.h"

#include <signal.h>
#include <sys/wait.h>

static pid_t sleeper(void)
{
	pid_t p = fork();

	if (p == 0) {
		struct timespec ts = { 3600, 0 };

		while (nanosleep(&ts, NULL) == 0)
			;
		_exit(5);
	}
	return p;
}

int main(void)
{
	struct timespec tick = { 0, 10 * 1000 * 1000 };
	pid_t kid = sleeper();
	int status, ended = 0;

	printf("READY\n");
	fflush(stdout);
	while (access("stop", F_OK) != 0) {
		pid_t w = waitpid(kid, &status, WNOHANG);

		if (w == kid) {
			if (!WIFEXITED(status) || WEXITSTATUS(status) != 5)
				zdtm_fail("a sleeper ended with status %#x", status);
			ended++;
			kid = sleeper();
		}
		nanosleep(&tick, NULL);
	}
	kill(kid, SIGKILL);
	waitpid(kid, &status, 0);
	if (ended == 0)
		zdtm_fail("no sleeper ended after a restart");
	printf("ended %d\n", ended);
	return zdtm_end();
}

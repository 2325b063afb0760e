/* reexec.c - a program that execs itself again and again (every 2 ms)
 * until ./stop exists: checkpoints asked for meanwhile meet execs at every
 * stage. Each either succeeds or fails in one line saying that the program
 * is executing another; none hangs, and a restart goes on execing.
 * Usage: reexec [N] (N: execs so far). Prints READY once, before the first
 * exec; at the end "execs N" and PASS. */
#include "zdtm.h"

#include <stdlib.h>

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 0;
	struct timespec ts = { 0, 2 * 1000 * 1000 };
	char next[24];

	if (n == 0) {
		printf("READY\n");
		fflush(stdout);
	}
	if (access("stop", F_OK) == 0) {
		printf("execs %ld\n", n);
		return zdtm_end();
	}
	nanosleep(&ts, NULL);
	snprintf(next, sizeof(next), "%ld", n + 1);
	execl("/proc/self/exe", argv[0], next, (char *)NULL);
	zdtm_fail("exec");
	return zdtm_end();
}

/* execd.c - the end of an exec chain (env X=1 nice -n 1 execd NICE, a shell
 * script that execs it, a shim): checkpointed, killed and restarted as the
 * program the chain became. It checks what the chain gave it (X=1, its nice
 * value NICE) and that the agent's variables did not leak into its
 * environment, before and after the restarts. */
#include "zdtm.h"

#include <errno.h>
#include <string.h>
#include <sys/resource.h>

static void check(int want_nice)
{
	const char *x = getenv("X");
	int nice;

	errno = 0;
	nice = getpriority(PRIO_PROCESS, 0);
	if (!x || strcmp(x, "1") != 0)
		zdtm_fail("X is %s, not 1", x ? x : "unset");
	if (nice != want_nice)
		zdtm_fail("nice value %d, not %d", nice, want_nice);
	if (getenv("STASIS_COORD_FD") || getenv("STASIS_LAUNCH_FDS"))
		zdtm_fail("the agent's variables are in the program's environment");
}

int main(int argc, char **argv)
{
	int want_nice = argc > 1 ? atoi(argv[1]) : 0;

	check(want_nice);
	zdtm_ready();
	check(want_nice);
	return zdtm_end();
}

/* zdtm.h - the shape of every transparent-checkpoint test program.
 *
 * A test sets up its state, calls zdtm_ready() (prints READY and waits),
 * then verifies and calls zdtm_pass()/zdtm_fail(). While it waits, the
 * harness (test_proc.py) checkpoints it, kills it with SIGKILL and restarts
 * it, three times; then it creates the file "stop" in the working directory
 * and the program goes on to verify itself. Programs print PASS or FAIL.
 */
#ifndef ZDTM_H
#define ZDTM_H

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int zdtm_failed;

static inline void zdtm_fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	printf("FAIL: ");
	vprintf(fmt, ap);
	printf("\n");
	fflush(stdout);
	va_end(ap);
	zdtm_failed = 1;
}

/* Print READY, then wait for ./stop; call `tick` (may be NULL) every 10 ms. */
static inline void zdtm_ready_tick(void (*tick)(void))
{
	struct timespec ts = { 0, 10 * 1000 * 1000 };

	printf("READY\n");
	fflush(stdout);
	while (access("stop", F_OK) != 0) {
		if (tick)
			tick();
		nanosleep(&ts, NULL);
	}
}

static inline void zdtm_ready(void)
{
	zdtm_ready_tick(NULL);
}

/* Read exactly `want` from fd (waiting up to 10 s for each piece), or fail
 * saying what read what. */
static inline void zdtm_expect(int fd, const char *want, const char *what)
{
	char buf[64] = "";
	size_t len = strlen(want), got = 0;

	while (got < len && len < sizeof(buf)) {
		struct pollfd p = { fd, POLLIN, 0 };
		int r = poll(&p, 1, 10000);
		ssize_t n = r == 1 ? read(fd, buf + got, len - got) : -1;

		if (r < 0 && errno == EINTR)
			continue;   /* a checkpoint's signal: poll is never restarted */
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	if (got != len || memcmp(buf, want, len) != 0)
		zdtm_fail("%s read '%.*s' (%zu bytes), not '%s'", what, (int)got, buf, got, want);
}

static inline int zdtm_end(void)
{
	printf(zdtm_failed ? "FAIL\n" : "PASS\n");
	fflush(stdout);
	return zdtm_failed;
}

#endif

/* sigfd.c - a signalfd keeps its mask across checkpoint/restart, and a
 * signal pending at the checkpoint is still read from it after a restart. */
#include "zdtm.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

/* The sigmask line of fd's fdinfo, as the kernel shows it. */
static void mask_text(int fd, char *out, size_t len)
{
	char path[64], buf[1024];
	const char *m;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
	f = fopen(path, "r");
	n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
	if (f)
		fclose(f);
	buf[n] = 0;
	m = strstr(buf, "sigmask:");
	snprintf(out, len, "%.*s", m ? (int)strcspn(m, "\n") : 0, m ? m : "");
}

int main(void)
{
	struct signalfd_siginfo si;
	char before[64], after[64];
	sigset_t mask;
	int fd;

	sigemptyset(&mask);
	sigaddset(&mask, SIGUSR1);
	sigaddset(&mask, SIGUSR2);
	sigaddset(&mask, SIGRTMIN + 2);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	sigdelset(&mask, SIGUSR2);   /* blocked, but not the signalfd's */
	fd = signalfd(-1, &mask, SFD_NONBLOCK);
	if (fd < 0) {
		zdtm_fail("signalfd: %s", strerror(errno));
		return zdtm_end();
	}
	mask_text(fd, before, sizeof(before));
	kill(getpid(), SIGUSR1);       /* pending across every restart */
	kill(getpid(), SIGUSR2);
	zdtm_ready();

	mask_text(fd, after, sizeof(after));
	if (strcmp(before, after) != 0 || !*after)
		zdtm_fail("mask '%s' after the restart, '%s' before", after, before);
	if (read(fd, &si, sizeof(si)) != sizeof(si) || si.ssi_signo != SIGUSR1)
		zdtm_fail("the pending SIGUSR1 is not read from the signalfd");
	if (read(fd, &si, sizeof(si)) != -1 || errno != EAGAIN)
		zdtm_fail("the signalfd lost O_NONBLOCK or reads a signal not in its mask");
	kill(getpid(), SIGRTMIN + 2);
	if (read(fd, &si, sizeof(si)) != sizeof(si) || si.ssi_signo != (unsigned)SIGRTMIN + 2)
		zdtm_fail("a signal sent after the restart is not read");
	sigpending(&mask);
	if (!sigismember(&mask, SIGUSR2))
		zdtm_fail("the pending SIGUSR2 is lost");
	return zdtm_end();
}

/* fd_signalfd.c - a signalfd: its mask from its fdinfo text, made again at
 * a restart. The signals pending at the checkpoint are the process's and
 * its threads' (restored with them), so a read after the restart still
 * takes them. */
#include "proc/fd_ops.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/signalfd.h>
#include <unistd.h>

static int signalfd_reopen(const struct proc_fd_entry *v, size_t n, size_t i, int floor)
{
	const struct proc_fd_entry *f = &v[i];
	const char *m = proc_fd_info_field(f, "sigmask:");
	unsigned long long bits;
	sigset_t mask;
	int fd;

	(void)n;
	if (!m)
		return proc_fd_error(f, "cannot read the saved mask of signalfd", EINVAL);
	bits = strtoull(m, NULL, 16);
	sigemptyset(&mask);
	for (int sig = 1; sig <= 64; sig++)
		if (bits & (1ull << (sig - 1)))
			sigaddset(&mask, sig);
	fd = signalfd(-1, &mask, SFD_CLOEXEC | (f->rec.flags & O_NONBLOCK ? SFD_NONBLOCK : 0));
	if (fd < 0)
		return proc_fd_error(f, "cannot recreate signalfd", errno);
	return proc_fd_place(f, proc_fd_move_high(fd, floor));
}

const struct proc_fd_ops proc_fd_signalfd_ops = {
	.describe = proc_fd_describe_fdinfo,
	.reopen = signalfd_reopen,
};

/* fd_epoll.c - an epoll set: its watches (one tfd/events/data line each in
 * its fdinfo text) added again once every other descriptor is in place. */
#include "proc/fd_ops.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

static int epoll_reopen(const struct proc_fd_entry *v, size_t n, size_t i, int floor)
{
	int fd = epoll_create1(EPOLL_CLOEXEC);

	(void)n;
	if (fd < 0)
		return proc_fd_error(&v[i], "cannot recreate epoll", errno);
	return proc_fd_place(&v[i], proc_fd_move_high(fd, floor));
}

static int epoll_finish(const struct proc_fd_entry *v, size_t n, size_t i)
{
	const struct proc_fd_entry *f = &v[i];
	const char *text = f->data, *end = text + f->rec.data_len;

	for (const char *l = text; l && l < end;) {
		int tfd;
		unsigned events;
		unsigned long long data;

		(void)n;
		if (sscanf(l, "tfd: %d events: %x data: %llx", &tfd, &events, &data) == 3) {
			struct epoll_event ev = { events & ~(unsigned)EPOLLWAKEUP, { .u64 = data } };

			if (epoll_ctl(f->rec.fd, EPOLL_CTL_ADD, tfd, &ev) != 0)
				return proc_fd_error(f, "cannot add a watch to epoll", errno);
		}
		l = memchr(l, '\n', (size_t)(end - l));
		if (l)
			l++;
	}
	return 0;
}

const struct proc_fd_ops proc_fd_epoll_ops = {
	.describe = proc_fd_describe_fdinfo,
	.reopen = epoll_reopen,
	.finish = epoll_finish,
};

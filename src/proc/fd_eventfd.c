/* fd_eventfd.c - an eventfd: its count and semaphore mode from its fdinfo
 * text, written into a new one at a restart. */
#include "proc/fd_ops.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

static int eventfd_reopen(const struct proc_fd_entry *v, size_t n, size_t i, int floor)
{
	const struct proc_fd_entry *f = &v[i];
	const char *c = proc_fd_info_field(f, "eventfd-count:");
	const char *sem = proc_fd_info_field(f, "eventfd-semaphore:");
	unsigned long long count = c ? strtoull(c, NULL, 16) : 0;
	int flags = EFD_CLOEXEC | (f->rec.flags & O_NONBLOCK ? EFD_NONBLOCK : 0);
	int fd;

	(void)n;
	if (sem && strtol(sem, NULL, 10) == 1)
		flags |= EFD_SEMAPHORE;
	fd = eventfd(0, flags);
	if (fd < 0)
		return proc_fd_error(f, "cannot recreate eventfd", errno);
	if (count) {
		uint64_t val = count;

		if (write(fd, &val, sizeof(val)) != sizeof(val)) {
			close(fd);
			return proc_fd_error(f, "cannot set the eventfd's count", errno);
		}
	}
	return proc_fd_place(f, proc_fd_move_high(fd, floor));
}

const struct proc_fd_ops proc_fd_eventfd_ops = {
	.describe = proc_fd_describe_fdinfo,
	.reopen = eventfd_reopen,
};

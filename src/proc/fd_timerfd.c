/* fd_timerfd.c - a timerfd: clock, time to the next expiry and interval
 * from its fdinfo text, armed again relative to the restart. */
#include "proc/fd_ops.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/timerfd.h>
#include <unistd.h>

static int timerfd_reopen(const struct proc_fd_entry *v, size_t n, size_t i, int floor)
{
	const struct proc_fd_entry *f = &v[i];
	const char *clk = proc_fd_info_field(f, "clockid:");
	const char *val = proc_fd_info_field(f, "it_value:");
	const char *ivl = proc_fd_info_field(f, "it_interval:");
	struct itimerspec its = { { 0, 0 }, { 0, 0 } };
	long long vs = 0, vn = 0, is = 0, in = 0;
	int fd;

	(void)n;
	if (!clk || !val || !ivl || sscanf(val, " (%lld, %lld)", &vs, &vn) != 2 ||
	    sscanf(ivl, " (%lld, %lld)", &is, &in) != 2)
		return proc_fd_error(f, "cannot read the saved state of timerfd", EINVAL);
	fd = timerfd_create((int)strtol(clk, NULL, 10),
			    TFD_CLOEXEC | (f->rec.flags & O_NONBLOCK ? TFD_NONBLOCK : 0));
	if (fd < 0)
		return proc_fd_error(f, "cannot recreate timerfd", errno);
	its.it_value.tv_sec = vs;
	its.it_value.tv_nsec = vn;
	its.it_interval.tv_sec = is;
	its.it_interval.tv_nsec = in;
	if (!vs && !vn && (is || in))
		its.it_value.tv_nsec = 1;   /* a periodic timer that just expired is still running */
	if (timerfd_settime(fd, 0, &its, NULL) != 0) {
		close(fd);
		return proc_fd_error(f, "cannot set timerfd", errno);
	}
	return proc_fd_place(f, proc_fd_move_high(fd, floor));
}

const struct proc_fd_ops proc_fd_timerfd_ops = {
	.describe = proc_fd_describe_fdinfo,
	.reopen = timerfd_reopen,
};

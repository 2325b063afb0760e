/* fds.c - descriptors described at a checkpoint and opened again at a
 * restart, for both process checkpointers (fds.h): the common part of a
 * record here, the rest by the kind's table of operations (fd_ops.h). */
#include "proc/fd_ops.h"

#include "common/err.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const struct proc_fd_ops *const kinds[] = {
	[PROC_FD_FILE] = &proc_fd_file_ops,
	[PROC_FD_UNLINKED] = &proc_fd_unlinked_ops,
	[PROC_FD_DIR] = &proc_fd_file_ops,
	[PROC_FD_CHAR] = &proc_fd_file_ops,
	[PROC_FD_PIPE_READ] = &proc_fd_pipe_ops,
	[PROC_FD_PIPE_WRITE] = &proc_fd_pipe_ops,
	[PROC_FD_EVENTFD] = &proc_fd_eventfd_ops,
	[PROC_FD_TIMERFD] = &proc_fd_timerfd_ops,
	[PROC_FD_EPOLL] = &proc_fd_epoll_ops,
	[PROC_FD_SIGNALFD] = &proc_fd_signalfd_ops,
	[PROC_FD_INOTIFY] = &proc_fd_inotify_ops,
	[PROC_FD_SOCKET] = &proc_fd_socket_ops,
	[PROC_FD_PTY] = &proc_fd_pty_ops,
	[PROC_FD_FILE_SAVED] = &proc_fd_file_ops,
};

const struct proc_fd_ops *proc_fd_ops_of(uint32_t kind)
{
	return kind < sizeof(kinds) / sizeof(kinds[0]) ? kinds[kind] : NULL;
}

int proc_fds_unsupported(const struct proc_fd_entry *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint32_t k = v[i].rec.kind;
		const struct proc_fd_ops *ops = proc_fd_ops_of(k);

		if (k == PROC_FD_STDIO)
			continue;
		if (!ops || (ops->alone && ops->alone(v, n, i)))
			return (int)i;
	}
	return -1;
}

int proc_fd_describe(int fd, struct proc_fd_entry *e, const struct proc_fd_entry *v, size_t n)
{
	char link[40], target[PATH_MAX];
	const struct proc_fd_ops *ops;
	struct stat st;
	ssize_t tl;
	int flags, fdflags;

	memset(e, 0, sizeof(*e));
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	tl = readlink(link, target, sizeof(target) - 1);
	flags = fcntl(fd, F_GETFL);
	fdflags = fcntl(fd, F_GETFD);
	if (tl < 0 || flags < 0 || fdflags < 0 || fstat(fd, &st) != 0)
		return -EBADF;
	target[tl] = 0;
	e->path = strdup(target);
	if (!e->path)
		return err_set(-ENOMEM, "out of memory");
	e->rec.fd = fd;
	e->rec.flags = (uint32_t)flags;
	e->rec.cloexec = (fdflags & FD_CLOEXEC) != 0;
	e->rec.mode = st.st_mode;
	e->rec.ino = st.st_ino;
	e->rec.dev = st.st_dev;
	e->rec.path_len = (uint32_t)tl + 1;
	e->rec.kind = fd <= 2 ? PROC_FD_STDIO : proc_fd_kind(st.st_mode, target, flags);
	ops = proc_fd_ops_of(e->rec.kind);
	return ops && ops->describe ? ops->describe(fd, e, &st, v, n) : 0;
}

int proc_fds_check(const struct proc_fd_entry *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const struct proc_fd_ops *ops = proc_fd_ops_of(v[i].rec.kind);
		int ret = ops && ops->check ? ops->check(&v[i]) : 0;

		if (ret)
			return ret;
	}
	return 0;
}

int proc_fds_reopen(const struct proc_fd_entry *v, size_t n, int floor)
{
	int ret = proc_fds_open(v, n, floor);

	return ret ? ret : proc_fds_finish(v, n);
}

int proc_fds_open(const struct proc_fd_entry *v, size_t n, int floor)
{
	int ret = 0;

	for (size_t i = 0; !ret && i < n; i++) {
		const struct proc_fd_ops *ops = proc_fd_ops_of(v[i].rec.kind);

		if (ops && ops->reopen)
			ret = ops->reopen(v, n, i, floor);
	}
	return ret;
}

int proc_fds_finish(const struct proc_fd_entry *v, size_t n)
{
	int ret = 0;

	for (size_t i = 0; !ret && i < n; i++) {
		const struct proc_fd_ops *ops = proc_fd_ops_of(v[i].rec.kind);

		if (ops && ops->finish)
			ret = ops->finish(v, n, i);
	}
	return ret;
}

void proc_fds_free(struct proc_fd_entry *v, size_t n)
{
	for (size_t i = 0; v && i < n; i++) {
		free(v[i].path);
		free(v[i].data);
	}
	free(v);
}

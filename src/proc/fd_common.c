/* fd_common.c - what the descriptor kinds' files (fd_*.c) share: reading
 * /proc/self/fdinfo, placing a reopened descriptor at its number, one-line
 * errors. fds.c dispatches to the kinds through their tables; the kinds
 * call only this file, so the calls run one way: fds.c -> fd_*.c ->
 * fd_common.c. */
#include "proc/fd_ops.h"

#include "common/err.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

uint64_t proc_fd_save_max;

int proc_fd_read_fdinfo(int fd, struct proc_fd_entry *e)
{
	char path[40], buf[8192];
	ssize_t len;
	int f;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
	f = open(path, O_RDONLY | O_CLOEXEC);
	if (f < 0)
		return err_set(-errno, "cannot read %s: %s", path, strerror(errno));
	len = read(f, buf, sizeof(buf));
	close(f);
	if (len < 0)
		return err_set(-EIO, "cannot read %s", path);
	e->data = malloc((size_t)len + 1);
	if (!e->data)
		return err_set(-ENOMEM, "out of memory");
	memcpy(e->data, buf, (size_t)len);
	e->rec.data_len = (uint64_t)len;
	return 0;
}

int proc_fd_describe_fdinfo(int fd, struct proc_fd_entry *e, const struct stat *st,
			    const struct proc_fd_entry *v, size_t n)
{
	(void)st;
	(void)v;
	(void)n;
	return proc_fd_read_fdinfo(fd, e);
}

int proc_fd_error(const struct proc_fd_entry *f, const char *what, int err)
{
	return err_set(-err, "%s %s (fd %d): %s", what, f->path, f->rec.fd, strerror(err));
}

int proc_fd_move_high(int fd, int floor)
{
	int n = fcntl(fd, F_DUPFD_CLOEXEC, floor);
	int e = errno;

	close(fd);
	return n < 0 ? -e : n;
}

int proc_fd_place(const struct proc_fd_entry *f, int from)
{
	if (from < 0)
		return from;
	if (dup2(from, f->rec.fd) < 0) {
		int e = errno;

		close(from);
		return proc_fd_error(f, "cannot place", e);
	}
	close(from);   /* dup2 leaves the number open across exec: the caller sets it */
	return 0;
}

const char *proc_fd_info_field(const struct proc_fd_entry *f, const char *key)
{
	const char *text = f->data;
	size_t klen = strlen(key);

	for (const char *l = text; l && l < text + f->rec.data_len;) {
		if ((size_t)(text + f->rec.data_len - l) > klen && strncmp(l, key, klen) == 0)
			return l + klen;
		l = memchr(l, '\n', (size_t)(text + f->rec.data_len - l));
		if (l)
			l++;
	}
	return NULL;
}

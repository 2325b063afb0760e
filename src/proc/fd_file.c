/* fd_file.c - descriptors reopened by path: regular files at their offset
 * (one written since the checkpoint cut back to its size then), directories,
 * character devices; and regular files deleted while open, whose contents
 * the image holds and a restart puts in an O_TMPFILE of their directory. */
#include "proc/fd_ops.h"

#include "common/err.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int read_whole(int fd, off_t from, size_t len, void **out)
{
	char *buf = malloc(len ? len : 1);
	size_t got = 0;

	if (!buf)
		return err_set(-ENOMEM, "out of memory");
	while (got < len) {
		ssize_t r = pread(fd, buf + got, len - got, from + (off_t)got);

		if (r <= 0) {   /* shrank under us: the record's size is what counts */
			memset(buf + got, 0, len - got);
			break;
		}
		got += (size_t)r;
	}
	*out = buf;
	return 0;
}

static int file_describe(int fd, struct proc_fd_entry *e, const struct stat *st,
			 const struct proc_fd_entry *v, size_t n)
{
	char link[40];
	off_t off;
	int r, ret;

	(void)v;
	(void)n;
	if (e->rec.kind != PROC_FD_FILE && e->rec.kind != PROC_FD_DIR)
		return 0;
	off = lseek(fd, 0, SEEK_CUR);
	e->rec.offset = off < 0 ? 0 : (uint64_t)off;
	e->rec.size = (uint64_t)st->st_size;
	if (e->rec.kind != PROC_FD_FILE || st->st_nlink != 0)
		return 0;
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	r = open(link, O_RDONLY | O_CLOEXEC);
	if (r < 0)
		return err_set(-errno, "cannot read the unlinked file %s (fd %d): %s",
			       e->path, fd, strerror(errno));
	e->rec.kind = PROC_FD_UNLINKED;
	e->rec.data_len = e->rec.size;
	ret = read_whole(r, 0, e->rec.size, &e->data);
	close(r);
	return ret;
}

static int file_check(const struct proc_fd_entry *f)
{
	struct stat st;

	if (stat(f->path, &st) != 0)
		return err_set(-ENOENT, "file %s (fd %d) is missing", f->path, f->rec.fd);
	if (f->rec.kind == PROC_FD_FILE && (uint64_t)st.st_size < f->rec.size)
		return err_set(-ESTALE, "file %s (fd %d) shrank since the checkpoint (%llu < %llu bytes)",
			       f->path, f->rec.fd, (unsigned long long)st.st_size,
			       (unsigned long long)f->rec.size);
	return 0;
}

static int seek_back(const struct proc_fd_entry *f)
{
	if (f->rec.kind != PROC_FD_CHAR && lseek(f->rec.fd, (off_t)f->rec.offset, SEEK_SET) < 0)
		return proc_fd_error(f, "cannot seek", errno);
	return 0;
}

/* A file reopened by path; one the program writes cut back to its size at
 * the checkpoint if it grew since. */
static int file_reopen(const struct proc_fd_entry *v, size_t n, size_t i, int floor)
{
	const struct proc_fd_entry *f = &v[i];
	int flags = (int)(f->rec.flags & ~(uint32_t)(O_CREAT | O_EXCL | O_TRUNC | O_CLOEXEC));
	int fd = open(f->path, flags | O_NOCTTY | O_CLOEXEC), ret;
	struct stat st;

	(void)n;
	if (fd < 0)
		return proc_fd_error(f, "cannot reopen", errno);
	if (f->rec.kind == PROC_FD_FILE && (f->rec.flags & O_ACCMODE) != O_RDONLY &&
	    fstat(fd, &st) == 0 && (uint64_t)st.st_size > f->rec.size &&
	    ftruncate(fd, (off_t)f->rec.size) != 0) {
		int e = errno;

		close(fd);
		return proc_fd_error(f, "cannot cut back to its size at the checkpoint", e);
	}
	ret = proc_fd_place(f, proc_fd_move_high(fd, floor));
	return ret ? ret : seek_back(f);
}

/* An unlinked file again: an O_TMPFILE in its directory with its bytes. */
static int unlinked_open(const struct proc_fd_entry *f, int floor)
{
	char dir[PATH_MAX], self[64];
	char *slash, *del;
	int fd, acc = (int)(f->rec.flags & O_ACCMODE), ret;

	snprintf(dir, sizeof(dir), "%s", f->path);
	del = strstr(dir, " (deleted)");
	if (del)
		*del = 0;
	slash = strrchr(dir, '/');
	if (slash)
		*(slash == dir ? slash + 1 : slash) = 0;
	fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, f->rec.mode & 07777);
	if (fd < 0)
		return proc_fd_error(f, "cannot recreate the unlinked file", errno);
	for (uint64_t off = 0; off < f->rec.data_len;) {
		ssize_t n = pwrite(fd, (const char *)f->data + off, f->rec.data_len - off, (off_t)off);

		if (n <= 0) {
			close(fd);
			return proc_fd_error(f, "cannot write the unlinked file", n < 0 ? errno : EIO);
		}
		off += (uint64_t)n;
	}
	if (acc == O_RDWR)
		return proc_fd_move_high(fd, floor);
	snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
	ret = open(self, acc | O_CLOEXEC | (int)(f->rec.flags & (O_APPEND | O_NONBLOCK)));
	close(fd);
	if (ret < 0)
		return proc_fd_error(f, "cannot reopen the unlinked file", errno);
	return proc_fd_move_high(ret, floor);
}

static int unlinked_reopen(const struct proc_fd_entry *v, size_t n, size_t i, int floor)
{
	int ret = proc_fd_place(&v[i], unlinked_open(&v[i], floor));

	(void)n;
	return ret ? ret : seek_back(&v[i]);
}

const struct proc_fd_ops proc_fd_file_ops = {
	.describe = file_describe,
	.check = file_check,
	.reopen = file_reopen,
};

const struct proc_fd_ops proc_fd_unlinked_ops = {
	.reopen = unlinked_reopen,
};

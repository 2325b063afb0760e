/* fd_file.c - descriptors reopened by path: regular files at their offset
 * (one written since the checkpoint cut back to its size then), directories,
 * character devices; and regular files deleted while open, whose contents
 * the image holds and a restart puts in an O_TMPFILE of their directory;
 * and regular files open for reading and writing, up to proc_fd_save_max
 * bytes, whose contents the image holds and a restart writes back where
 * they differ (a file updated in place and read back, as a database is).
 *
 * The locks a regular file's descriptor holds (flock, POSIX fcntl, open
 * file description locks: the "lock:" lines of its fdinfo) are its data;
 * a restart takes them again once every descriptor is in place (a POSIX
 * lock goes when any descriptor of its file is closed), without waiting:
 * one another process took meanwhile fails the restart. */
#include "proc/fd_ops.h"

#include "common/err.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
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

/* Keep only the "lock:" lines of fd's fdinfo text (not the "->" ones of a
 * lock waited for) as e's data. */
static int file_locks(int fd, struct proc_fd_entry *e)
{
	char *text, *out, *end;
	int ret = proc_fd_read_fdinfo(fd, e);

	if (ret)
		return ret;
	text = e->data;
	end = text + e->rec.data_len;
	out = text;
	for (char *l = text; l < end;) {
		char *nl = memchr(l, '\n', (size_t)(end - l));
		size_t len = (size_t)((nl ? nl + 1 : end) - l);

		if (len > 6 && strncmp(l, "lock:\t", 6) == 0 && !memmem(l, len, "->", 2)) {
			memmove(out, l, len);
			out += len;
		}
		l += len;
	}
	e->rec.data_len = (uint64_t)(out - text);
	if (!e->rec.data_len) {
		free(e->data);
		e->data = NULL;
	}
	return 0;
}

/* e's data: the file's size bytes, then its lock lines. */
static int file_save(int fd, struct proc_fd_entry *e)
{
	void *bytes = NULL;
	char *all;
	int ret;

	if (e->rec.size > proc_fd_save_max)
		return err_set(-EFBIG, "the program's fd %d holds %llu bytes, over file_save_max "
			       "(%llu), open for reading and writing: %s (raise it, or set it to 0 "
			       "to restart with the file as it will be then)", e->rec.fd,
			       (unsigned long long)e->rec.size,
			       (unsigned long long)proc_fd_save_max, e->path);
	ret = read_whole(fd, 0, e->rec.size, &bytes);
	ret = ret ? ret : file_locks(fd, e);
	if (ret) {
		free(bytes);
		return ret;
	}
	all = realloc(bytes, e->rec.size + e->rec.data_len + 1);
	if (!all) {
		free(bytes);
		return err_set(-ENOMEM, "out of memory");
	}
	if (e->rec.data_len)
		memcpy(all + e->rec.size, e->data, e->rec.data_len);
	free(e->data);
	e->data = all;
	e->rec.data_len += e->rec.size;
	e->rec.kind = PROC_FD_FILE_SAVED;
	return 0;
}

/* The lock lines of a regular file's record, *len bytes ("" for none). */
static const char *lock_text(const struct proc_fd_entry *f, size_t *len)
{
	uint64_t skip = f->rec.kind == PROC_FD_FILE_SAVED ? f->rec.size : 0;

	*len = f->data && f->rec.data_len > skip ? (size_t)(f->rec.data_len - skip) : 0;
	return *len ? (const char *)f->data + skip : "";
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
	if (e->rec.kind != PROC_FD_FILE)
		return 0;
	if (st->st_nlink != 0 && (e->rec.flags & O_ACCMODE) == O_RDWR && proc_fd_save_max)
		return file_save(fd, e);
	if (st->st_nlink != 0)
		return file_locks(fd, e);
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

	if (stat(f->path, &st) != 0 && !(errno == ENOENT && f->rec.kind == PROC_FD_FILE_SAVED))
		return err_set(-ENOENT, "file %s (fd %d) is missing", f->path, f->rec.fd);
	if (f->rec.kind == PROC_FD_FILE_SAVED)
		return 0;   /* made again from its contents if missing (file_reopen) */
	if (f->rec.kind == PROC_FD_FILE && (uint64_t)st.st_size < f->rec.size)
		return err_set(-ESTALE, "file %s (fd %d) shrank since the checkpoint (%llu < %llu bytes)",
			       f->path, f->rec.fd, (unsigned long long)st.st_size,
			       (unsigned long long)f->rec.size);
	return 0;
}

/* Put a saved file's contents back: only the pieces that differ are
 * written (ranks or processes that share the file write the same bytes,
 * and an unchanged file is only read), then its size. */
int proc_file_contents_back(int fd, const void *data, uint64_t size)
{
	enum { PIECE = 1 << 20 };
	const char *want = data;
	char *buf = malloc(PIECE);
	struct stat st;

	if (!buf)
		return -ENOMEM;
	for (uint64_t off = 0; off < size; off += PIECE) {
		size_t len = size - off < PIECE ? (size_t)(size - off) : PIECE;
		ssize_t got = pread(fd, buf, len, (off_t)off);

		if (got == (ssize_t)len && memcmp(buf, want + off, len) == 0)
			continue;
		for (size_t done = 0; done < len;) {
			ssize_t w = pwrite(fd, want + off + done, len - done, (off_t)(off + done));

			if (w <= 0) {
				free(buf);
				return w < 0 ? -errno : -EIO;
			}
			done += (size_t)w;
		}
	}
	free(buf);
	if (fstat(fd, &st) != 0 ||
	    ((uint64_t)st.st_size != size && ftruncate(fd, (off_t)size) != 0))
		return -errno;
	return 0;
}

static int seek_back(const struct proc_fd_entry *f)
{
	if (f->rec.kind != PROC_FD_CHAR && lseek(f->rec.fd, (off_t)f->rec.offset, SEEK_SET) < 0)
		return proc_fd_error(f, "cannot seek", errno);
	return 0;
}

/* A file reopened by path; one the program writes cut back to its size at
 * the checkpoint if it grew since. One whose contents were saved is made
 * again with its mode if it is missing: a temporary file written and then
 * renamed over another (mkstemp), open at the checkpoint, is gone from
 * its path at a restart after the rename. */
static int file_reopen(const struct proc_fd_entry *v, size_t n, size_t i, int floor)
{
	const struct proc_fd_entry *f = &v[i];
	int flags = (int)(f->rec.flags & ~(uint32_t)(O_CREAT | O_EXCL | O_TRUNC | O_CLOEXEC));
	int create = f->rec.kind == PROC_FD_FILE_SAVED ? O_CREAT : 0;
	int fd = open(f->path, flags | create | O_NOCTTY | O_CLOEXEC, (mode_t)(f->rec.mode & 07777)), ret;
	struct stat st;

	(void)n;
	if (fd < 0)
		return proc_fd_error(f, "cannot reopen", errno);
	if (f->rec.kind == PROC_FD_FILE_SAVED &&
	    (ret = proc_file_contents_back(fd, f->data, f->rec.size)) != 0) {
		close(fd);
		return proc_fd_error(f, "cannot write back the contents of", -ret);
	}
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

/* Does an earlier descriptor of v of the same file hold the lock of line
 * l (of len bytes)? An flock or open file description lock is taken once:
 * the restart's descriptors are each their own open file description. */
static int taken_before(const struct proc_fd_entry *v, size_t i, const char *l, size_t len)
{
	for (size_t k = 0; k < i; k++) {
		size_t tlen;
		const char *text = lock_text(&v[k], &tlen);

		if ((v[k].rec.kind == PROC_FD_FILE || v[k].rec.kind == PROC_FD_FILE_SAVED) &&
		    v[k].rec.dev == v[i].rec.dev && v[k].rec.ino == v[i].rec.ino && tlen &&
		    memmem(text, tlen, l, len))
			return 1;
	}
	return 0;
}

/* "lock:\t1: POSIX  ADVISORY  WRITE 3079 fe:00:5310245 5 14" */
static int take_lock(const struct proc_fd_entry *v, size_t i, const char *l, size_t len)
{
	const struct proc_fd_entry *f = &v[i];
	char type[16], mode[16], rw[16], last[24];
	long long start;
	struct flock fl;
	int id, pid, r;

	if (sscanf(l, "lock:\t%d: %15s %15s %15s %d %*s %lld %23s", &id, type, mode, rw, &pid,
		   &start, last) != 7)
		return proc_fd_error(f, "cannot read a saved lock of", EINVAL);
	if (strcmp(type, "POSIX") != 0 && taken_before(v, i, l, len))
		return 0;
	if (strcmp(type, "FLOCK") == 0) {
		r = flock(f->rec.fd, (strcmp(rw, "READ") == 0 ? LOCK_SH : LOCK_EX) | LOCK_NB);
	} else {
		memset(&fl, 0, sizeof(fl));
		fl.l_type = strcmp(rw, "READ") == 0 ? F_RDLCK : F_WRLCK;
		fl.l_whence = SEEK_SET;
		fl.l_start = start;
		fl.l_len = strcmp(last, "EOF") == 0 ? 0 : atoll(last) - start + 1;
		r = fcntl(f->rec.fd, strcmp(type, "OFDLCK") == 0 ? F_OFD_SETLK : F_SETLK, &fl);
	}
	if (r != 0)
		return err_set(-errno, "cannot take back the %s lock on %s (fd %d): %s", type, f->path,
			       f->rec.fd, errno == EAGAIN || errno == EWOULDBLOCK || errno == EACCES
			       ? "another process holds it now" : strerror(errno));
	return 0;
}

static int file_finish(const struct proc_fd_entry *v, size_t n, size_t i)
{
	size_t tlen;
	const char *text = lock_text(&v[i], &tlen), *end = text + tlen;
	int ret = 0;

	(void)n;
	if (v[i].rec.kind != PROC_FD_FILE && v[i].rec.kind != PROC_FD_FILE_SAVED)
		return 0;
	for (const char *l = text; !ret && l && l < end;) {
		const char *nl = memchr(l, '\n', (size_t)(end - l));
		size_t len = (size_t)((nl ? nl : end) - l);

		ret = take_lock(v, i, l, len);
		l = nl ? nl + 1 : NULL;
	}
	return ret;
}

const struct proc_fd_ops proc_fd_file_ops = {
	.describe = file_describe,
	.check = file_check,
	.reopen = file_reopen,
	.finish = file_finish,
};

const struct proc_fd_ops proc_fd_unlinked_ops = {
	.reopen = unlinked_reopen,
};

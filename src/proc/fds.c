/* fds.c - descriptors described at a checkpoint and opened again at a
 * restart, for both process checkpointers (fds.h). */
#include "proc/fds.h"

#include "common/err.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#define PIPE_PEEK_MAX (1u << 20)

static int is_pipe(uint32_t kind)
{
	return kind == PROC_FD_PIPE_READ || kind == PROC_FD_PIPE_WRITE;
}

static int pipe_end(const struct proc_fd_entry *v, size_t n, uint64_t ino, uint32_t kind)
{
	for (size_t i = 0; i < n; i++)
		if (v[i].rec.ino == ino && v[i].rec.kind == kind)
			return (int)i;
	return -1;
}

int proc_fds_unsupported(const struct proc_fd_entry *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint32_t k = v[i].rec.kind;

		if (k == PROC_FD_STDIO)
			continue;
		if (!k || (is_pipe(k) && pipe_end(v, n, v[i].rec.ino, k == PROC_FD_PIPE_READ
					   ? PROC_FD_PIPE_WRITE : PROC_FD_PIPE_READ) < 0))
			return (int)i;
	}
	return -1;
}

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

static int fdinfo(int fd, struct proc_fd_entry *e)
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

/* What a pipe holds, without taking it out: tee into a scratch pipe. */
static int pipe_peek(int fd, struct proc_fd_entry *e)
{
	int tmp[2], ret = 0;
	size_t want = e->rec.pipe_size < PIPE_PEEK_MAX ? e->rec.pipe_size : PIPE_PEEK_MAX;
	ssize_t n;

	if (pipe2(tmp, O_CLOEXEC | O_NONBLOCK) != 0)
		return err_set(-errno, "cannot read the contents of pipe fd %d: %s", fd, strerror(errno));
	if (want > 65536)
		(void)fcntl(tmp[1], F_SETPIPE_SZ, (int)want);
	n = tee(fd, tmp[1], want, SPLICE_F_NONBLOCK);
	if (n > 0) {
		e->data = malloc((size_t)n);
		if (!e->data)
			ret = err_set(-ENOMEM, "out of memory");
		else if (read(tmp[0], e->data, (size_t)n) != n)
			ret = err_set(-EIO, "cannot read the contents of pipe fd %d", fd);
		else
			e->rec.data_len = (uint64_t)n;
	} else if (n < 0 && errno != EAGAIN) {
		ret = err_set(-errno, "cannot read the contents of pipe fd %d: %s", fd, strerror(errno));
	}
	close(tmp[0]);
	close(tmp[1]);
	return ret;
}

int proc_fd_describe(int fd, struct proc_fd_entry *e, const struct proc_fd_entry *v, size_t n)
{
	char link[40], target[PATH_MAX];
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
	switch (e->rec.kind) {
	case PROC_FD_FILE:
	case PROC_FD_DIR: {
		off_t off = lseek(fd, 0, SEEK_CUR);

		e->rec.offset = off < 0 ? 0 : (uint64_t)off;
		e->rec.size = (uint64_t)st.st_size;
		if (e->rec.kind == PROC_FD_FILE && st.st_nlink == 0) {
			int r = open(link, O_RDONLY | O_CLOEXEC);
			int ret;

			if (r < 0)
				return err_set(-errno, "cannot read the unlinked file %s (fd %d): %s",
					       target, fd, strerror(errno));
			e->rec.kind = PROC_FD_UNLINKED;
			e->rec.data_len = e->rec.size;
			ret = read_whole(r, 0, e->rec.size, &e->data);
			close(r);
			return ret;
		}
		return 0;
	}
	case PROC_FD_PIPE_READ:
	case PROC_FD_PIPE_WRITE: {
		int p = fcntl(fd, F_GETPIPE_SZ);

		e->rec.pipe_size = p > 0 ? (uint32_t)p : 65536;
		/* the first read end of a pipe carries its contents */
		if (e->rec.kind == PROC_FD_PIPE_READ && pipe_end(v, n, st.st_ino, PROC_FD_PIPE_READ) < 0)
			return pipe_peek(fd, e);
		return 0;
	}
	case PROC_FD_EVENTFD:
	case PROC_FD_TIMERFD:
	case PROC_FD_EPOLL:
		return fdinfo(fd, e);
	default:
		return 0;
	}
}

int proc_fds_check(const struct proc_fd_entry *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const struct proc_fd_entry *f = &v[i];
		struct stat st;

		if (f->rec.kind != PROC_FD_FILE && f->rec.kind != PROC_FD_DIR && f->rec.kind != PROC_FD_CHAR)
			continue;
		if (stat(f->path, &st) != 0)
			return err_set(-ENOENT, "file %s (fd %d) is missing", f->path, f->rec.fd);
		if (f->rec.kind == PROC_FD_FILE && (uint64_t)st.st_size < f->rec.size)
			return err_set(-ESTALE, "file %s (fd %d) shrank since the checkpoint (%llu < %llu bytes)",
				       f->path, f->rec.fd, (unsigned long long)st.st_size,
				       (unsigned long long)f->rec.size);
	}
	return 0;
}

static int fd_error(const struct proc_fd_entry *f, const char *what, int err)
{
	return err_set(-err, "%s %s (fd %d): %s", what, f->path, f->rec.fd, strerror(err));
}

/* Move fd to floor or above (closing it), or -errno. */
static int move_high(int fd, int floor)
{
	int n = fcntl(fd, F_DUPFD_CLOEXEC, floor);
	int e = errno;

	close(fd);
	return n < 0 ? -e : n;
}

/* from (at floor or above) to its number; a file sought to its offset */
static int place(const struct proc_fd_entry *f, int from)
{
	const struct proc_fd *r = &f->rec;

	if (from < 0)
		return from;
	if (dup2(from, r->fd) < 0) {
		int e = errno;

		close(from);
		return fd_error(f, "cannot place", e);
	}
	close(from);   /* dup2 leaves r->fd open across exec: the caller sets it */
	if ((r->kind == PROC_FD_FILE || r->kind == PROC_FD_UNLINKED || r->kind == PROC_FD_DIR) &&
	    lseek(r->fd, (off_t)r->offset, SEEK_SET) < 0)
		return fd_error(f, "cannot seek", errno);
	return 0;
}

/* A file reopened by path; one the program writes cut back to its size at
 * the checkpoint if it grew since. */
static int reopen_file(const struct proc_fd_entry *f, int floor)
{
	int flags = (int)(f->rec.flags & ~(uint32_t)(O_CREAT | O_EXCL | O_TRUNC | O_CLOEXEC));
	int fd = open(f->path, flags | O_NOCTTY | O_CLOEXEC);
	struct stat st;

	if (fd < 0)
		return fd_error(f, "cannot reopen", errno);
	if (f->rec.kind == PROC_FD_FILE && (f->rec.flags & O_ACCMODE) != O_RDONLY &&
	    fstat(fd, &st) == 0 && (uint64_t)st.st_size > f->rec.size &&
	    ftruncate(fd, (off_t)f->rec.size) != 0) {
		int e = errno;

		close(fd);
		return fd_error(f, "cannot cut back to its size at the checkpoint", e);
	}
	return move_high(fd, floor);
}

/* An unlinked file again: an O_TMPFILE in its directory with its bytes. */
static int reopen_unlinked(const struct proc_fd_entry *f, int floor)
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
		return fd_error(f, "cannot recreate the unlinked file", errno);
	for (uint64_t off = 0; off < f->rec.data_len;) {
		ssize_t n = pwrite(fd, (const char *)f->data + off, f->rec.data_len - off, (off_t)off);

		if (n <= 0) {
			close(fd);
			return fd_error(f, "cannot write the unlinked file", n < 0 ? errno : EIO);
		}
		off += (uint64_t)n;
	}
	if (acc == O_RDWR)
		return move_high(fd, floor);
	snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
	ret = open(self, acc | O_CLOEXEC | (int)(f->rec.flags & (O_APPEND | O_NONBLOCK)));
	close(fd);
	if (ret < 0)
		return fd_error(f, "cannot reopen the unlinked file", errno);
	return move_high(ret, floor);
}

/* The value of "key:" in an fdinfo text, or NULL. */
static const char *fdinfo_field(const struct proc_fd_entry *f, const char *key)
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

static int reopen_eventfd(const struct proc_fd_entry *f, int floor)
{
	const char *c = fdinfo_field(f, "eventfd-count:");
	const char *sem = fdinfo_field(f, "eventfd-semaphore:");
	unsigned long long count = c ? strtoull(c, NULL, 16) : 0;
	int flags = EFD_CLOEXEC | (f->rec.flags & O_NONBLOCK ? EFD_NONBLOCK : 0);
	int fd;

	if (sem && strtol(sem, NULL, 10) == 1)
		flags |= EFD_SEMAPHORE;
	fd = eventfd(0, flags);
	if (fd < 0)
		return fd_error(f, "cannot recreate eventfd", errno);
	if (count) {
		uint64_t v = count;

		if (write(fd, &v, sizeof(v)) != sizeof(v)) {
			close(fd);
			return fd_error(f, "cannot set the eventfd's count", errno);
		}
	}
	return move_high(fd, floor);
}

static int reopen_timerfd(const struct proc_fd_entry *f, int floor)
{
	const char *clk = fdinfo_field(f, "clockid:");
	const char *val = fdinfo_field(f, "it_value:");
	const char *ivl = fdinfo_field(f, "it_interval:");
	struct itimerspec its = { { 0, 0 }, { 0, 0 } };
	long long vs = 0, vn = 0, is = 0, in = 0;
	int fd;

	if (!clk || !val || !ivl || sscanf(val, " (%lld, %lld)", &vs, &vn) != 2 ||
	    sscanf(ivl, " (%lld, %lld)", &is, &in) != 2)
		return fd_error(f, "cannot read the saved state of timerfd", EINVAL);
	fd = timerfd_create((int)strtol(clk, NULL, 10),
			    TFD_CLOEXEC | (f->rec.flags & O_NONBLOCK ? TFD_NONBLOCK : 0));
	if (fd < 0)
		return fd_error(f, "cannot recreate timerfd", errno);
	its.it_value.tv_sec = vs;
	its.it_value.tv_nsec = vn;
	its.it_interval.tv_sec = is;
	its.it_interval.tv_nsec = in;
	if (!vs && !vn && (is || in))
		its.it_value.tv_nsec = 1;   /* a periodic timer that just expired is still running */
	if (timerfd_settime(fd, 0, &its, NULL) != 0) {
		close(fd);
		return fd_error(f, "cannot set timerfd", errno);
	}
	return move_high(fd, floor);
}

/* After every other descriptor is in place: the watches of an epoll set. */
static int fill_epoll(const struct proc_fd_entry *f)
{
	const char *text = f->data, *end = text + f->rec.data_len;

	for (const char *l = text; l && l < end;) {
		int tfd;
		unsigned events;
		unsigned long long data;

		if (sscanf(l, "tfd: %d events: %x data: %llx", &tfd, &events, &data) == 3) {
			struct epoll_event ev = { events & ~(unsigned)EPOLLWAKEUP, { .u64 = data } };

			if (epoll_ctl(f->rec.fd, EPOLL_CTL_ADD, tfd, &ev) != 0)
				return fd_error(f, "cannot add a watch to epoll", errno);
		}
		l = memchr(l, '\n', (size_t)(end - l));
		if (l)
			l++;
	}
	return 0;
}

/* Every end of the pipe of v[i] (its first one in v), refilled. */
static int reopen_pipe(const struct proc_fd_entry *v, size_t n, size_t i, int floor)
{
	const struct proc_fd_entry *f = &v[i];
	int p[2], ret = 0;

	for (size_t k = 0; k < i; k++)
		if (is_pipe(v[k].rec.kind) && v[k].rec.ino == f->rec.ino)
			return 0;   /* made at its first descriptor */
	if (pipe2(p, O_CLOEXEC) != 0)
		return fd_error(f, "cannot recreate pipe", errno);
	if ((p[0] = move_high(p[0], floor)) < 0 || (p[1] = move_high(p[1], floor)) < 0) {
		if (p[0] >= 0)
			close(p[0]);
		return fd_error(f, "cannot recreate pipe", EMFILE);
	}
	if (f->rec.pipe_size > 65536)
		(void)fcntl(p[1], F_SETPIPE_SZ, (int)f->rec.pipe_size);
	for (size_t k = i; !ret && k < n; k++) {
		const struct proc_fd_entry *g = &v[k];

		if (is_pipe(g->rec.kind) && g->rec.ino == f->rec.ino && g->data && g->rec.data_len &&
		    write(p[1], g->data, g->rec.data_len) != (ssize_t)g->rec.data_len)
			ret = fd_error(g, "cannot refill pipe", errno);
	}
	for (size_t k = i; !ret && k < n; k++) {
		const struct proc_fd_entry *g = &v[k];

		if (!is_pipe(g->rec.kind) || g->rec.ino != f->rec.ino)
			continue;
		if (dup2(g->rec.kind == PROC_FD_PIPE_READ ? p[0] : p[1], g->rec.fd) < 0) {
			ret = fd_error(g, "cannot place pipe", errno);
			break;
		}
		(void)fcntl(g->rec.fd, F_SETFL, (int)(g->rec.flags & O_NONBLOCK));
	}
	close(p[0]);
	close(p[1]);
	return ret;
}

int proc_fds_reopen(const struct proc_fd_entry *v, size_t n, int floor)
{
	int ret = 0;

	for (size_t i = 0; !ret && i < n; i++) {
		const struct proc_fd_entry *f = &v[i];

		switch (f->rec.kind) {
		case PROC_FD_FILE:
		case PROC_FD_DIR:
		case PROC_FD_CHAR:
			ret = place(f, reopen_file(f, floor));
			break;
		case PROC_FD_UNLINKED:
			ret = place(f, reopen_unlinked(f, floor));
			break;
		case PROC_FD_EVENTFD:
			ret = place(f, reopen_eventfd(f, floor));
			break;
		case PROC_FD_TIMERFD:
			ret = place(f, reopen_timerfd(f, floor));
			break;
		case PROC_FD_EPOLL: {
			int fd = epoll_create1(EPOLL_CLOEXEC);

			ret = fd < 0 ? fd_error(f, "cannot recreate epoll", errno)
				     : place(f, move_high(fd, floor));
			break;
		}
		case PROC_FD_PIPE_READ:
		case PROC_FD_PIPE_WRITE:
			ret = reopen_pipe(v, n, i, floor);
			break;
		default:
			break;   /* stdio: the restart's own */
		}
	}
	for (size_t i = 0; !ret && i < n; i++)
		if (v[i].rec.kind == PROC_FD_EPOLL)
			ret = fill_epoll(&v[i]);
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

/* lh_fds.c - the two halves share one descriptor table; the upper half's
 * descriptors are saved and opened again at a restart (docs/split.md, "The
 * upper half's descriptors").
 *
 * Which half a descriptor belongs to is known from the lower side: every
 * descriptor the lower half has when it starts (the launcher's), every one
 * its libraries create later through libc's entry points (this executable
 * defines them ahead of libc for MPI, its plugins and Stasis's own code:
 * open, socket, pipe, accept, eventfd, fopen, ...), and every one it has
 * when it enters the upper half (those libc made inside other calls) is
 * the lower half's, remembered with its device and inode so that a number
 * the lower half closed and the upper half reused is not taken for it.
 * Everything else is the program's: at a checkpoint each is described by
 * src/proc/fds.c, as in the single-process mode, and one it cannot save
 * fails the checkpoint, naming it.
 *
 * The lower half's descriptors are moved to LH_FD_BASE and above as they
 * are created (below 1024: Open MPI's runtime and libevent call select()),
 * so the program numbers its files from 3 up as it would natively, and at
 * a restart its numbers are free: a fresh lower half of either MPI, under
 * another launcher, keeps its own out of the way (MPICH's Hydra leaves a
 * dozen pipes and sockets in every rank: they are moved at start, with
 * PMI_FD and HYDI_CONTROL_FD following them).
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/config.h"
#include "common/err.h"
#include "common/libc_next.h"
#include "image/image.h"
#include "lh.h"
#include "lh_fds.h"

#define MAX_FD 65536

static struct {
	uint64_t dev, ino;
} lower[MAX_FD];
static unsigned char is_lower[MAX_FD];

static int (*real_fcntl)(int, int, ...);
static int (*real_close)(int);

static void resolve(void)
{
	if (!real_fcntl) {
		real_close = (int (*)(int))dlsym(RTLD_NEXT, "close");
		real_fcntl = (int (*)(int, int, ...))dlsym(RTLD_NEXT, "fcntl");
	}
}

void lh_fd_mine(int fd)
{
	struct stat st;

	if (fd < 0 || fd >= MAX_FD || fstat(fd, &st) != 0)
		return;
	lower[fd].dev = st.st_dev;
	lower[fd].ino = st.st_ino;
	__atomic_store_n(&is_lower[fd], 1, __ATOMIC_RELEASE);
}

/* fd at LH_FD_BASE or above if there is room below 1024; the number it
 * ends at, remembered as the lower half's */
int lh_fd_take(int fd)
{
	int flags, n;

	if (fd < 0)
		return fd;
	resolve();
	if (fd < LH_FD_BASE && (flags = real_fcntl(fd, F_GETFD)) >= 0) {
		n = real_fcntl(fd, (flags & FD_CLOEXEC) ? F_DUPFD_CLOEXEC : F_DUPFD, LH_FD_BASE);
		if (n >= 0 && n < 1024) {
			real_close(fd);
			fd = n;
		} else if (n >= 0) {
			real_close(n);
		}
	}
	lh_fd_mine(fd);
	return fd;
}

static int lh_fd_lower(int fd)
{
	struct stat st;

	return fd >= 0 && fd < MAX_FD && __atomic_load_n(&is_lower[fd], __ATOMIC_ACQUIRE) &&
	       fstat(fd, &st) == 0 && (uint64_t)st.st_dev == lower[fd].dev &&
	       (uint64_t)st.st_ino == lower[fd].ino;
}

/* ---- libc's entry points, for the lower half ---- */

#define OPEN_LIKE(fn, sym)                                                  \
	int fn(const char *path, int flags, ...)                            \
	{                                                                   \
		va_list ap;                                                 \
		mode_t mode;                                                \
		LIBC_NEXT(sym, fn);                 \
		va_start(ap, flags);                                        \
		mode = libc_open_mode(flags, ap);                                 \
		va_end(ap);                                                 \
		return lh_fd_take(real(path, flags, mode));                   \
	}
OPEN_LIKE(open, "open")
OPEN_LIKE(open64, "open64")

#define OPENAT_LIKE(fn, sym)                                                \
	int fn(int dir, const char *path, int flags, ...)                   \
	{                                                                   \
		va_list ap;                                                 \
		mode_t mode;                                                \
		LIBC_NEXT(sym, fn);            \
		va_start(ap, flags);                                        \
		mode = libc_open_mode(flags, ap);                                 \
		va_end(ap);                                                 \
		return lh_fd_take(real(dir, path, flags, mode));              \
	}
OPENAT_LIKE(openat, "openat")
OPENAT_LIKE(openat64, "openat64")

/* fn(ARGS) returning a new descriptor: libc's, then moved and remembered */
#define TAKES_ONE(fn, params, args)                                         \
	int fn params                                                       \
	{                                                                   \
		LIBC_NEXT(#fn, fn);                                              \
		return lh_fd_take(real args);                               \
	}
TAKES_ONE(__open_2, (const char *path, int flags), (path, flags))
TAKES_ONE(__open64_2, (const char *path, int flags), (path, flags))
TAKES_ONE(creat, (const char *path, mode_t mode), (path, mode))
TAKES_ONE(socket, (int domain, int type, int protocol), (domain, type, protocol))
TAKES_ONE(accept, (int s, struct sockaddr *a, socklen_t *len), (s, a, len))
TAKES_ONE(accept4, (int s, struct sockaddr *a, socklen_t *len, int flags), (s, a, len, flags))

static int pair(int r, int v[2])
{
	if (r == 0) {
		v[0] = lh_fd_take(v[0]);
		v[1] = lh_fd_take(v[1]);
	}
	return r;
}

int socketpair(int domain, int type, int protocol, int v[2])
{
	LIBC_NEXT("socketpair", socketpair);
	return pair(real(domain, type, protocol, v), v);
}

int pipe(int v[2])
{
	LIBC_NEXT("pipe", pipe);
	return pair(real(v), v);
}

int pipe2(int v[2], int flags)
{
	LIBC_NEXT("pipe2", pipe2);
	return pair(real(v, flags), v);
}

TAKES_ONE(eventfd, (unsigned int count, int flags), (count, flags))
TAKES_ONE(epoll_create, (int size), (size))
TAKES_ONE(epoll_create1, (int flags), (flags))
TAKES_ONE(timerfd_create, (int clock, int flags), (clock, flags))
TAKES_ONE(inotify_init1, (int flags), (flags))
TAKES_ONE(shm_open, (const char *name, int flags, mode_t mode), (name, flags, mode))
TAKES_ONE(mkstemp, (char *tmpl), (tmpl))
TAKES_ONE(dup, (int fd), (fd))

/* dup2 and dup3 name their number: remembered, not moved */
int dup2(int from, int to)
{
	LIBC_NEXT("dup2", dup2);
	int r = real(from, to);

	if (r >= 0)
		lh_fd_mine(r);
	return r;
}

int dup3(int from, int to, int flags)
{
	LIBC_NEXT("dup3", dup3);
	int r = real(from, to, flags);

	if (r >= 0)
		lh_fd_mine(r);
	return r;
}

int fcntl(int fd, int cmd, ...)
{
	va_list ap;
	long arg;
	int r;

	resolve();
	va_start(ap, cmd);
	arg = va_arg(ap, long);
	va_end(ap);
	r = real_fcntl(fd, cmd, arg);
	if ((cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) && r >= 0)
		lh_fd_mine(r);
	return r;
}

int fcntl64(int fd, int cmd, ...) __attribute__((alias("fcntl")));

ssize_t recvmsg(int s, struct msghdr *m, int flags)
{
	LIBC_NEXT("recvmsg", recvmsg);
	ssize_t r = real(s, m, flags);

	for (struct cmsghdr *c = r >= 0 ? CMSG_FIRSTHDR(m) : NULL; c; c = CMSG_NXTHDR(m, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
			for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
				int fd;

				memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
				lh_fd_mine(fd);
			}
	return r;
}

/* FILE and DIR keep their descriptor's number: remembered, not moved */
FILE *fopen(const char *path, const char *mode)
{
	LIBC_NEXT("fopen", fopen);
	FILE *f = real(path, mode);

	if (f)
		lh_fd_mine(fileno(f));
	return f;
}

FILE *fopen64(const char *path, const char *mode) __attribute__((alias("fopen")));

DIR *opendir(const char *path)
{
	LIBC_NEXT("opendir", opendir);
	DIR *d = real(path);

	if (d)
		lh_fd_mine(dirfd(d));
	return d;
}

/* fd is being closed by the lower half: no longer its own */
static void forget(int fd)
{
	if (fd >= 0 && fd < MAX_FD)
		__atomic_store_n(&is_lower[fd], 0, __ATOMIC_RELEASE);
}

int close(int fd)
{
	resolve();
	forget(fd);
	return real_close(fd);
}

int fclose(FILE *f)
{
	LIBC_NEXT("fclose", fclose);
	forget(fileno(f));
	return real(f);
}

int closedir(DIR *d)
{
	LIBC_NEXT("closedir", closedir);
	forget(dirfd(d));
	return real(d);
}

/* ---- the table ---- */

/* Every open descriptor above 2, in order, into v (at most n); how many. */
static int list_fds(int *v, int n)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int k = 0, self;

	if (!d)
		return -1;
	self = dirfd(d);
	while ((e = readdir(d)) && k < n) {
		char *end;
		long fd = strtol(e->d_name, &end, 10);

		if (*end || e->d_name[0] < '0' || e->d_name[0] > '9' || fd <= 2 || fd == self)
			continue;
		v[k++] = (int)fd;
	}
	closedir(d);
	for (int i = 1; i < k; i++)   /* numbers in order: the image is deterministic */
		for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
			int t = v[j];

			v[j] = v[j - 1];
			v[j - 1] = t;
		}
	return k;
}

/* PMI_FD=6 becomes PMI_FD=768 when 6 moved there */
static void follow_env(int from, int to)
{
	static const char *const names[] = { "PMI_FD", "HYDI_CONTROL_FD", "PMIX_SERVER_FD",
					     "SLURM_PMI_FD" };
	char num[16];

	for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		const char *v = getenv(names[i]);

		if (v && *v && atoi(v) == from) {
			snprintf(num, sizeof(num), "%d", to);
			setenv(names[i], num, 1);
		}
	}
}

void lh_fds_start(void)
{
	static int v[4096];
	int n = list_fds(v, 4096);

	for (int i = 0; i < n; i++) {
		int to = lh_fd_take(v[i]);

		if (to != v[i])
			follow_env(v[i], to);
	}
}

void lh_fds_entering(const struct proc_fd_entry *upper, size_t nupper)
{
	static int v[4096];
	int n = list_fds(v, 4096);

	for (int i = 0; i < n; i++) {
		size_t k = 0;

		while (k < nupper && upper[k].rec.fd != v[i])
			k++;
		if (k < nupper)   /* reopened by the lower half's code: not its own */
			forget(v[i]);
		else if (!lh_fd_lower(v[i]))
			lh_fd_mine(v[i]);
	}
}

int lh_fds_dump(struct img_writer *w, unsigned *count)
{
	static int v[MAX_FD];
	struct proc_fd_entry *t;
	int n = list_fds(v, MAX_FD), nt = 0, ret = 0, bad;
	uint64_t total;

	if (n < 0)
		return err_set(-EIO, "cannot list /proc/self/fd");
	t = calloc((size_t)n + 1, sizeof(*t));
	if (!t)
		return err_set(-ENOMEM, "out of memory");
	proc_fd_save_max = cfg_u64(CFG_FILE_SAVE_MAX);
	for (int i = 0; !ret && i < n; i++) {
		if (lh_fd_lower(v[i]))
			continue;
		ret = proc_fd_describe(v[i], &t[nt], t, (size_t)nt);
		if (ret == -EBADF) {   /* closed meanwhile: a lower-half thread's */
			ret = 0;
			free(t[nt].path);
			continue;
		}
		nt++;
	}
	if (ret == -EFBIG) {
		char why[512];

		snprintf(why, sizeof(why), "%s", err_msg());
		err_set(ret, "rank %d: %s", lh_info->world_rank, why);
	}
	bad = ret ? -1 : proc_fds_unsupported(t, (size_t)nt);
	if (bad >= 0)
		ret = err_set(-ENOTSUP, "rank %d: the program's fd %d is %s (%s): the split process "
			      "saves files, directories, devices, pipes within the process, eventfd, "
			      "timerfd and epoll", lh_info->world_rank, t[bad].rec.fd, proc_fd_kind_name(t[bad].rec.mode, t[bad].path),
			      t[bad].path);
	total = (uint64_t)nt;
	ret = ret ? ret : img_section_begin(w, "fds", "fds");
	ret = ret ? ret : img_write(w, &total, sizeof(total));
	for (int i = 0; !ret && i < nt; i++) {
		ret = img_write(w, &t[i].rec, sizeof(t[i].rec));
		ret = ret ? ret : img_write(w, t[i].path, t[i].rec.path_len);
		if (!ret && t[i].rec.data_len)
			ret = img_write(w, t[i].data, t[i].rec.data_len);
	}
	ret = ret ? ret : img_section_end(w);
	if (count)
		*count = (unsigned)nt;
	proc_fds_free(t, (size_t)nt);
	return ret;
}

int lh_fds_read(struct img_reader *img, struct proc_fd_entry **out, size_t *nout)
{
	int sec = img_section_find(img, "fds");
	struct img_section_info si;
	struct proc_fd_entry *t = NULL;
	uint64_t n = 0, off = sizeof(n);
	char *buf = NULL;
	int ret = 0;

	*out = NULL;
	*nout = 0;
	if (sec < 0 || img_section_get(img, (unsigned)sec, &si) != 0 || si.size < sizeof(n))
		return err_set(-EBADMSG, "the image has no descriptor table");
	buf = malloc(si.size);
	if (!buf || img_read(img, (unsigned)sec, 0, buf, si.size) != (ssize_t)si.size) {
		free(buf);
		return *err_msg() ? -EBADMSG : err_set(-EBADMSG, "cannot read the descriptor table");
	}
	memcpy(&n, buf, sizeof(n));
	if (n > MAX_FD || !(t = calloc(n + 1, sizeof(*t)))) {
		free(buf);
		return err_set(-EBADMSG, "the image's descriptor table is damaged");
	}
	for (uint64_t i = 0; !ret && i < n; i++) {
		struct proc_fd_entry *e = &t[i];

		if (si.size - off < sizeof(e->rec)) {
			ret = -1;
			break;
		}
		memcpy(&e->rec, buf + off, sizeof(e->rec));
		off += sizeof(e->rec);
		if (e->rec.path_len == 0 || e->rec.path_len > PATH_MAX || e->rec.fd <= 2 ||
		    e->rec.fd >= MAX_FD || si.size - off < e->rec.path_len + e->rec.data_len ||
		    buf[off + e->rec.path_len - 1] != 0) {
			ret = -1;
			break;
		}
		e->path = strdup(buf + off);
		off += e->rec.path_len;
		if (e->rec.data_len && (e->data = malloc(e->rec.data_len)))
			memcpy(e->data, buf + off, e->rec.data_len);
		off += e->rec.data_len;
		if (!e->path || (e->rec.data_len && !e->data))
			ret = -1;
	}
	free(buf);
	if (ret) {
		proc_fds_free(t, n);
		return err_set(-EBADMSG, "the image's descriptor table is damaged");
	}
	*out = t;
	*nout = n;
	return 0;
}

int lh_fds_place(const struct proc_fd_entry *v, size_t n)
{
	int floor = LH_FD_BASE, ret;
	char what[PATH_MAX];

	for (size_t i = 0; i < n; i++) {
		if (v[i].rec.fd >= floor)
			floor = v[i].rec.fd + 1;
		if (fcntl(v[i].rec.fd, F_GETFD) >= 0) {   /* nothing of the program's is open yet */
			char link[40];
			ssize_t l;

			snprintf(link, sizeof(link), "/proc/self/fd/%d", v[i].rec.fd);
			l = readlink(link, what, sizeof(what) - 1);
			what[l > 0 ? l : 0] = 0;
			return err_set(-EBUSY, "the program's fd %d (%s) is taken by the new lower half "
				       "(%s)", v[i].rec.fd, v[i].path, what);
		}
	}
	ret = proc_fds_check(v, n);
	ret = ret ? ret : proc_fds_reopen(v, n, floor);
	for (size_t i = 0; !ret && i < n; i++)
		if (v[i].rec.cloexec && v[i].rec.kind != PROC_FD_STDIO)
			(void)fcntl(v[i].rec.fd, F_SETFD, FD_CLOEXEC);
	return ret;
}

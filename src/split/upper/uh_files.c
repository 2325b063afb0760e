/* uh_files.c - the regular files the program opens with write access,
 * recorded in the upper half's memory (sts_written, sts_written.h) for the
 * lower half's checkpoints (docs/split.md "Files written after the
 * checkpoint").
 *
 * libc's entry points that open a file are defined here, in a library of
 * their own (libstasis-files.so) that the lower half preloads into the
 * upper half (ld.so --preload, src/split/lower/lh_main.c): first in the lookup
 * order, so every program and library finds them before libc's, whatever
 * it links. In the stand-in MPI library they were found only by programs
 * that link MPI ahead of libc (C with mpicc); libgfortran's OPEN and
 * Python, whose mpi4py loads MPI while it runs, went to libc directly.
 * Each calls libc's and, for a regular file opened for writing, notes its
 * absolute path (the link of /proc/self/fd/N) with its device and inode.
 * /proc, /sys and /dev are not the program's files; the checkpoint leaves
 * out the checkpoint directories (src/proc/written.c).
 *
 * A single process's agent, libstasis-inject.so, is built with this file
 * too (docs/transparent.md, "Files written and closed"): LD_PRELOAD puts
 * it first, and the agent sends the list at each checkpoint.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/libc_next.h"
#include "sts_written.h"

struct sts_written sts_written;
/* the tree's log (sts_written.h), set by a single process's agent; -1 in
 * the split process, whose lower half reads each rank's list */
int sts_written_log = -1;

int __open_2(const char *path, int flags);
int __open64_2(const char *path, int flags);
int __openat_2(int dir, const char *path, int flags);
int __openat64_2(int dir, const char *path, int flags);

/* libc's definitions, looked up when the library is loaded: the agent of a
 * single process (src/proc/inject), which has these wrappers too, opens
 * files while the program's threads are stopped, when dlsym could wait for
 * a loader lock one of them holds. Looked up at a first call as well, for
 * a library whose constructor opens a file before this one's ran. */
#define LIBC_FNS(X) X(open) X(open64) X(openat) X(openat64) X(__open_2) X(__open64_2) \
	X(__openat_2) X(__openat64_2) X(creat) X(creat64) X(fopen) X(fopen64) X(freopen) \
	X(freopen64) X(rename) X(renameat) X(renameat2) X(link) X(linkat) X(mkstemp) X(mkstemp64) \
	X(mkostemp) X(mkostemp64) X(mkstemps) X(mkstemps64) X(mkostemps) X(mkostemps64)
#define LIBC_PTR(fn) __typeof__(&fn) r_##fn;
#define LIBC_LOOK(fn) libc.r_##fn = (__typeof__(&fn))dlsym(RTLD_NEXT, #fn);
static struct {
	LIBC_FNS(LIBC_PTR)
} libc;

static void __attribute__((constructor)) libc_look(void)
{
	LIBC_FNS(LIBC_LOOK)
}

#define REAL(fn) (libc.r_##fn ? libc.r_##fn : (libc_look(), libc.r_##fn))

/* Every signal blocked, by the system call itself (the agent's
 * pthread_sigmask keeps its checkpoint signal open), or put back */
static void signals_off(sigset_t *old)
{
	sigset_t all;

	sigfillset(&all);
	syscall(SYS_rt_sigprocmask, SIG_SETMASK, &all, old, _NSIG / 8);
}

static void signals_back(const sigset_t *old)
{
	syscall(SYS_rt_sigprocmask, SIG_SETMASK, old, NULL, _NSIG / 8);
}

/* The list's lock, taken with every signal blocked: a handler that opens
 * a file, or the checkpoint's park signal, never comes while this thread
 * holds it, so the lower half, or the agent, finds it free once every
 * thread is parked */
static void lock(struct sts_written *w, sigset_t *old)
{
	signals_off(old);
	while (__atomic_exchange_n(&w->lock, 1, __ATOMIC_ACQUIRE))
		;
}

static void unlock(struct sts_written *w, const sigset_t *old)
{
	__atomic_store_n(&w->lock, 0, __ATOMIC_RELEASE);
	signals_back(old);
}

/* a fork while another thread held the lock: the child's is free */
static void child_unlock(void)
{
	sts_written.lock = 0;
}

static void __attribute__((constructor)) at_fork(void)
{
	pthread_atfork(NULL, NULL, child_unlock);
}

/* One record into the tree's log (with every signal blocked by the
 * caller: a checkpoint never parks a process mid-record) */
static void log_rec(uint32_t op, uint64_t dev, uint64_t ino, const char *path, const char *to)
{
	sts_written_log_put(sts_written_log, op, dev, ino, path, to);
}

static void note(int fd, int created)
{
	static const char *const skip[] = { "/proc/", "/sys/", "/dev/" };
	char link[40], path[STS_WRITTEN_PATH];
	struct sts_written *w = &sts_written;
	struct stat st;
	sigset_t old;
	ssize_t len;
	uint32_t i;
	int e = errno, added;

	if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		errno = e;
		return;
	}
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	len = readlink(link, path, sizeof(path) - 1);
	if (len <= 0 || len >= (ssize_t)sizeof(path) - 1 || path[0] != '/') {
		errno = e;
		return;
	}
	path[len] = 0;
	for (i = 0; i < sizeof(skip) / sizeof(skip[0]); i++)
		if (!strncmp(path, skip[i], strlen(skip[i]))) {
			errno = e;
			return;
		}
	lock(w, &old);
	added = sts_written_files_add(w->v, &w->n, STS_WRITTEN_MAX, path, (size_t)len,
				      (uint64_t)st.st_dev, (uint64_t)st.st_ino);
	/* full: the files deleted since make room; looked for once every 64
	 * files that found it full, not at every open */
	if (added < 0 && w->dropped % 64 == 0) {
		sts_written_forget_gone(w);
		added = sts_written_files_add(w->v, &w->n, STS_WRITTEN_MAX, path, (size_t)len,
					      (uint64_t)st.st_dev, (uint64_t)st.st_ino);
	}
	if (added < 0)
		w->dropped++;
	if (added || created)   /* not yet so in this process's list: maybe not in the tree's */
		log_rec(created ? STS_WRITTEN_CREATED : STS_WRITTEN_OPEN, (uint64_t)st.st_dev,
			(uint64_t)st.st_ino, path, NULL);
	unlock(w, &old);
	errno = e;
}

/* Into old, the absolute path of the directory from names, relative to
 * dir, before it is renamed ("" if it is none, or nothing is listed): the
 * listed files under it follow it */
static void dir_before(int dir, const char *from, char *old)
{
	char link[40];
	struct stat st;
	ssize_t len = 0;
	int e = errno, fd;

	old[0] = 0;
	if (!__atomic_load_n(&sts_written.n, __ATOMIC_RELAXED) && sts_written_log < 0)
		return;   /* nothing listed that could follow it */
	fd = (int)syscall(SYS_openat, dir, from, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (fd >= 0 && fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
		snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
		len = readlink(link, old, STS_WRITTEN_PATH - 1);
	}
	if (fd >= 0)
		close(fd);
	old[len > 0 && len < STS_WRITTEN_PATH - 1 && old[0] == '/' ? len : 0] = 0;
	errno = e;
}

/* A listed file renamed (or linked) to newpath, relative to dir: the list
 * follows it by its inode (write a temporary file, rename it over the
 * real one: the real one is what the program reads back); a directory
 * that was old takes its listed files with it */
static void moved(int dir, const char *newpath, const char *old)
{
	char link[40], path[STS_WRITTEN_PATH];
	struct sts_written *w = &sts_written;
	int e = errno, fd = (int)syscall(SYS_openat, dir, newpath, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	sigset_t mask;
	ssize_t len;

	if (fd < 0) {
		errno = e;
		return;
	}
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	len = readlink(link, path, sizeof(path) - 1);
	if (fstat(fd, &st) != 0 || !(S_ISREG(st.st_mode) || (S_ISDIR(st.st_mode) && old[0])) ||
	    len <= 0 || len >= (ssize_t)sizeof(path) - 1 || path[0] != '/') {
		close(fd);
		errno = e;
		return;
	}
	close(fd);
	path[len] = 0;
	lock(w, &mask);
	if (S_ISDIR(st.st_mode)) {
		sts_written_files_dir_moved(w->v, &w->n, old, path, (size_t)len);
		log_rec(STS_WRITTEN_DIR, 0, 0, old, path);
	} else {
		sts_written_files_moved(w->v, &w->n, (uint64_t)st.st_dev, (uint64_t)st.st_ino, path,
					(size_t)len);
		log_rec(STS_WRITTEN_MOVED, (uint64_t)st.st_dev, (uint64_t)st.st_ino, path, NULL);
	}
	unlock(w, &mask);
	errno = e;
}

/* A rename or a link and the list's note of it happen with every signal
 * blocked: a checkpoint never finds the file renamed and the list not yet
 * following it, nor the descriptor moved() opens for a moment */
#define MOVES(fn, params, args, fdir, from, dir, to)                        \
	int fn params                                                       \
	{                                                                   \
		char old[STS_WRITTEN_PATH];                                 \
		sigset_t mask;                                              \
		int r;                                                      \
		signals_off(&mask);                                         \
		dir_before(fdir, from, old);                                \
		r = REAL(fn) args;                                          \
		if (r == 0)                                                 \
			moved(dir, to, old);                                \
		signals_back(&mask);                                        \
		return r;                                                   \
	}
MOVES(rename, (const char *from, const char *to), (from, to), AT_FDCWD, from, AT_FDCWD, to)
MOVES(renameat, (int fromdir, const char *from, int todir, const char *to),
      (fromdir, from, todir, to), fromdir, from, todir, to)
MOVES(renameat2, (int fromdir, const char *from, int todir, const char *to, unsigned flags),
      (fromdir, from, todir, to, flags), fromdir, from, todir, to)
/* a listed file given another name (one made with O_TMPFILE, listed by its
 * inode, included) is saved under it, as for a rename */
MOVES(link, (const char *from, const char *to), (from, to), AT_FDCWD, from, AT_FDCWD, to)
MOVES(linkat, (int fromdir, const char *from, int todir, const char *to, int flags),
      (fromdir, from, todir, to, flags), fromdir, from, todir, to)

static int writes(int flags)
{
	return (flags & O_ACCMODE) != O_RDONLY;
}

static int fwrites(const char *mode)
{
	return mode && strpbrk(mode, "wa+") != NULL;
}

/* Is there nothing at path (relative to dir) before an open that may
 * create it? Then a successful open made it: the tree's list says so, and
 * a restart from a checkpoint before takes it away again. Asked only with
 * a tree's list. */
static int absent(int dir, const char *path, int creates)
{
	struct stat st;
	int e = errno, r;

	if (!creates || sts_written_log < 0 || !path)
		return 0;
	r = fstatat(dir, path, &st, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT;
	errno = e;
	return r;
}

static int noted(int fd, int flags, int created)
{
	if (fd >= 0 && writes(flags))
		note(fd, created);
	return fd;
}

/* fn PARAMS, ending in int flags, ...: libc's, noted */
#define OPEN_LIKE(fn, params, args, dir)                                    \
	int fn params                                                       \
	{                                                                   \
		va_list ap;                                                 \
		mode_t mode;                                                \
		int created;                                                \
		va_start(ap, flags);                                        \
		mode = libc_open_mode(flags, ap);                           \
		va_end(ap);                                                 \
		created = absent(dir, path, (flags & O_CREAT) && writes(flags)); \
		return noted(REAL(fn) args, flags, created);                \
	}
OPEN_LIKE(open, (const char *path, int flags, ...), (path, flags, mode), AT_FDCWD)
OPEN_LIKE(open64, (const char *path, int flags, ...), (path, flags, mode), AT_FDCWD)
OPEN_LIKE(openat, (int dir, const char *path, int flags, ...), (dir, path, flags, mode), dir)
OPEN_LIKE(openat64, (int dir, const char *path, int flags, ...), (dir, path, flags, mode), dir)

/* (the fortified opens never create: glibc's take no mode) */
#define FORTIFIED(fn, params, args, flags, created)                         \
	int fn params                                                       \
	{                                                                   \
		int made = created;                                         \
		return noted(REAL(fn) args, flags, made);                   \
	}
FORTIFIED(__open_2, (const char *path, int flags), (path, flags), flags, 0)
FORTIFIED(__open64_2, (const char *path, int flags), (path, flags), flags, 0)
FORTIFIED(__openat_2, (int dir, const char *path, int flags), (dir, path, flags), flags, 0)
FORTIFIED(__openat64_2, (int dir, const char *path, int flags), (dir, path, flags), flags, 0)
FORTIFIED(creat, (const char *path, mode_t mode), (path, mode), O_WRONLY, absent(AT_FDCWD, path, 1))
FORTIFIED(creat64, (const char *path, mode_t mode), (path, mode), O_WRONLY,
	  absent(AT_FDCWD, path, 1))

static FILE *fnoted(FILE *f, const char *mode, int created)
{
	if (f && fwrites(mode))
		note(fileno(f), created);
	return f;
}

/* "w" and "a" make a file that is not there */
static int fcreates(const char *mode)
{
	return mode && (mode[0] == 'w' || mode[0] == 'a');
}

FILE *fopen(const char *path, const char *mode)
{
	int created = absent(AT_FDCWD, path, fcreates(mode));

	return fnoted(REAL(fopen)(path, mode), mode, created);
}

FILE *fopen64(const char *path, const char *mode)
{
	int created = absent(AT_FDCWD, path, fcreates(mode));

	return fnoted(REAL(fopen64)(path, mode), mode, created);
}

FILE *freopen(const char *path, const char *mode, FILE *f)
{
	int created = absent(AT_FDCWD, path, fcreates(mode));

	return fnoted(REAL(freopen)(path, mode, f), mode, created);
}

FILE *freopen64(const char *path, const char *mode, FILE *f)
{
	int created = absent(AT_FDCWD, path, fcreates(mode));

	return fnoted(REAL(freopen64)(path, mode, f), mode, created);
}

/* mkstemp and its kin open the file inside libc, where the wrappers above
 * do not see it (a temporary file written, closed and renamed over the
 * real one is the usual way to replace a file) */
#define MKSTEMP(fn, params, args)                                           \
	int fn params                                                       \
	{                                                                   \
		int fd = REAL(fn) args;                                     \
		if (fd >= 0)   /* O_EXCL: made here */                      \
			note(fd, sts_written_log >= 0);                     \
		return fd;                                                  \
	}
MKSTEMP(mkstemp, (char *tmpl), (tmpl))
MKSTEMP(mkstemp64, (char *tmpl), (tmpl))
MKSTEMP(mkostemp, (char *tmpl, int flags), (tmpl, flags))
MKSTEMP(mkostemp64, (char *tmpl, int flags), (tmpl, flags))
MKSTEMP(mkstemps, (char *tmpl, int len), (tmpl, len))
MKSTEMP(mkstemps64, (char *tmpl, int len), (tmpl, len))
MKSTEMP(mkostemps, (char *tmpl, int len, int flags), (tmpl, len, flags))
MKSTEMP(mkostemps64, (char *tmpl, int len, int flags), (tmpl, len, flags))

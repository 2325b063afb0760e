/* uh_files.c - the regular files the program opens with write access,
 * recorded in the upper half's memory (sts_written, sts_mpi.h) for the
 * lower half's checkpoints (docs/split.md "Files written after the
 * checkpoint").
 *
 * libc's entry points that open a file are defined here: the program and
 * its libraries (libgfortran's OPEN) find them ahead of libc's, which
 * this library's dependants come after in the lookup order. Each calls
 * libc's and, for a regular file opened for writing, notes its absolute
 * path (the link of /proc/self/fd/N) with its device and inode. /proc,
 * /sys and /dev are not the program's files; the lower half leaves out
 * the checkpoint directories at the checkpoint.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/libc_next.h"
#include "uh.h"

struct sts_written sts_written;

/* Drop the listed files that no longer exist (under w's lock). */
static void forget_gone(struct sts_written *w)
{
	uint32_t k = 0;
	struct stat st;

	for (uint32_t i = 0; i < w->n; i++) {
		if (stat(w->v[i].path, &st) != 0 && errno == ENOENT)
			continue;
		if (k != i)
			w->v[k] = w->v[i];
		k++;
	}
	w->n = k;
}

static void note(int fd)
{
	static const char *const skip[] = { "/proc/", "/sys/", "/dev/" };
	char link[40], path[STS_WRITTEN_PATH];
	struct sts_written *w = &sts_written;
	struct stat st;
	ssize_t len;
	uint32_t i;

	if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
		return;
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	len = readlink(link, path, sizeof(path) - 1);
	if (len <= 0 || len >= (ssize_t)sizeof(path) - 1 || path[0] != '/')
		return;
	path[len] = 0;
	for (i = 0; i < sizeof(skip) / sizeof(skip[0]); i++)
		if (!strncmp(path, skip[i], strlen(skip[i])))
			return;
	while (__atomic_exchange_n(&w->lock, 1, __ATOMIC_ACQUIRE))
		;
	for (i = 0; i < w->n && strcmp(w->v[i].path, path) != 0; i++)
		;
	if (i == w->n && w->n == STS_WRITTEN_MAX)
		forget_gone(w);   /* full: the files deleted since make room */
	if (i == w->n && w->n < STS_WRITTEN_MAX)
		w->n++;
	if (i < w->n) {   /* a path made again names another inode: the newest */
		w->v[i].dev = (uint64_t)st.st_dev;
		w->v[i].ino = (uint64_t)st.st_ino;
		memcpy(w->v[i].path, path, (size_t)len + 1);
	} else {
		w->dropped++;
	}
	__atomic_store_n(&w->lock, 0, __ATOMIC_RELEASE);
}

static int writes(int flags)
{
	return (flags & O_ACCMODE) != O_RDONLY;
}

static int fwrites(const char *mode)
{
	return mode && strpbrk(mode, "wa+") != NULL;
}

static int noted(int fd, int flags)
{
	if (fd >= 0 && writes(flags))
		note(fd);
	return fd;
}

/* fn PARAMS, ending in int flags, ...: libc's, noted */
#define OPEN_LIKE(fn, params, args)                                         \
	int fn params                                                       \
	{                                                                   \
		va_list ap;                                                 \
		mode_t mode;                                                \
		LIBC_NEXT(#fn, fn);                                         \
		va_start(ap, flags);                                        \
		mode = libc_open_mode(flags, ap);                           \
		va_end(ap);                                                 \
		return noted(real args, flags);                             \
	}
OPEN_LIKE(open, (const char *path, int flags, ...), (path, flags, mode))
OPEN_LIKE(open64, (const char *path, int flags, ...), (path, flags, mode))
OPEN_LIKE(openat, (int dir, const char *path, int flags, ...), (dir, path, flags, mode))
OPEN_LIKE(openat64, (int dir, const char *path, int flags, ...), (dir, path, flags, mode))

int __open_2(const char *path, int flags);
int __open64_2(const char *path, int flags);
int __openat_2(int dir, const char *path, int flags);
int __openat64_2(int dir, const char *path, int flags);

#define FORTIFIED(fn, params, args, flags)                                  \
	int fn params                                                       \
	{                                                                   \
		LIBC_NEXT(#fn, fn);                                              \
		return noted(real args, flags);                             \
	}
FORTIFIED(__open_2, (const char *path, int flags), (path, flags), flags)
FORTIFIED(__open64_2, (const char *path, int flags), (path, flags), flags)
FORTIFIED(__openat_2, (int dir, const char *path, int flags), (dir, path, flags), flags)
FORTIFIED(__openat64_2, (int dir, const char *path, int flags), (dir, path, flags), flags)
FORTIFIED(creat, (const char *path, mode_t mode), (path, mode), O_WRONLY)
FORTIFIED(creat64, (const char *path, mode_t mode), (path, mode), O_WRONLY)

static FILE *fnoted(FILE *f, const char *mode)
{
	if (f && fwrites(mode))
		note(fileno(f));
	return f;
}

FILE *fopen(const char *path, const char *mode)
{
	LIBC_NEXT("fopen", fopen);
	return fnoted(real(path, mode), mode);
}

FILE *fopen64(const char *path, const char *mode)
{
	LIBC_NEXT("fopen64", fopen64);
	return fnoted(real(path, mode), mode);
}

FILE *freopen(const char *path, const char *mode, FILE *f)
{
	LIBC_NEXT("freopen", freopen);
	return fnoted(real(path, mode, f), mode);
}

FILE *freopen64(const char *path, const char *mode, FILE *f)
{
	LIBC_NEXT("freopen64", freopen64);
	return fnoted(real(path, mode, f), mode);
}

/* libc_next.h - for the wrappers of libc's entry points that open
 * descriptors (src/split/lower/lh_fds.c in the lower half, src/split/upper/uh_files.c
 * in the upper): libc's own definition, and open's mode argument. */
#ifndef STS_LIBC_NEXT_H
#define STS_LIBC_NEXT_H

#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sys/types.h>

/* real: the next definition of fn (libc's) */
#define LIBC_NEXT(name, fn) \
	static __typeof__(&fn) real; \
	if (!real) \
		real = (__typeof__(&fn))dlsym(RTLD_NEXT, name)

/* The mode argument of open and openat with these flags (0 without one) */
static inline mode_t libc_open_mode(int flags, va_list ap)
{
	return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? (mode_t)va_arg(ap, int) : 0;
}

#endif

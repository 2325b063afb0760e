/* threads.c - bringing threads back (pimg_threads.h): raw system calls only,
 * for the freestanding restorer and the lower halves alike. */
#include "pimg/pimg_threads.h"

#include <asm/unistd.h>
#include <linux/fcntl.h>
#include <linux/types.h>

static long sys3(long n, long a, long b, long c)
{
	long ret;

	__asm__ volatile("syscall" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
	return ret;
}

/* struct linux_dirent64 */
struct dirent64_ {
	uint64_t ino;
	int64_t off;
	unsigned short reclen;
	unsigned char type;
	char name[];
};

long pimg_tasks(int32_t *tids, size_t cap)
{
	char buf[4096] __attribute__((aligned(8)));
	long fd = sys3(__NR_openat, AT_FDCWD, (long)"/proc/self/task",
		       O_RDONLY | O_DIRECTORY | O_CLOEXEC), n, found = 0;

	if (fd < 0)
		return fd;
	while ((n = sys3(__NR_getdents64, fd, (long)buf, sizeof(buf))) > 0) {
		for (long off = 0; off < n;) {
			const struct dirent64_ *d = (const struct dirent64_ *)(buf + off);
			int32_t tid = 0;
			const char *p = d->name;

			off += d->reclen;
			if (*p < '0' || *p > '9')
				continue;
			while (*p >= '0' && *p <= '9')
				tid = tid * 10 + (*p++ - '0');
			if ((size_t)found < cap)
				tids[found] = tid;
			found++;
		}
	}
	sys3(__NR_close, fd, 0, 0);
	return n < 0 ? n : found;
}

void pimg_raise_pending(int32_t pid, int32_t tid, uint64_t set)
{
	for (int sig = 1; sig <= 64; sig++) {
		if (!(set & (1ull << (sig - 1))))
			continue;
		if (tid)
			sys3(__NR_tgkill, pid, tid, sig);
		else
			sys3(__NR_kill, pid, sig, 0);
	}
}

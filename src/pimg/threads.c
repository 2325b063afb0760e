/* threads.c - bringing threads back (pimg_threads.h): raw system calls only,
 * for the freestanding restorer and the lower halves alike. */
#include "pimg/pimg_threads.h"

#include <asm/unistd.h>

static long sys3(long n, long a, long b, long c)
{
	long ret;

	__asm__ volatile("syscall" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
	return ret;
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

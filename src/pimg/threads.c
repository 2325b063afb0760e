/* threads.c - parking threads and bringing them back (pimg_threads.h): raw
 * system calls only, for the agent, the freestanding restorer and the lower
 * halves alike. */
#include "pimg/pimg_threads.h"

#include <asm/unistd.h>
#include <asm/prctl.h>
#include <linux/fcntl.h>
#include <linux/prctl.h>
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

__attribute__((no_stack_protector))
void pimg_thread_capture(struct pimg_rec_thread *t, void *uc, uint64_t fs, uint32_t flags)
{
	uint64_t gs = 0, head = 0, len = 0, ctid = 0;

	t->tid = (int32_t)sys3(__NR_gettid, 0, 0, 0);
	t->flags = flags | (t->tid == (int32_t)sys3(__NR_getpid, 0, 0, 0) ? PIMG_THREAD_MAIN : 0);
	t->fs_base = fs;
	if (sys3(__NR_arch_prctl, ARCH_GET_GS, (long)&gs, 0) == 0)
		t->gs_base = gs;
	t->sigframe = (uint64_t)(uintptr_t)uc;
	if (sys3(__NR_get_robust_list, 0, (long)&head, (long)&len) == 0) {
		t->robust_head = head;
		t->robust_len = len;
	}
	if (sys3(__NR_prctl, PR_GET_TID_ADDRESS, (long)&ctid, 0) == 0)
		t->clear_child_tid = ctid;
	sys3(__NR_prctl, PR_GET_NAME, (long)t->comm, 0);
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

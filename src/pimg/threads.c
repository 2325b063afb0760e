/* threads.c - parking threads and bringing them back (pimg_threads.h): raw
 * system calls only, for the agent, the freestanding restorer and the lower
 * halves alike. */
#include "pimg/pimg_threads.h"

#include <asm/unistd.h>
#include <asm/prctl.h>
#include <linux/errno.h>
#include <linux/fcntl.h>
#include <linux/futex.h>
#include <linux/time.h>
#include <linux/prctl.h>
#include <linux/sched.h>
#include <linux/types.h>

static long sys3(long n, long a, long b, long c)
{
	long ret;

	__asm__ volatile("syscall" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
	return ret;
}

static long sys4(long n, long a, long b, long c, long d)
{
	register long r10 __asm__("r10") = d;
	long ret;

	__asm__ volatile("syscall" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10)
			 : "rcx", "r11", "memory");
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

/* ---- parking ---- */

#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_SEQ_CST)

static void futex_wait(uint32_t *addr, uint32_t val, long ms)
{
	struct { long s, ns; } ts = { ms / 1000, (ms % 1000) * 1000000 };

	sys4(__NR_futex, (long)addr, FUTEX_WAIT_PRIVATE, val, ms >= 0 ? (long)&ts : 0);
}

static void futex_wake(uint32_t *addr)
{
	sys3(__NR_futex, (long)addr, FUTEX_WAKE_PRIVATE, 0x7fffffff);
}

static uint64_t now_ms(void)
{
	struct { long s, ns; } ts = { 0, 0 };

	sys3(__NR_clock_gettime, CLOCK_MONOTONIC, (long)&ts, 0);
	return (uint64_t)ts.s * 1000 + (uint64_t)ts.ns / 1000000;
}

static int has(const int32_t *tids, uint32_t n, int32_t tid)
{
	for (uint32_t i = 0; i < n; i++)
		if (__atomic_load_n(&tids[i], __ATOMIC_SEQ_CST) == tid)
			return 1;
	return 0;
}

/* One pass: signal the threads not signaled yet; how many were (*fresh)
 * and how many signaled ones are still there and not seen (*left). */
static int park_pass(struct pimg_park *p, int32_t pid, uint32_t *fresh, uint32_t *left)
{
	long n = pimg_tasks(p->tasks, p->cap);
	uint32_t seen = LOAD(p->nseen);

	if (n < 0)
		return (int)n;
	if (n > (long)p->cap)
		return -E2BIG;
	if (seen > p->cap)
		seen = p->cap;
	*fresh = *left = 0;
	for (long i = 0; i < n; i++) {
		int32_t tid = p->tasks[i];

		/* a thread that parked unasked (the lower half's main thread at
		 * its targets) would take a second signal after the release */
		if (has(p->signaled, p->nsignaled, tid) || has(p->seen, seen, tid) ||
		    (p->skip && p->skip(tid, p->ctx)))
			continue;
		if (p->nsignaled == p->cap)
			return -E2BIG;
		if (sys3(__NR_tgkill, pid, tid, p->sig) == 0) {
			p->signaled[p->nsignaled++] = tid;
			(*fresh)++;
		}
	}
	seen = LOAD(p->nseen);
	seen = seen < p->cap ? seen : p->cap;
	for (uint32_t i = 0; i < p->nsignaled; i++)
		if (!has(p->seen, seen, p->signaled[i]) && has(p->tasks, (uint32_t)n, p->signaled[i]))
			(*left)++;
	return 0;
}

int pimg_park_all(struct pimg_park *p, long timeout_ms)
{
	int32_t pid = (int32_t)sys3(__NR_getpid, 0, 0, 0);
	uint64_t deadline = now_ms() + (uint64_t)timeout_ms;

	for (;;) {
		uint32_t a = LOAD(p->answers), fresh = 0, left = 0;
		int ret = park_pass(p, pid, &fresh, &left);

		if (ret)
			return ret;
		p->left = left;
		if (!fresh && !left && LOAD(p->parked) == LOAD(p->slots))
			return 0;
		if (now_ms() >= deadline)
			return -ETIMEDOUT;
		futex_wait(&p->answers, a, 20);
	}
}

void pimg_park_reset(struct pimg_park *p)
{
	__atomic_store_n(&p->slots, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&p->parked, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&p->answers, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&p->nseen, 0, __ATOMIC_SEQ_CST);
	p->nsignaled = 0;
	for (uint32_t i = 0; i < p->cap; i++)
		__atomic_store_n(&p->seen[i], 0, __ATOMIC_SEQ_CST);
}

void pimg_park_wake(struct pimg_park *p)
{
	__atomic_add_fetch(&p->wake, 1, __ATOMIC_SEQ_CST);
	futex_wake(&p->wake);
}

void pimg_park_release(struct pimg_park *p)
{
	__atomic_add_fetch(&p->release, 1, __ATOMIC_SEQ_CST);
	pimg_park_wake(p);
}

__attribute__((no_stack_protector))
uint32_t pimg_park_gen(struct pimg_park *p)
{
	return LOAD(p->release);
}

__attribute__((no_stack_protector))
uint32_t pimg_park_slot(struct pimg_park *p)
{
	return __atomic_fetch_add(&p->slots, 1, __ATOMIC_SEQ_CST);
}

/* the tid into seen, then counted: the waiter reads a claimed entry not
 * yet written as not seen, and waits for the count */
__attribute__((no_stack_protector))
static void seen_add(struct pimg_park *p, int32_t tid)
{
	uint32_t i = __atomic_fetch_add(&p->nseen, 1, __ATOMIC_SEQ_CST);

	if (i < p->cap)
		__atomic_store_n(&p->seen[i], tid, __ATOMIC_SEQ_CST);
	__atomic_add_fetch(&p->answers, 1, __ATOMIC_SEQ_CST);
	futex_wake(&p->answers);
}

__attribute__((no_stack_protector))
void pimg_park_parked(struct pimg_park *p, int32_t tid)
{
	__atomic_add_fetch(&p->parked, 1, __ATOMIC_SEQ_CST);
	seen_add(p, tid);
}

__attribute__((no_stack_protector))
void pimg_park_answer(struct pimg_park *p, int32_t tid)
{
	seen_add(p, tid);
}

__attribute__((no_stack_protector))
void pimg_park_hold(struct pimg_park *p, uint32_t gen, int (*work)(void *arg), void *arg)
{
	for (;;) {
		uint32_t w = LOAD(p->wake);

		if (LOAD(p->release) != gen)
			return;
		if (work && work(arg))
			continue;
		futex_wait(&p->wake, w, -1);
	}
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

uint64_t pimg_pending(int32_t tid, int shared, int sig)
{
	static const char self[] = "/proc/thread-self/status", task[] = "/proc/self/task/";
	const char *key = shared ? "\nShdPnd:" : "\nSigPnd:", *p;
	char path[64], buf[4096], digits[12];
	long fd, n, len = 0, nd = 0;
	uint64_t v = 0;

	if (!tid) {
		for (const char *c = self; *c; c++)
			path[len++] = *c;
	} else {
		for (const char *c = task; *c; c++)
			path[len++] = *c;
		for (uint32_t t = (uint32_t)tid; t || !nd; t /= 10)
			digits[nd++] = (char)('0' + t % 10);
		while (nd)
			path[len++] = digits[--nd];
		for (const char *c = "/status"; *c; c++)
			path[len++] = *c;
	}
	path[len] = 0;
	fd = sys3(__NR_openat, AT_FDCWD, (long)path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = sys3(__NR_read, fd, (long)buf, sizeof(buf) - 1);   /* the whole file, as procfs gives it */
	sys3(__NR_close, fd, 0, 0);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	for (p = buf; *p; p++) {
		const char *k = key, *q = p;

		while (*k && *q == *k)
			k++, q++;
		if (*k)
			continue;
		while (*q == ' ' || *q == '\t')
			q++;
		for (;; q++) {
			int d = *q >= '0' && *q <= '9' ? *q - '0' : *q >= 'a' && *q <= 'f' ? *q - 'a' + 10 : -1;

			if (d < 0)
				break;
			v = v << 4 | (uint64_t)d;
		}
		break;
	}
	return sig > 0 && sig <= 64 ? v & ~(1ull << (sig - 1)) : v;
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

/* fn in r10 and arg in r9 survive the system call (the kernel keeps every
 * register but rax, rcx and r11), arg2 stays in r8; the child's stack is
 * empty, so it calls fn with rsp 16-aligned as the ABI wants. */
__asm__(".text\n"
	".globl pimg_clone3\n"
	".hidden pimg_clone3\n"
	".type pimg_clone3, @function\n"
	"pimg_clone3:\n"
	"	mov %rdx, %r10\n"
	"	mov %rcx, %r9\n"
	"	mov $435, %eax\n"            /* clone3 */
	"	syscall\n"
	"	test %rax, %rax\n"
	"	jnz 1f\n"
	"	xor %ebp, %ebp\n"
	"	mov %r9, %rdi\n"
	"	mov %r8, %rsi\n"
	"	call *%r10\n"
	"	mov $60, %eax\n"             /* exit */
	"	xor %edi, %edi\n"
	"	syscall\n"
	"1:	ret\n"
	".size pimg_clone3, .-pimg_clone3\n");

/* Everything below may run on the program's FS base: no stack protector. */
__attribute__((no_stack_protector))
long pimg_thread_setup(const struct pimg_rec_thread *t)
{
	long tid;

	sys3(__NR_arch_prctl, ARCH_SET_FS, (long)t->fs_base, 0);
	if (t->gs_base)
		sys3(__NR_arch_prctl, ARCH_SET_GS, (long)t->gs_base, 0);
	if (t->robust_head)
		sys3(__NR_set_robust_list, (long)t->robust_head, (long)t->robust_len, 0);
	tid = t->clear_child_tid ? sys3(__NR_set_tid_address, (long)t->clear_child_tid, 0, 0)
				 : sys3(__NR_gettid, 0, 0, 0);
	sys3(__NR_prctl, PR_SET_NAME, (long)t->comm, 0);
	if (t->rseq_addr) {
		long ret = sys4(__NR_rseq, (long)t->rseq_addr, t->rseq_len, 0, t->rseq_sig);

		if (ret)
			return ret;
	}
	return tid;
}

__attribute__((no_stack_protector, noreturn))
void pimg_thread_return(const struct pimg_rec_thread *t)
{
	__asm__ volatile("mov %0, %%rsp\n\t"
			 "mov %1, %%eax\n\t"
			 "syscall\n\t"
			 : : "r"(t->sigframe), "i"(__NR_rt_sigreturn) : "memory");
	__builtin_unreachable();
}

/* A started thread: its state, then into its frame. */
__attribute__((no_stack_protector))
static void thread_child(void *tv, void *rv)
{
	const struct pimg_rec_thread *t = tv;
	const struct pimg_threads_restore *r = rv;
	long ret = pimg_thread_setup(t);

	if (r->ops && r->ops->leave)
		r->ops->leave(t, ret, r->ctx);
	pimg_thread_return(t);
}

static long thread_start(struct pimg_threads_restore *r, uint32_t i)
{
	const struct pimg_rec_thread *t = &r->threads[i];
	struct pimg_clone_args ca = { 0 };
	int32_t tid = t->tid;
	uint64_t top = r->ops && r->ops->stack ? r->ops->stack(t, i, r->ctx) : 0;

	ca.flags = CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD |
		   CLONE_SYSVSEM | CLONE_SETTLS;
	ca.tls = t->fs_base;
	if (!top)
		top = t->sigframe & ~15ull;    /* what lies below the frame is dead */
	ca.stack = top - PIMG_PAGE_SIZE;
	ca.stack_size = PIMG_PAGE_SIZE;
	if (!r->new_tids) {
		ca.set_tid = (uint64_t)(uintptr_t)&tid;
		ca.set_tid_size = 1;
	} else if (t->clear_child_tid) {
		/* glibc's struct pthread has the new tid before clone returns
		 * (with CLONE_CHILD_SETTID alone, only once the child first
		 * runs: the other threads' pthread_kill would use the old one),
		 * and the kernel clears it when the thread ends, as
		 * pthread_join expects */
		ca.flags |= CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID;
		ca.parent_tid = ca.child_tid = t->clear_child_tid;
	}
	return pimg_clone3(&ca, sizeof(ca), thread_child, (void *)(uintptr_t)t, r);
}

__attribute__((no_stack_protector))
int pimg_threads_restore(struct pimg_threads_restore *r)
{
	int32_t tids[r->n ? r->n : 1];
	long tid;

	r->main = 0;
	for (uint32_t i = 0; i < r->n; i++)
		if (r->threads[i].flags & PIMG_THREAD_MAIN)
			r->main = &r->threads[i];
	if (!r->main)
		return -ENOENT;
	for (uint32_t i = 0; i < r->n; i++) {
		if (&r->threads[i] == r->main)
			continue;
		tid = thread_start(r, i);
		if (tid < 0) {
			r->failed = i;
			return (int)tid;
		}
		tids[i] = (int32_t)tid;
	}
	tid = pimg_thread_setup(r->main);
	if (tid < 0) {
		r->failed = (uint32_t)(r->main - r->threads);
		return (int)tid;
	}
	if (r->new_tids && r->main->clear_child_tid)
		*(int32_t *)(uintptr_t)r->main->clear_child_tid = (int32_t)tid;
	tids[r->main - r->threads] = (int32_t)tid;
	/* once each: a real-time signal queued several times comes back once,
	 * without its sigqueue value */
	for (uint32_t i = 0; i < r->n; i++)
		pimg_raise_pending(r->pid, tids[i], r->threads[i].sigpending);
	pimg_raise_pending(r->pid, 0, r->shared_pending);
	return 0;
}

/* kernel.c - does this kernel have what a restart needs?
 *
 * Probed before anything of the restart starts, so that a kernel lacking a
 * feature is refused in one line naming it, instead of failing half-way in
 * the namespace's processes or the restorer. Each probe asks the kernel a
 * question whose answer differs between "supported" and "unknown": an
 * argument that is invalid or a pid that is taken, never a real change. */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/err.h"
#include "proc.h"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif
#ifndef PR_SET_MM_MAP_SIZE
#define PR_SET_MM_MAP_SIZE 15
#endif

/* clone3 with a set_tid naming our own pid: a kernel with set_tid answers
 * EEXIST (or EPERM without CAP_SYS_ADMIN), one with clone3 but not set_tid
 * E2BIG (the larger struct is unknown to it), one without clone3 ENOSYS.
 * Any other answer is left to the restart itself, which names it. */
static int probe_clone3(void)
{
	struct {
		uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
		uint64_t set_tid, set_tid_size;
	} ca;
	pid_t self = getpid();
	long r;

	memset(&ca, 0, sizeof(ca));
	ca.exit_signal = SIGCHLD;
	ca.set_tid = (uint64_t)(uintptr_t)&self;
	ca.set_tid_size = 1;
	r = syscall(SYS_clone3, &ca, sizeof(ca));
	if (r == 0)
		_exit(127);   /* cannot happen: our pid is taken */
	if (r > 0) {
		waitpid((pid_t)r, NULL, 0);
		return 0;
	}
	if (errno == ENOSYS)
		return err_set(-ENOSYS, "this kernel lacks clone3 (Linux 5.5 or later is needed to "
			       "give the program back its pid and thread ids)");
	if (errno == E2BIG)
		return err_set(-ENOSYS, "this kernel's clone3 lacks set_tid (Linux 5.5 or later is "
			       "needed to give the program back its pid and thread ids)");
	return 0;
}

/* A child that creates the namespaces the restart runs in, then exits. */
static int probe_namespaces(void)
{
	pid_t c = fork();
	int st = 0;

	if (c < 0)
		return err_set(-errno, "fork: %s", strerror(errno));
	if (c == 0)
		_exit(unshare(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS) == 0 ? 0 : errno & 0x7f);
	while (waitpid(c, &st, 0) < 0 && errno == EINTR)
		;
	if (!WIFEXITED(st))
		return err_set(-EIO, "the namespace probe ended with signal %d", WTERMSIG(st));
	if (WEXITSTATUS(st) == 0)
		return 0;
	return err_set(-WEXITSTATUS(st), "this kernel refuses new user and PID namespaces (%s; "
		       "they give the program back its pid: see user.max_user_namespaces)",
		       strerror(WEXITSTATUS(st)));
}

static int probe_mm_map(void)
{
	unsigned int size = 0;

	if (prctl(PR_SET_MM, PR_SET_MM_MAP_SIZE, &size, 0, 0) == 0 && size > 0)
		return 0;
	return err_set(-ENOSYS, "this kernel lacks prctl PR_SET_MM_MAP (CONFIG_CHECKPOINT_RESTORE), "
		       "needed to restore brk, the stack and the auxiliary vector");
}

/* Before 4.17 the flag is unknown and the address only a hint: the kernel
 * places the second mapping elsewhere instead of refusing it. */
static int probe_noreplace(void)
{
	void *a = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	void *b;
	int ret = 0;

	if (a == MAP_FAILED)
		return err_set(-errno, "mmap: %s", strerror(errno));
	b = mmap(a, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (b != MAP_FAILED) {
		if (b != a)
			munmap(b, 4096);
		ret = err_set(-ENOSYS, "this kernel lacks MAP_FIXED_NOREPLACE (Linux 4.17 or later), "
			      "which keeps the restore from mapping over anything");
	} else if (errno != EEXIST) {
		ret = err_set(-errno, "probing MAP_FIXED_NOREPLACE: %s", strerror(errno));
	}
	munmap(a, 4096);
	return ret;
}

int proc_kernel_check(void)
{
	int ret = probe_noreplace();

	if (!ret)
		ret = probe_mm_map();
	if (!ret)
		ret = probe_clone3();
	if (!ret)
		ret = probe_namespaces();
	return ret;
}

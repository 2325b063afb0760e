/* lh_sig.c - the handlers MPI installs run on the lower half's TLS
 * (docs/split.md, "Signals").
 *
 * MPI_Init installs signal handlers of its own: Open MPI's
 * show_stackframe for SIGSEGV, SIGBUS, SIGFPE and SIGABRT (the parameter
 * opal_signal) prints "*** Process received signal ***" and a backtrace,
 * then raises the signal again. A synchronous signal arrives on the thread
 * that caused it: in a split process, one of the program's threads,
 * running the program's code with the upper half's FS base. The handler,
 * lower-half code, then read the lower half's TLS variables at the upper
 * half's thread pointer: strsignal's gettext found a null locale
 * (__current_locale_name, "segfault at a8" in the kernel log), so the
 * program's own crash became a crash in libc, and its message and
 * backtrace were lost.
 *
 * UCX (under MPICH) installs its own for SIGSEGV, SIGBUS, SIGILL and
 * SIGFPE when it is loaded, before main, on an alternate stack.
 *
 * Every handler in place once MPI_Init returned is therefore replaced by
 * a trampoline that switches to the lower half's FS base when the
 * thread's is the upper half's (the TLS ABI's thread pointer, %fs:0,
 * inside [STS_UPPER_LO, STS_UPPER_HI)), calls the handler, and switches
 * back. Left alone: the checkpoint signal's (lh_agent.c, installed later,
 * which tells threads apart by their FS base itself) and handlers in the
 * upper range (uh_signal.c's trampolines for the program's, at a restart).
 */
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/auxv.h>

#include "lh.h"
#include "lh_ckpt.h"

#define LH_NSIG 65

static struct sigaction mpi[LH_NSIG];
static uint64_t lower_fs;
static int fsgsbase;

static void *handler_of(const struct sigaction *a)
{
	return a->sa_flags & SA_SIGINFO ? (void *)a->sa_sigaction : (void *)a->sa_handler;
}

/* No stack protector: its canary is read through %fs, which changes here */
static void __attribute__((no_stack_protector)) tramp(int sig, siginfo_t *si, void *uc)
{
	uint64_t fs = sts_tp();
	int upper = fs >= STS_UPPER_LO && fs < STS_UPPER_HI;
	const struct sigaction *a = &mpi[sig];

	if (upper)
		sts_wrfs(fsgsbase, lower_fs);
	if (a->sa_flags & SA_SIGINFO)
		a->sa_sigaction(sig, si, uc);
	else if (a->sa_handler != SIG_DFL && a->sa_handler != SIG_IGN)
		a->sa_handler(sig);
	if (upper)
		sts_wrfs(fsgsbase, fs);
}

int lh_sig_wrap(void)
{
	int n = 0;

	lower_fs = sts_tp();
	fsgsbase = (getauxval(AT_HWCAP2) & 2) ? 1 : 0;
	for (int s = 1; s < LH_NSIG; s++) {
		struct sigaction now, t;
		uintptr_t h;

		if (s == SIGKILL || s == SIGSTOP || s == LH_CKPT_SIGNAL || sigaction(s, NULL, &now) != 0)
			continue;
		h = (uintptr_t)handler_of(&now);
		if (now.sa_handler == SIG_DFL || now.sa_handler == SIG_IGN ||
		    (h >= STS_UPPER_LO && h < STS_UPPER_HI))
			continue;
		mpi[s] = now;
		memset(&t, 0, sizeof(t));
		t.sa_sigaction = tramp;
		t.sa_mask = now.sa_mask;
		t.sa_flags = now.sa_flags | SA_SIGINFO;
		if (sigaction(s, &t, NULL) == 0)
			n++;
	}
	return n;
}

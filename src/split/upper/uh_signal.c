/* uh_signal.c - the program's signal handlers run on the program's TLS
 * (docs/split.md, "Signals").
 *
 * While a thread of the program is inside an MPI call, its FS base is the
 * lower half's: a signal arriving then would run the program's handler on
 * the lower half's TLS (its errno, its __thread variables, its stack
 * guard), reading and writing the lower half's thread block at the
 * program's offsets. So the program's sigaction, signal and bsd_signal are
 * these (this library comes before libc in the program's lookup scope):
 * the kernel is given trampoline() for every handler, the program's own
 * goes in a table here. trampoline() finds the lower half's FS base in
 * place when the thread was inside (%fs:0 is the thread block's own
 * address), puts the program's back for the handler (the uh_fs of the
 * lower-half TLS it borrows, which sts_enter wrote before it switched) and
 * the lower half's after it.
 * sigaction's old action and a query give back the program's own handler.
 *
 * The table is in the upper half's memory, and the kernel's actions (the
 * trampoline's address) are saved and restored by the checkpoint: both
 * come back at a restart. Limits: libc's internal callers (sysv_signal,
 * sigset) are not followed. Fortran programs look these up after libc and
 * are not covered.
 */
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>

#include "uh.h"

typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);

static struct sigaction prog[NSIG];   /* the program's actions, where wrapped */
static sigaction_fn real_sigaction;

static void trampoline(int sig, siginfo_t *si, void *uc)
{
	uint64_t lh = sts_tp();
	const struct sts_tls *inside = NULL;
	struct sigaction a = prog[sig];

	uint64_t one = 0;

	for (uint32_t i = 0; i < sts_lh->ntls && !inside; i++)
		if (sts_lh->tls[i].lh_fs == lh)
			inside = &sts_lh->tls[i];
	if (inside)
		sts_wrfs((int)sts_lh->fsgsbase, inside->uh_fs);
	else
		one = sts_out_of();   /* inside with one thread pointer (split_onetls) */
	if (a.sa_flags & SA_RESETHAND)   /* the kernel's is SIG_DFL again */
		prog[sig].sa_handler = SIG_DFL;
	if (a.sa_flags & SA_SIGINFO)
		a.sa_sigaction(sig, si, uc);
	else if (a.sa_handler != SIG_DFL && a.sa_handler != SIG_IGN)
		a.sa_handler(sig);
	if (inside)
		sts_wrfs((int)sts_lh->fsgsbase, lh);
	sts_back_in(one);
}

static int is_handler(const struct sigaction *a)
{
	return (a->sa_flags & SA_SIGINFO) ||
	       (a->sa_handler != SIG_DFL && a->sa_handler != SIG_IGN);
}

static int wrapped(const struct sigaction *k)
{
	return (k->sa_flags & SA_SIGINFO) && k->sa_sigaction == trampoline;
}

int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	struct sigaction k, before;
	int ret;

	if (!real_sigaction) {
		real_sigaction = (sigaction_fn)dlsym(RTLD_NEXT, "sigaction");
		if (!real_sigaction) {
			errno = ENOSYS;
			return -1;
		}
	}
	if (sig < 1 || sig >= NSIG || !act || !is_handler(act)) {
		ret = real_sigaction(sig, act, old);
		if (ret == 0 && old && sig >= 1 && sig < NSIG && wrapped(old))
			*old = prog[sig];
		return ret;
	}
	/* the program's first, so the trampoline never finds an old one */
	before = prog[sig];
	prog[sig] = *act;
	k = *act;
	k.sa_sigaction = trampoline;
	k.sa_flags |= SA_SIGINFO;
	ret = real_sigaction(sig, &k, old);
	if (ret != 0)
		prog[sig] = before;
	else if (old && wrapped(old))
		*old = before;
	return ret;
}

/* glibc's signal: BSD semantics (the handler stays, calls restart) */
sighandler_t signal(int sig, sighandler_t handler)
{
	struct sigaction a, old;

	memset(&a, 0, sizeof(a));
	a.sa_handler = handler;
	sigemptyset(&a.sa_mask);
	if (sig >= 1 && sig < NSIG)
		sigaddset(&a.sa_mask, sig);
	a.sa_flags = SA_RESTART;
	if (sigaction(sig, &a, &old) != 0)
		return SIG_ERR;
	return old.sa_handler;
}

sighandler_t bsd_signal(int sig, sighandler_t handler)
{
	return signal(sig, handler);
}

/* lh_lazy.c - lazy restore of the upper half: the rank runs before its
 * large runs of pages are in memory (docs/split.md, "Lazy restore").
 *
 * lh_restore() maps every region and hands the large anonymous runs
 * (pieces) here instead of reading them; a thread of the lower half (the
 * process-image core's, pimg/pimg_lazy.h) then reads them from the image,
 * serving first any page some thread touches before its turn. Until the
 * rank enters the upper half (lh_lazy_go) it reads only touched pages.
 * A checkpoint waits for it first (lh_lazy_wait), since the pagemap would
 * not show pages that are not in yet. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/err.h"
#include "image/image.h"
#include "lh.h"
#include "lh_fds.h"
#include "lh_ckpt.h"
#include "pimg/pimg_lazy.h"

static struct pimg_lazy *lazy;
static int lazy_rank;

static void fatal(void *arg, const char *what)
{
	(void)arg;
	lh_die("rank %d: lazy restore: %s; the restarted rank cannot go on", lazy_rank, what);
}

static void done(void *arg, const struct pimg_lazy_stats *st)
{
	(void)arg;
	lh_log(LOG_INFO, "rank %d: lazy restore done, %llu MiB in %.3f s, "
	       "%llu touched pages served first", lazy_rank,
			(unsigned long long)(st->bytes >> 20), st->seconds,
			(unsigned long long)st->served);
}

static const struct pimg_lazy_ops lazy_ops = { fatal, done };

int lh_lazy_start(struct img_reader *img, int rank, const struct lh_lazy_piece *v, unsigned n)
{
	struct pimg_lazy_piece *p;
	sigset_t all, old;
	int fd, ret;

	if (lazy || n == 0)
		return -EBUSY;
	p = calloc(n, sizeof(*p));
	if (!p)
		return err_set(-ENOMEM, "cannot start the lazy restore: %s", strerror(ENOMEM));
	for (unsigned i = 0; i < n; i++)
		p[i] = (struct pimg_lazy_piece){ .addr = v[i].addr, .npages = v[i].npages,
						 .off = v[i].off, .section = v[i].sec };
	/* not UFFD_USER_MODE_ONLY: the kernel's own touches must wait too */
	fd = lh_fd_take((int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
	if (fd < 0) {
		free(p);
		return err_set(-errno, "userfaultfd: %s", strerror(errno));
	}
	lazy_rank = rank;
	/* no signal of the program's may run its handler there, on the
	 * lower half's TLS: the thread starts with every one blocked */
	sigfillset(&all);
	sigdelset(&all, LH_CKPT_SIGNAL);   /* answered as the lower half's */
	pthread_sigmask(SIG_BLOCK, &all, &old);
	ret = pimg_lazy_start(fd, img, p, n, 0, &lazy_ops, NULL, &lazy);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	free(p);
	return ret;
}

void lh_lazy_go(void)
{
	pimg_lazy_go(lazy);
}

void lh_lazy_wait(void)
{
	pimg_lazy_wait(&lazy);
}

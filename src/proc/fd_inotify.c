/* fd_inotify.c - an inotify instance and its watches. The kernel tells a
 * watch's inode, not its path, so the single-process agent notes the path
 * of every inotify_add_watch the program makes (src/proc/inject/agent.c)
 * and adds a "watch:" line per watch to the fdinfo text; a restart adds
 * each watch again by path, with its mask, at its number (wd), in the
 * order of the numbers. Events queued but not read at the checkpoint are
 * not kept; events after the restart are delivered. */
#include "proc/fd_ops.h"

#include "common/err.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

/* a watch gets the next free number; past this many tries, give up */
#define WD_TRIES 100000

struct watch {
	int wd;
	unsigned mask;
	char *path;
};

/* The split process has no note of the paths: it refuses a watch. */
static int inotify_describe(int fd, struct proc_fd_entry *e, const struct stat *st,
			    const struct proc_fd_entry *v, size_t n)
{
	int ret = proc_fd_read_fdinfo(fd, e);

	(void)st;
	(void)v;
	(void)n;
	if (!ret && proc_fd_info_field(e, "inotify wd:"))
		return err_set(-ENOTSUP, "cannot checkpoint: fd %d is an inotify instance with watches, "
			       "whose paths only the single-process agent notes", fd);
	return ret;
}

/* The path of watch wd in f's "watch:" lines (malloc'ed), or NULL. */
static char *watch_path(const struct proc_fd_entry *f, int wd)
{
	const char *text = f->data, *end = text + f->rec.data_len;

	for (const char *l = text; l && l < end;) {
		const char *nl = memchr(l, '\n', (size_t)(end - l));
		int w, skip = 0;

		if (!nl)
			nl = end;
		if (sscanf(l, "watch:\t%x %n", (unsigned *)&w, &skip) == 1 && skip && w == wd)
			return strndup(l + skip, (size_t)(nl - l - skip));
		l = nl < end ? nl + 1 : NULL;
	}
	return NULL;
}

static int by_wd(const void *a, const void *b)
{
	return ((const struct watch *)a)->wd - ((const struct watch *)b)->wd;
}

/* The watches of f, by number; their count or a negative errno. */
static int watches(const struct proc_fd_entry *f, struct watch **out)
{
	const char *text = f->data, *end = text + f->rec.data_len;
	struct watch *w = NULL;
	int n = 0;

	for (const char *l = text; l && l < end;) {
		unsigned wd, mask;
		unsigned long ino;
		unsigned sdev;

		if (sscanf(l, "inotify wd:%x ino:%lx sdev:%x mask:%x", &wd, &ino, &sdev, &mask) == 4) {
			struct watch *p = realloc(w, (size_t)(n + 1) * sizeof(*w));

			if (!p)
				goto fail;
			w = p;
			w[n] = (struct watch){ (int)wd, mask & ~(unsigned)(IN_MASK_ADD | IN_MASK_CREATE),
					       watch_path(f, (int)wd) };
			if (!w[n++].path) {
				err_set(-EBADMSG, "the image has no path for watch %u of inotify fd %d",
					wd, f->rec.fd);
				goto fail;
			}
		}
		l = memchr(l, '\n', (size_t)(end - l));
		if (l)
			l++;
	}
	qsort(w, (size_t)n, sizeof(*w), by_wd);
	*out = w;
	return n;
fail:
	for (int i = 0; i < n; i++)
		free(w[i].path);
	free(w);
	return -EBADMSG;
}

/* Watch w again at its number: numbers are given in turn, so one that
 * comes out lower is removed and added again until it is w's. */
static int add_watch(const struct proc_fd_entry *f, int fd, const struct watch *w)
{
	int got = inotify_add_watch(fd, w->path, w->mask);

	for (int tries = 0; got > 0 && got < w->wd && tries < WD_TRIES; tries++) {
		inotify_rm_watch(fd, got);
		got = inotify_add_watch(fd, w->path, w->mask);
	}
	if (got < 0)
		return err_set(-errno, "cannot watch %s again for inotify fd %d: %s", w->path,
			       f->rec.fd, strerror(errno));
	if (got != w->wd)
		return err_set(-EEXIST, "cannot watch %s again as watch %d of inotify fd %d (got %d)",
			       w->path, w->wd, f->rec.fd, got);
	return 0;
}

/* The IN_IGNORED events of the watches removed on the way. */
static void drain(int fd)
{
	char buf[4096];

	while (read(fd, buf, sizeof(buf)) > 0)
		;
}

static int inotify_reopen(const struct proc_fd_entry *v, size_t n, size_t i, int floor)
{
	const struct proc_fd_entry *f = &v[i];
	struct watch *w = NULL;
	int fd, nw, ret = 0;

	(void)n;
	nw = watches(f, &w);
	if (nw < 0)
		return nw;
	fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
	if (fd < 0)
		ret = proc_fd_error(f, "cannot recreate inotify", errno);
	for (int k = 0; !ret && k < nw; k++)
		ret = add_watch(f, fd, &w[k]);
	for (int k = 0; k < nw; k++)
		free(w[k].path);
	free(w);
	if (fd >= 0 && !ret) {
		drain(fd);
		if (!(f->rec.flags & O_NONBLOCK))
			(void)fcntl(fd, F_SETFL, 0);
		return proc_fd_place(f, proc_fd_move_high(fd, floor));
	}
	if (fd >= 0)
		close(fd);
	return ret;
}

const struct proc_fd_ops proc_fd_inotify_ops = {
	.describe = inotify_describe,
	.reopen = inotify_reopen,
};

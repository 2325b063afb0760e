/* inotify.c - an inotify instance keeps its watches (by path, at their
 * numbers, with their masks) across checkpoint/restart: files created and
 * removed after a restart are reported. */
#include "zdtm.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

/* The next event: its wd, mask and name. */
static int next_event(int fd, int *wd, unsigned *mask, char *name, size_t len)
{
	char buf[4096] __attribute__((aligned(8)));
	struct inotify_event *e = (struct inotify_event *)buf;
	ssize_t n = read(fd, buf, sizeof(buf));

	if (n < (ssize_t)sizeof(*e))
		return -1;
	*wd = e->wd;
	*mask = e->mask;
	n = e->len ? (ssize_t)strnlen(e->name, len - 1) : 0;
	memcpy(name, e->name, (size_t)n);
	name[n] = 0;
	return 0;
}

int main(void)
{
	int fd = inotify_init1(0), gone, w1, w2, wd;
	unsigned mask;
	char name[256];

	mkdir("made", 0755);
	mkdir("gone", 0755);
	mkdir("unwatched", 0755);
	close(open("gone/victim", O_CREAT | O_WRONLY, 0644));
	w1 = inotify_add_watch(fd, "made", IN_CREATE);
	gone = inotify_add_watch(fd, "unwatched", IN_ALL_EVENTS);
	inotify_rm_watch(fd, gone);
	if (next_event(fd, &wd, &mask, name, sizeof(name)) != 0 || !(mask & IN_IGNORED))
		zdtm_fail("no IN_IGNORED for the removed watch");
	w2 = inotify_add_watch(fd, "gone", IN_DELETE);
	if (fd < 0 || w1 < 0 || w2 != w1 + 2) {
		zdtm_fail("setup: fd %d, watches %d %d", fd, w1, w2);
		return zdtm_end();
	}
	zdtm_ready();

	close(open("made/new", O_CREAT | O_WRONLY, 0644));
	if (next_event(fd, &wd, &mask, name, sizeof(name)) != 0 || wd != w1 || !(mask & IN_CREATE) ||
	    strcmp(name, "new") != 0)
		zdtm_fail("create after the restart: wd %d mask %x name '%s' (want %d IN_CREATE new)",
			  wd, mask, name, w1);
	unlink("gone/victim");
	if (next_event(fd, &wd, &mask, name, sizeof(name)) != 0 || wd != w2 || !(mask & IN_DELETE) ||
	    strcmp(name, "victim") != 0)
		zdtm_fail("delete after the restart: wd %d mask %x name '%s' (want %d IN_DELETE victim)",
			  wd, mask, name, w2);
	if (inotify_add_watch(fd, "made", IN_CREATE) != w1)
		zdtm_fail("the watch of made has another number after the restart");
	return zdtm_end();
}

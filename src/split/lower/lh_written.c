/* lh_written.c - the regular files the program opened for writing and
 * closed, as they were at the checkpoint (docs/split.md "Files written
 * after the checkpoint").
 *
 * The upper half keeps the list (uh_files.c, in its own memory, so it
 * survives restarts with it). At a checkpoint a listed file that is gone
 * leaves the list (its place goes to the next file the program writes),
 * files beyond the list's STS_WRITTEN_MAX are said once per checkpoint,
 * and the others are saved as src/proc/written.c saves a single
 * process's: every one the program does not have open for writing now
 * (such an open one is its descriptor's: lh_fds.c); a restart writes them back before the
 * upper half runs again.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/err.h"
#include "lh.h"
#include "lh_written.h"
#include "proc/written.h"

static struct sts_written *list(void)
{
	const struct sts_uh_callbacks *uh = lh_info->uh;

	return uh && uh->written_magic == STS_WRITTEN_MAGIC ? uh->written : NULL;
}

/* Forget the listed files that are gone, so that the list has room for
 * the next ones; say how many opens found it full since the last
 * checkpoint. The upper half is parked, and a thread holds the lock only
 * with every signal blocked (uh_files.c), so the lock is free: taken once,
 * and left alone if not. */
static void forget_gone(struct sts_written *l)
{
	if (!l || l->n > STS_WRITTEN_MAX || __atomic_exchange_n(&l->lock, 1, __ATOMIC_ACQUIRE))
		return;
	sts_written_forget_gone(l);
	if (l->dropped)
		fprintf(stderr, "stasis: rank %d: %u opens for writing since the last checkpoint "
			"found the list of %d written files full: those files are not saved (a "
			"restart finds them as they are then)\n", lh_info->world_rank, l->dropped,
			STS_WRITTEN_MAX);
	l->dropped = 0;
	__atomic_store_n(&l->lock, 0, __ATOMIC_RELEASE);
}

/* Has the process a descriptor of dev/ino open for writing (its record
 * saves it, or cuts it back)? One open only for reading restores no
 * contents: the file is saved as a closed one */
static int open_now(uint64_t dev, uint64_t ino, void *arg)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int found = 0;

	(void)arg;
	if (!d)
		return 0;
	while (!found && (e = readdir(d))) {
		char link[300];
		struct stat st;

		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		snprintf(link, sizeof(link), "/proc/self/fd/%s", e->d_name);
		found = stat(link, &st) == 0 && (uint64_t)st.st_dev == dev &&
			(uint64_t)st.st_ino == ino &&
			(fcntl(atoi(e->d_name), F_GETFL) & O_ACCMODE) != O_RDONLY;
	}
	closedir(d);
	return found;
}

static const char *who(void)
{
	static char name[32];

	snprintf(name, sizeof(name), "rank %d", lh_info->world_rank);
	return name;
}

int lh_written_dump(struct img_writer *w)
{
	struct sts_written *l = list();
	uint32_t total, n = 0;
	const char **paths;
	int ret;

	forget_gone(l);
	total = l && l->n <= STS_WRITTEN_MAX ? l->n : 0;   /* else not the upper half's list */
	paths = calloc(total + 1, sizeof(*paths));
	if (!paths)
		return err_set(-ENOMEM, "out of memory");
	for (uint32_t i = 0; i < total; i++)
		if (memchr(l->v[i].path, 0, sizeof(l->v[i].path)))
			paths[n++] = l->v[i].path;
	ret = proc_written_dump(w, paths, n, who(), open_now, NULL);
	free(paths);
	return ret;
}

int lh_written_read(struct img_reader *img, void **out, size_t *len)
{
	return proc_written_read(img, out, len);
}

int lh_written_back(const void *sec, size_t len)
{
	return proc_written_back(sec, len, who());
}

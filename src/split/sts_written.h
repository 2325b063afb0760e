/* sts_written.h - the regular files the upper half opened with write
 * access (open, openat, creat, fopen "w"/"a"/"+": uh_files.c), by absolute
 * path, with device and inode at the open; in the upper half's memory, so
 * the list comes back with it at a restart. At each checkpoint the lower
 * half saves those the program no longer has open (src/split/lower/lh_written.c,
 * docs/split.md "Files written after the checkpoint"). The lower half
 * reads it with the upper half parked; the upper half adds under lock.
 *
 * The list and its wrappers are libstasis-files.so, which the lower half
 * puts first in the upper half's lookup order (ld.so --preload,
 * src/split/lower/lh_main.c); the stand-in MPI libraries hand its address to the
 * lower half (sts_uh_callbacks.written). A single process's agent
 * (libstasis-inject.so) holds them too and sends the list to the
 * coordinator at each checkpoint (src/proc/inject/agent.c).
 */
#ifndef STS_WRITTEN_H
#define STS_WRITTEN_H

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

#define STS_WRITTEN_MAGIC 0x316e657474697257ull   /* "Written1" */
#define STS_WRITTEN_MAX 256
#define STS_WRITTEN_PATH 4096
struct sts_written_file {
	uint64_t dev, ino;
	char path[STS_WRITTEN_PATH];
};
struct sts_written {
	uint32_t n;                 /* entries in v, in the order first opened */
	uint32_t lock;
	uint32_t dropped;           /* files beyond STS_WRITTEN_MAX, not recorded */
	uint32_t pad;
	struct sts_written_file v[STS_WRITTEN_MAX];
};

/* the list (uh_files.c, libstasis-files.so) */
extern struct sts_written sts_written;

/* Drop the listed files that no longer exist, so that the next ones have
 * room (the caller holds l's lock; a path without its end, in a list
 * damaged by the program, is kept and never saved) */
static inline void sts_written_forget_gone(struct sts_written *l)
{
	uint32_t k = 0;
	struct stat st;

	for (uint32_t i = 0; i < l->n; i++) {
		if (memchr(l->v[i].path, 0, sizeof(l->v[i].path)) &&
		    stat(l->v[i].path, &st) != 0 && errno == ENOENT)
			continue;
		if (k != i)
			l->v[k] = l->v[i];
		k++;
	}
	l->n = k;
}

#endif

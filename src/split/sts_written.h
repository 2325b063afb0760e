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
#include <unistd.h>

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
/* the tree's log below, or -1 (a single process's agent sets it) */
extern int sts_written_log;

/* Drop the files of v[0..*n) that no longer exist, so that the next
 * ones have room (a path without its end, in a list damaged by the
 * program, is kept and never saved) */
static inline void sts_written_files_forget_gone(struct sts_written_file *v, uint32_t *n)
{
	uint32_t k = 0;
	struct stat st;

	for (uint32_t i = 0; i < *n; i++) {
		if (memchr(v[i].path, 0, sizeof(v[i].path)) &&
		    stat(v[i].path, &st) != 0 && errno == ENOENT)
			continue;
		if (k != i)
			v[k] = v[i];
		k++;
	}
	*n = k;
}

/* ... in l (the caller holds l's lock) */
static inline void sts_written_forget_gone(struct sts_written *l)
{
	sts_written_files_forget_gone(l->v, &l->n);
}

/* path (len bytes, absolute), dev/ino, opened for writing, into v[0..*n)
 * of at most cap: 1 if it was not listed so (added, or its path now
 * another inode: the newest), 0 if it was, -1 if the list is full */
static inline int sts_written_files_add(struct sts_written_file *v, uint32_t *n, uint32_t cap,
					const char *path, size_t len, uint64_t dev, uint64_t ino)
{
	uint32_t i;

	for (i = 0; i < *n && strcmp(v[i].path, path) != 0; i++)
		;
	if (i < *n && v[i].dev == dev && v[i].ino == ino)
		return 0;
	if (i == *n && *n == cap)
		return -1;
	if (i == *n)
		(*n)++;
	v[i].dev = dev;
	v[i].ino = ino;
	memcpy(v[i].path, path, len + 1);
	return 1;
}

/* The file dev/ino renamed (or linked) to path (len bytes): the list
 * follows it by its inode; the listed file it replaced is gone */
static inline void sts_written_files_moved(struct sts_written_file *v, uint32_t *n, uint64_t dev,
					   uint64_t ino, const char *path, size_t len)
{
	uint32_t k = 0;

	for (uint32_t i = 0; i < *n; i++) {
		struct sts_written_file *f = &v[i];

		if (f->dev == dev && f->ino == ino)
			memcpy(f->path, path, len + 1);
		else if (!strcmp(f->path, path))
			continue;   /* the file it replaced: gone */
		if (k != i)
			v[k] = v[i];
		k++;
	}
	*n = k;
}

/* The listed paths under directory old, now under path (len bytes): a
 * file written before its directory was renamed is saved where it is */
static inline void sts_written_files_dir_moved(struct sts_written_file *v, uint32_t *n,
					       const char *old, const char *path, size_t len)
{
	size_t on = strlen(old);
	uint32_t k = 0;

	for (uint32_t i = 0; i < *n; i++) {
		char *p = v[i].path;
		size_t rest;

		if (!strncmp(p, path, len) && p[len] == '/')
			continue;   /* under the directory it replaced, which was empty: gone */
		if (k != i)
			v[k] = v[i];
		p = v[k++].path;
		if (strncmp(p, old, on) != 0 || p[on] != '/')
			continue;
		rest = strnlen(p + on, STS_WRITTEN_PATH - on);
		if (on + rest >= STS_WRITTEN_PATH || len + rest >= STS_WRITTEN_PATH)
			continue;   /* no end (damaged), or too long under its new name */
		memmove(p + len, p + on, rest + 1);
		memcpy(p, path, len);
	}
	*n = k;
}

/* ---- the list of a process tree (docs/transparent.md, "Files written
 * and closed") ----
 *
 * A single process's agent also appends what it notes to one log that
 * every process of the job's tree shares: the job directory's
 * written.log (a memfd where it cannot be made; a restart reads what the
 * killed run appended to it), which the coordinator of `stasis run` or
 * `stasis restart` made and owns, named in the environment
 * ($STASIS_WRITTEN_FD), inherited by fork and kept across exec at a
 * descriptor >= 900 (close-on-exec, let through by the exec wrappers like
 * the channel), opened O_APPEND: each record is one write(2), which the
 * kernel appends whole, so no lock is shared between processes. The
 * coordinator reads it with every process parked and replays it
 * (sts_written_replay) into the tree's list; a file written only by a
 * child that ended, or by the program before an exec, is in it. */
enum sts_written_op {
	STS_WRITTEN_OPEN = 1,   /* path opened for writing: dev, ino, path */
	STS_WRITTEN_MOVED,      /* the file dev/ino renamed or linked to path */
	STS_WRITTEN_DIR,        /* a directory renamed: old path, NUL, new path */
	STS_WRITTEN_CREATED,    /* as OPEN, by an open that made the file (O_CREAT,
				 * and it did not exist just before) */
};

struct sts_written_rec {
	uint32_t op;
	uint32_t len;           /* bytes after this header: the path(s), each NUL-ended */
	uint64_t dev, ino;
};

/* the log stops growing here (the coordinator says so) */
#define STS_WRITTEN_LOG_MAX (64ull << 20)

/* One record into the log fd: op, dev/ino, path and, for
 * STS_WRITTEN_DIR, the new path to (else NULL); a single write(2) of an
 * O_APPEND descriptor, appended whole beside other processes'. Nothing
 * once the log reached STS_WRITTEN_LOG_MAX. */
static inline void sts_written_log_put(int fd, uint32_t op, uint64_t dev, uint64_t ino,
				       const char *path, const char *to)
{
	struct {
		struct sts_written_rec r;
		char paths[2 * STS_WRITTEN_PATH];
	} b;
	size_t pl = strlen(path) + 1, tl = to ? strlen(to) + 1 : 0;

	if (fd < 0 || pl + tl > sizeof(b.paths) ||
	    lseek(fd, 0, SEEK_END) >= (off_t)STS_WRITTEN_LOG_MAX)
		return;
	b.r = (struct sts_written_rec){ op, (uint32_t)(pl + tl), dev, ino };
	memcpy(b.paths, path, pl);
	if (to)
		memcpy(b.paths + pl, to, tl);
	(void)!write(fd, &b, sizeof(b.r) + pl + tl);
}

/* What sts_written_replay takes of the log */
enum sts_written_replay_mode {
	STS_REPLAY_ALL,         /* every file opened for writing */
	STS_REPLAY_CREATED,     /* only the files an open made */
	STS_REPLAY_MOVES,       /* no file: only where v's files were moved */
};

/* Replay the log's len bytes into v[0..*n) of at most cap, taking what
 * mode says (enum sts_written_replay_mode), with where the files went
 * since; the files that found it full counted in *dropped. Returns the
 * bytes that were whole records (a damaged record ends the replay). */
static inline size_t sts_written_replay(const char *log, size_t len, struct sts_written_file *v,
					uint32_t *n, uint32_t cap, uint32_t *dropped,
					enum sts_written_replay_mode mode)
{
	size_t off = 0;

	while (len - off >= sizeof(struct sts_written_rec)) {
		struct sts_written_rec r;
		const char *p = log + off + sizeof(r), *q;
		size_t pl;

		memcpy(&r, log + off, sizeof(r));
		if (r.len == 0 || r.len > 2 * STS_WRITTEN_PATH ||
		    len - off - sizeof(r) < r.len || p[r.len - 1] != 0)
			break;
		pl = strnlen(p, r.len);
		if (p[0] != '/' || pl >= STS_WRITTEN_PATH)
			break;
		if (r.op == STS_WRITTEN_OPEN || r.op == STS_WRITTEN_CREATED) {
			if ((mode == STS_REPLAY_ALL ||
			     (mode == STS_REPLAY_CREATED && r.op == STS_WRITTEN_CREATED)) &&
			    sts_written_files_add(v, n, cap, p, pl, r.dev, r.ino) < 0)
				(*dropped)++;
		} else if (r.op == STS_WRITTEN_MOVED) {
			sts_written_files_moved(v, n, r.dev, r.ino, p, pl);
		} else if (r.op == STS_WRITTEN_DIR) {
			q = p + pl + 1;
			if (pl + 1 >= r.len || q[0] != '/' || strlen(q) >= STS_WRITTEN_PATH)
				break;
			sts_written_files_dir_moved(v, n, p, q, strlen(q));
		} else {
			break;
		}
		off += sizeof(r) + r.len;
	}
	return off;
}

#endif

/* tier.h - storage tiers: where the store's bytes go (private to store/).
 *
 * A tier is a table of the file operations the store needs, chosen by name.
 * Every byte the store reads or writes, and every directory it creates,
 * renames or removes, goes through these operations, so that a test can
 * register a tier that records or fails them, and later tiers (redundancy,
 * asynchronous flush to the global file system) can wrap an existing one.
 *
 * Handles are file descriptors: both tiers today are POSIX directories, and
 * the image reader takes a descriptor (img_open_fd). Every operation returns
 * 0 (or a byte count) or a negative errno; none sets err_msg(), the store
 * does, because only it knows which checkpoint and file an error concerns.
 */
#ifndef STASIS_STORE_TIER_H
#define STASIS_STORE_TIER_H

#include "common/config.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define STORE_DIRECT_ALIGN 4096u

struct store_stat {
	uint64_t size;
	int is_dir;
	int is_file;            /* a regular file */
	uint64_t id;            /* the file itself (device and inode): the same
				   name may come to name another file */
};

struct store_tier_ops {
	const char *name;
	enum cfg_key root_key;  /* configuration key holding the default root */

	/* Directories. mkdir_p creates every missing component (existing ones
	 * are fine); mkdir creates exactly one and fails with -EEXIST if it is
	 * there, which is how concurrent writers agree on a checkpoint name. */
	int (*mkdir_p)(const char *path);
	int (*mkdir)(const char *path);
	/* Make a directory's entries (creations, renames) durable. */
	int (*fsync_dir)(const char *path);
	/* Entry names of a directory except "." and "..", unsorted.
	 * out: *names (array and strings malloc'd). */
	int (*list)(const char *path, char ***names, size_t *count);
	/* Remove a directory and everything below it; -ENOENT if absent. */
	int (*remove_tree)(const char *path);

	/* Files. create: a new file for writing, -EEXIST if the name exists.
	 * open_append: read and append, created (empty) if missing.
	 * open_read: read only. */
	int (*create)(const char *path, int *fd);
	/* Optional (NULL: none): a second, write-only descriptor on a file
	 * created by `create`, bypassing the page cache (O_DIRECT). Writes on it
	 * must be aligned to STORE_DIRECT_ALIGN in address, length and offset.
	 * -EINVAL or -EOPNOTSUPP where the file system has no direct I/O. */
	int (*open_direct)(const char *path, int *fd);
	/* Optional (NULL: none): an existing file for writing from its start,
	 * neither created nor truncated, and setting a file's length; the store
	 * needs both to write over a recycled file (store_set_recycle). */
	int (*open_write)(const char *path, int *fd);
	int (*truncate)(int fd, uint64_t size);
	/* Optional: give a file its storage up to size (posix_fallocate). */
	int (*allocate)(int fd, uint64_t size);
	int (*open_append)(const char *path, int *fd);
	int (*open_read)(const char *path, int *fd);
	/* One write(2) (a short count is possible) and one pread(2); EINTR
	 * is retried. */
	ssize_t (*write)(int fd, const void *buf, size_t len);
	ssize_t (*pread)(int fd, void *buf, size_t len, uint64_t offset);
	ssize_t (*pwrite)(int fd, const void *buf, size_t len, uint64_t offset);
	int (*fsync)(int fd);
	int (*close)(int fd);
	/* Whole-file advisory lock, shared or exclusive, held by the open file
	 * (released by unlock, close or the death of the process). */
	int (*lock)(int fd, int exclusive);
	int (*unlock)(int fd);
	/* Optional (NULL: never taken): the exclusive lock without waiting,
	 * -EWOULDBLOCK while anyone holds a lock on the file. */
	int (*trylock)(int fd);
	int (*fstat)(int fd, struct store_stat *st);
	/* Optional (NULL: none): how far a file written over a spare is
	 * written, kept beside it (a user xattr), since its length is the
	 * spare's: mark sets it (len < 0 removes it), marked reads it
	 * (-ENODATA without one). */
	int (*mark)(int fd, int64_t len);
	int (*marked)(int fd, uint64_t *len);

	/* Names. stat: -ENOENT if absent. rename never replaces: -EEXIST if
	 * `to` exists, so a committed file cannot be overwritten. */
	int (*stat)(const char *path, struct store_stat *st);
	int (*rename)(const char *from, const char *to);
	int (*unlink)(const char *path);
	/* Optional (NULL: stat each path): a directory held open (closed with
	 * close), and one of its entries stat'ed by name through it, as stat
	 * does, so that a seal's check of 65,536 images costs no path walk
	 * each. */
	int (*open_dir)(const char *path, int *fd);
	int (*stat_at)(int dirfd, const char *name, struct store_stat *st);
};

/* The tier registered under this name, or NULL. "local" and "global" always
 * exist. */
const struct store_tier_ops *store_tier_find(const char *name);

/* Add a tier (tests, wrappers). The table is not copied: it must outlive its
 * use. -EEXIST if the name is taken, -ENOSPC if the registry is full. Not
 * thread-safe: register before opening stores. */
int store_tier_register(const struct store_tier_ops *ops);

/* Names of the registered tiers, "|"-separated, for messages. */
void store_tier_names(char *buf, size_t len);

#endif

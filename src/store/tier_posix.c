/* tier_posix.c - the "local" and "global" tiers: plain POSIX directories.
 *
 * Both tiers are a directory tree on a file system that honours fsync,
 * rename and flock; they differ only in name and in the configuration key of
 * their default root (local_dir: a RAM disk or node-local SSD; global_dir:
 * the parallel file system). Also the registry of tiers (tier.h).
 */
#include "store/tier.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#define DIR_MODE 0755
#define FILE_MODE 0644

static int neg_errno(int ret)
{
	return ret < 0 ? -errno : 0;
}

static int posix_mkdir(const char *path)
{
	return neg_errno(mkdir(path, DIR_MODE));
}

static int posix_mkdir_p(const char *path)
{
	char buf[PATH_MAX];
	size_t len = strlen(path);
	struct stat st;

	if (len == 0 || len >= sizeof(buf))
		return len ? -ENAMETOOLONG : -EINVAL;
	memcpy(buf, path, len + 1);
	/* Create each component in turn; EEXIST is fine as long as what exists
	 * is a directory, which the final stat checks for all of them. */
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, DIR_MODE) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, DIR_MODE) < 0 && errno != EEXIST)
		return -errno;
	if (stat(buf, &st) < 0)
		return -errno;
	return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

static int posix_fsync_dir(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int ret;

	if (fd < 0)
		return -errno;
	ret = neg_errno(fsync(fd));
	close(fd);
	return ret;
}

static void free_names(char **names, size_t count)
{
	for (size_t i = 0; i < count; i++)
		free(names[i]);
	free(names);
}

static int posix_list(const char *path, char ***names, size_t *count)
{
	char **v = NULL, **grown;
	size_t n = 0, cap = 0;
	struct dirent *de;
	DIR *dir;
	int ret = 0;

	dir = opendir(path);
	if (!dir)
		return -errno;
	errno = 0;
	while ((de = readdir(dir)) != NULL) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 16;
			grown = realloc(v, cap * sizeof(*v));
			if (!grown)
				goto out_nomem;
			v = grown;
		}
		v[n] = strdup(de->d_name);
		if (!v[n])
			goto out_nomem;
		n++;
		errno = 0;
	}
	if (errno)
		ret = -errno;
	closedir(dir);
	if (ret) {
		free_names(v, n);
		return ret;
	}
	*names = v;
	*count = n;
	return 0;

out_nomem:
	closedir(dir);
	free_names(v, n);
	return -ENOMEM;
}

/* Remove everything under the directory open as dfd, without following
 * symbolic links (a link inside a checkpoint must never take prune outside). */
static int remove_contents(int dfd)
{
	struct dirent *de;
	DIR *dir;
	int ret = 0;

	dir = fdopendir(dfd);
	if (!dir) {
		close(dfd);
		return -errno;
	}
	while ((de = readdir(dir)) != NULL) {
		struct stat st;
		int sub;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (fstatat(dirfd(dir), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			ret = -errno;
			break;
		}
		if (S_ISDIR(st.st_mode)) {
			sub = openat(dirfd(dir), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub < 0 || (ret = remove_contents(sub)) != 0) {
				ret = ret ? ret : -errno;
				break;
			}
			if (unlinkat(dirfd(dir), de->d_name, AT_REMOVEDIR) < 0) {
				ret = -errno;
				break;
			}
		} else if (unlinkat(dirfd(dir), de->d_name, 0) < 0) {
			ret = -errno;
			break;
		}
	}
	closedir(dir);
	return ret;
}

static int posix_remove_tree(const char *path)
{
	int dfd, ret;

	dfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	ret = remove_contents(dfd);
	if (ret)
		return ret;
	return neg_errno(rmdir(path));
}

static int open_fd(const char *path, int flags, int *fd)
{
	int ret = open(path, flags | O_CLOEXEC, FILE_MODE);

	if (ret < 0)
		return -errno;
	*fd = ret;
	return 0;
}

static int posix_create(const char *path, int *fd)
{
	return open_fd(path, O_WRONLY | O_CREAT | O_EXCL, fd);
}

static int posix_open_write(const char *path, int *fd)
{
	return open_fd(path, O_WRONLY, fd);
}

static int posix_truncate(int fd, uint64_t size)
{
	int ret;

	do
		ret = ftruncate(fd, (off_t)size);
	while (ret < 0 && errno == EINTR);
	return neg_errno(ret);
}

static int posix_allocate(int fd, uint64_t size)
{
	int ret;

	do
		ret = posix_fallocate(fd, 0, (off_t)size);
	while (ret == EINTR);
	return -ret;
}

static int posix_open_direct(const char *path, int *fd)
{
	struct statfs sfs;

	/* On a memory file system direct I/O saves nothing: it is one more
	 * copy through the staging buffer. */
	if (statfs(path, &sfs) == 0 && sfs.f_type == TMPFS_MAGIC)
		return -EOPNOTSUPP;
	return open_fd(path, O_WRONLY | O_DIRECT, fd);
}

static int posix_open_append(const char *path, int *fd)
{
	return open_fd(path, O_RDWR | O_APPEND | O_CREAT, fd);
}

static int posix_open_read(const char *path, int *fd)
{
	return open_fd(path, O_RDONLY, fd);
}

static ssize_t posix_write(int fd, const void *buf, size_t len)
{
	ssize_t n;

	do
		n = write(fd, buf, len);
	while (n < 0 && errno == EINTR);
	return n < 0 ? -errno : n;
}

static ssize_t posix_pread(int fd, void *buf, size_t len, uint64_t offset)
{
	ssize_t n;

	if (offset > (uint64_t)INT64_MAX)
		return -EINVAL;
	do
		n = pread(fd, buf, len, (off_t)offset);
	while (n < 0 && errno == EINTR);
	return n < 0 ? -errno : n;
}

static ssize_t posix_pwrite(int fd, const void *buf, size_t len, uint64_t offset)
{
	ssize_t n;

	if (offset > (uint64_t)INT64_MAX)
		return -EINVAL;
	do
		n = pwrite(fd, buf, len, (off_t)offset);
	while (n < 0 && errno == EINTR);
	return n < 0 ? -errno : n;
}

static int posix_fsync(int fd)
{
	return neg_errno(fsync(fd));
}

static int posix_close(int fd)
{
	/* Linux releases the descriptor even when close reports an error, so
	 * EINTR must not be retried. */
	return neg_errno(close(fd));
}

static int posix_lock(int fd, int exclusive)
{
	int ret;

	do
		ret = flock(fd, exclusive ? LOCK_EX : LOCK_SH);
	while (ret < 0 && errno == EINTR);
	return neg_errno(ret);
}

static int posix_trylock(int fd)
{
	int ret;

	do
		ret = flock(fd, LOCK_EX | LOCK_NB);
	while (ret < 0 && errno == EINTR);
	return neg_errno(ret);
}

#define WRITTEN_XATTR "user.stasis.written"

static int posix_mark(int fd, int64_t len)
{
	uint64_t v = (uint64_t)len;

	if (len < 0)
		return fremovexattr(fd, WRITTEN_XATTR) == 0 || errno == ENODATA ? 0 : -errno;
	return neg_errno(fsetxattr(fd, WRITTEN_XATTR, &v, sizeof(v), 0));
}

static int posix_marked(int fd, uint64_t *len)
{
	ssize_t n = fgetxattr(fd, WRITTEN_XATTR, len, sizeof(*len));

	return n == (ssize_t)sizeof(*len) ? 0 : n < 0 ? -errno : -ENODATA;
}

static int posix_unlock(int fd)
{
	return neg_errno(flock(fd, LOCK_UN));
}

static void fill_stat(const struct stat *st, struct store_stat *out)
{
	out->size = (uint64_t)st->st_size;
	out->is_dir = S_ISDIR(st->st_mode);
	out->is_file = S_ISREG(st->st_mode);
	out->id = (uint64_t)st->st_ino ^ ((uint64_t)st->st_dev << 40);
}

static int posix_fstat(int fd, struct store_stat *out)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return -errno;
	fill_stat(&st, out);
	return 0;
}

static int posix_stat(const char *path, struct store_stat *out)
{
	struct stat st;

	if (lstat(path, &st) < 0)
		return -errno;
	fill_stat(&st, out);
	return 0;
}

static int posix_open_dir(const char *path, int *fd)
{
	*fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	return *fd < 0 ? -errno : 0;
}

static int posix_stat_at(int dirfd, const char *name, struct store_stat *out)
{
	struct stat st;

	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	fill_stat(&st, out);
	return 0;
}

static int posix_rename(const char *from, const char *to)
{
	int ret;

	if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0)
		return 0;
	if (errno != EINVAL && errno != ENOSYS)
		return -errno;
	/* The file system cannot rename without replacing (NFS, some FUSE):
	 * link(2) also refuses an existing target, then drop the old name. */
	if (link(from, to) < 0)
		return -errno;
	if (unlink(from) == 0)
		return 0;
	/* another process linked from too (two taking one spare, store.c):
	 * the one whose unlink removed the name has the file; this one's
	 * link goes, or both would write into it */
	ret = -errno;
	unlink(to);
	return ret;
}

static int posix_unlink(const char *path)
{
	return neg_errno(unlink(path));
}

#define POSIX_OPS \
	.mkdir_p = posix_mkdir_p, \
	.mkdir = posix_mkdir, \
	.fsync_dir = posix_fsync_dir, \
	.list = posix_list, \
	.remove_tree = posix_remove_tree, \
	.create = posix_create, \
	.open_direct = posix_open_direct, \
	.open_write = posix_open_write, \
	.truncate = posix_truncate, \
	.allocate = posix_allocate, \
	.open_append = posix_open_append, \
	.open_read = posix_open_read, \
	.write = posix_write, \
	.pread = posix_pread, \
	.pwrite = posix_pwrite, \
	.fsync = posix_fsync, \
	.close = posix_close, \
	.lock = posix_lock, \
	.unlock = posix_unlock, \
	.trylock = posix_trylock, \
	.mark = posix_mark, \
	.marked = posix_marked, \
	.fstat = posix_fstat, \
	.stat = posix_stat, \
	.rename = posix_rename, \
	.unlink = posix_unlink, \
	.open_dir = posix_open_dir, \
	.stat_at = posix_stat_at

static const struct store_tier_ops tier_local = {
	.name = "local",
	.root_key = CFG_LOCAL_DIR,
	POSIX_OPS,
};

static const struct store_tier_ops tier_global = {
	.name = "global",
	.root_key = CFG_GLOBAL_DIR,
	POSIX_OPS,
};

#define MAX_TIERS 16

static const struct store_tier_ops *tiers[MAX_TIERS] = { &tier_local, &tier_global };
static unsigned tier_count = 2;

const struct store_tier_ops *store_tier_find(const char *name)
{
	for (unsigned i = 0; i < tier_count; i++)
		if (strcmp(tiers[i]->name, name) == 0)
			return tiers[i];
	return NULL;
}

int store_tier_register(const struct store_tier_ops *ops)
{
	if (store_tier_find(ops->name))
		return -EEXIST;
	if (tier_count == MAX_TIERS)
		return -ENOSPC;
	tiers[tier_count++] = ops;
	return 0;
}

void store_tier_names(char *buf, size_t len)
{
	size_t used = 0;

	if (len)
		buf[0] = '\0';
	for (unsigned i = 0; i < tier_count && used < len; i++)
		used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? "|" : "", tiers[i]->name);
}

/* written.c - the files a program wrote and closed, saved at a checkpoint
 * and put back at a restart (written.h; docs/split.md "Files written after
 * the checkpoint").
 *
 * Every listed file that exists, that the process does not have open for
 * writing now (such an open one is its descriptor's; one open only for
 * reading restores no contents), and that is not under the checkpoint
 * directories is saved: its contents, mode and size up to
 * written_save_max bytes (16 MiB: a Hessian, orbitals, a small database;
 * not every output file of a run, which would be copied at every
 * checkpoint), its size and mtime only above. A restart writes saved
 * contents back, only the pieces that differ (proc_file_contents_back),
 * before the program runs again, making the file's directories again if
 * they are gone; a larger file changed since gets one warning line.
 */
#include "proc/written.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/config.h"
#include "common/err.h"
#include "common/log.h"
#include "image/image.h"
#include "proc/fds.h"
#include "split/split_format.h"
#include "split/sts_written.h"

enum { PIECE = 1 << 20 };

/* Is path dir or under it (dir resolved if it can be)? */
static int under(const char *path, const char *dir)
{
	char real[PATH_MAX];
	size_t n;

	if (!dir || !*dir)
		return 0;
	if (realpath(dir, real))
		dir = real;
	n = strlen(dir);
	while (n > 1 && dir[n - 1] == '/')
		n--;
	return !strncmp(path, dir, n) && (path[n] == '/' || path[n] == 0);
}

static int stasis_own(const char *path)
{
	return under(path, cfg_str(CFG_GLOBAL_DIR)) || under(path, cfg_str(CFG_LOCAL_DIR)) ||
	       under(path, getenv("STASIS_STAGE_DIR"));
}

/* The file's size bytes into w (zeros for what it lost meanwhile). */
static int put_contents(struct img_writer *w, const char *path, uint64_t size, const char *who)
{
	char *buf = malloc(PIECE);
	int fd = open(path, O_RDONLY | O_CLOEXEC), ret = 0;

	if (!buf || fd < 0) {
		ret = fd < 0 ? err_set(-errno, "%s: cannot read %s, which the program wrote: %s",
				       who, path, strerror(errno))
			     : err_set(-ENOMEM, "out of memory");
		goto out;
	}
	for (uint64_t off = 0; !ret && off < size;) {
		size_t len = size - off < PIECE ? (size_t)(size - off) : PIECE;
		ssize_t got = pread(fd, buf, len, (off_t)off);

		if (got < (ssize_t)len)
			memset(buf + (got > 0 ? got : 0), 0, len - (size_t)(got > 0 ? got : 0));
		ret = img_write(w, buf, len);
		off += len;
	}
out:
	if (fd >= 0)
		close(fd);
	free(buf);
	return ret;
}

int proc_written_dump(struct img_writer *w, const char *const *paths, size_t total, const char *who,
		      proc_written_open_fn open_now, void *arg)
{
	uint64_t max = cfg_u64(CFG_WRITTEN_SAVE_MAX), n = 0;
	unsigned char *keep = calloc(total + 1, 1);
	struct stat *sts = calloc(total + 1, sizeof(*sts));
	int ret = 0;

	if (!keep || !sts) {
		free(keep);
		free(sts);
		return err_set(-ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < total; i++) {
		if (paths[i][0] != '/' || stasis_own(paths[i]) || stat(paths[i], &sts[i]) != 0 ||
		    !S_ISREG(sts[i].st_mode) ||
		    open_now((uint64_t)sts[i].st_dev, (uint64_t)sts[i].st_ino, arg))
			continue;   /* gone, not a file, ours, or its descriptor's */
		keep[i] = 1;
		n++;
	}
	ret = img_section_begin(w, "written", "written");
	ret = ret ? ret : img_write(w, &n, sizeof(n));
	for (size_t i = 0; !ret && i < total; i++) {
		struct split_written r = { 0 };

		if (!keep[i])
			continue;
		r.size = (uint64_t)sts[i].st_size;
		r.saved = max && r.size <= max;
		r.mode = (uint32_t)(sts[i].st_mode & 07777);
		r.mtime_ns = (uint64_t)sts[i].st_mtim.tv_sec * 1000000000ull +
			     (uint64_t)sts[i].st_mtim.tv_nsec;
		r.path_len = (uint32_t)strlen(paths[i]) + 1;
		ret = img_write(w, &r, sizeof(r));
		ret = ret ? ret : img_write(w, paths[i], r.path_len);
		if (!ret && r.saved)
			ret = put_contents(w, paths[i], r.size, who);
	}
	ret = ret ? ret : img_section_end(w);
	free(keep);
	free(sts);
	return ret;
}

int proc_written_read(struct img_reader *img, void **out, size_t *len)
{
	int sec = img_section_find(img, "written");
	struct img_section_info si;
	char *buf;

	*out = NULL;
	*len = 0;
	if (sec < 0)
		return 0;
	if (img_section_get(img, (unsigned)sec, &si) != 0 || si.size < sizeof(uint64_t) ||
	    !(buf = malloc(si.size)))
		return err_set(-EBADMSG, "the image's list of written files is damaged");
	if (img_read(img, (unsigned)sec, 0, buf, si.size) != (ssize_t)si.size) {
		free(buf);
		return *err_msg() ? -EBADMSG : err_set(-EBADMSG, "cannot read the written files");
	}
	*out = buf;
	*len = si.size;
	return 0;
}

/* Does the file at fd hold exactly size bytes of data? */
static int same(int fd, const char *data, uint64_t size)
{
	char *buf = malloc(PIECE);
	struct stat st;
	int eq = buf && fstat(fd, &st) == 0 && (uint64_t)st.st_size == size;

	for (uint64_t off = 0; eq && off < size; off += PIECE) {
		size_t len = size - off < PIECE ? (size_t)(size - off) : PIECE;

		eq = pread(fd, buf, len, (off_t)off) == (ssize_t)len && !memcmp(buf, data + off, len);
	}
	free(buf);
	return eq;
}

/* The directories of path that are gone, made again (mkdir -p, with the
 * umask): the program had them at the checkpoint, and a run that goes on
 * from there finds its file in them. 0 or -errno with err_msg(). */
static int dirs_back(const char *path, const char *who)
{
	char dir[PATH_MAX];

	snprintf(dir, sizeof(dir), "%s", path);
	for (char *p = strchr(dir + 1, '/'); p; p = strchr(p + 1, '/')) {
		*p = 0;
		if (mkdir(dir, 0777) != 0 && errno != EEXIST)
			return err_set(-errno, "%s: cannot write back %s as it was at the "
				       "checkpoint: cannot make its directory %s again: %s",
				       who, path, dir, strerror(errno));
		*p = '/';
	}
	return 0;
}

/* One file back as it was; 0 or -errno with err_msg(). */
static int one_back(const struct split_written *r, const char *path, const void *data,
		    const char *who)
{
	struct stat st;
	int fd, ret;

	if (!r->saved) {
		if (stat(path, &st) == 0 && ((uint64_t)st.st_size != r->size ||
		    (uint64_t)st.st_mtim.tv_sec * 1000000000ull + (uint64_t)st.st_mtim.tv_nsec !=
		    r->mtime_ns))
			fprintf(stderr, "stasis: %s: %s changed after the checkpoint and is larger "
				"than written_save_max: the program finds it as it is now\n", who, path);
		return 0;
	}
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, (mode_t)r->mode);
	if (fd < 0 && errno == ENOENT) {
		ret = dirs_back(path, who);
		if (ret)
			return ret;
		fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, (mode_t)r->mode);
	}
	if (fd < 0 && (errno == EACCES || errno == EPERM || errno == EROFS)) {
		int e = errno, ro = open(path, O_RDONLY | O_CLOEXEC);   /* unchanged: nothing to write */

		ret = ro >= 0 && same(ro, data, r->size);
		if (ro >= 0)
			close(ro);
		if (ret)
			return 0;
		errno = e;
	}
	if (fd < 0)
		return err_set(-errno, "%s: cannot write back %s as it was at the checkpoint: %s",
			       who, path, strerror(errno));
	ret = proc_file_contents_back(fd, data, r->size);
	close(fd);
	if (ret)
		return err_set(ret, "%s: cannot write back %s as it was at the checkpoint: %s",
			       who, path, strerror(-ret));
	return 0;
}

int proc_written_back(const void *sec, size_t len, const char *who)
{
	const char *buf = sec;
	uint64_t n, off = sizeof(n);
	int ret = 0;

	if (!sec)
		return 0;
	memcpy(&n, buf, sizeof(n));
	for (uint64_t i = 0; !ret && i < n; i++) {
		struct split_written r;
		uint64_t data;

		if (len - off < sizeof(r))
			break;
		memcpy(&r, buf + off, sizeof(r));
		off += sizeof(r);
		data = r.saved ? r.size : 0;
		if (r.path_len == 0 || r.path_len > PATH_MAX || len - off < r.path_len ||
		    len - off - r.path_len < data || buf[off + r.path_len - 1] != 0)
			break;
		ret = one_back(&r, buf + off, buf + off + r.path_len, who);
		off += r.path_len + data;
	}
	if (!ret && off != len)
		ret = err_set(-EBADMSG, "the image's list of written files is damaged");
	return ret;
}

/* ---- the list of a process tree ---- */

/* Files in a tree's list: more than one process's, for a build's or a
 * script's many outputs */
#define TREE_MAX 1024

int proc_written_log_create(const char *path)
{
	int fd = path ? open(path, O_RDWR | O_CREAT | O_TRUNC | O_APPEND | O_NOFOLLOW | O_CLOEXEC,
			     0600) : -1;

	if (fd >= 0)
		return fd;
	fd = memfd_create("stasis-written", MFD_CLOEXEC);

	if (fd < 0)
		return err_set(-errno, "cannot make the list of written files: memfd_create: %s",
			       strerror(errno));
	if (fcntl(fd, F_SETFL, O_APPEND) != 0) {
		int e = errno;

		close(fd);
		return err_set(-e, "cannot make the list of written files: %s", strerror(e));
	}
	return fd;
}

void proc_written_log_add(int fd, const char *path)
{
	struct stat st;

	if (fd >= 0 && path[0] == '/' && strlen(path) < STS_WRITTEN_PATH && !stasis_own(path) &&
	    stat(path, &st) == 0 && S_ISREG(st.st_mode))
		sts_written_log_put(fd, STS_WRITTEN_OPEN, (uint64_t)st.st_dev, (uint64_t)st.st_ino,
				    path, NULL);
}

void proc_written_log_add_section(int fd, const void *sec, size_t len)
{
	const char *buf = sec;
	uint64_t n, off = sizeof(n);

	if (!sec || len < sizeof(n))
		return;
	memcpy(&n, buf, sizeof(n));
	for (uint64_t i = 0; i < n && len - off >= sizeof(struct split_written); i++) {
		struct split_written r;

		memcpy(&r, buf + off, sizeof(r));
		off += sizeof(r);
		if (r.path_len == 0 || len - off < r.path_len || buf[off + r.path_len - 1] != 0)
			return;
		proc_written_log_add(fd, buf + off);
		off += r.path_len + (r.saved ? r.size : 0);
		if (off > len)
			return;
	}
}

/* The log's bytes (*out malloc'd) */
static int log_read(int fd, char **out, size_t *len);

int proc_written_log_old(const char *path, char **out, size_t *len)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC), ret;

	*out = NULL;
	*len = 0;
	if (fd < 0)
		return errno == ENOENT ? 0 : err_set(-errno, "cannot read %s: %s", path, strerror(errno));
	ret = log_read(fd, out, len);
	close(fd);
	return ret;
}

/* Does a record of log (len bytes: the checkpoint's list, OPEN records
 * only) name path? Every record is looked at, not a list of bounded size:
 * a file the checkpoint knows is never taken for one made since */
static int listed(const char *log, size_t len, const char *path)
{
	struct sts_written_rec r;

	for (size_t off = 0; len - off >= sizeof(r); off += sizeof(r) + r.len) {
		memcpy(&r, log + off, sizeof(r));
		if (r.len == 0 || len - off - sizeof(r) < r.len)
			return 1;   /* damaged: as if it did */
		if (!strncmp(log + off + sizeof(r), path, r.len))
			return 1;
	}
	return 0;
}

int proc_written_log_forget_created(const char *old, size_t len, int fd)
{
	struct sts_written_file *made = malloc(TREE_MAX * sizeof(*made));
	uint32_t nmade = 0, dropped = 0;
	size_t klen = 0;
	char *klog = NULL;
	int ret = made ? log_read(fd, &klog, &klen) : err_set(-ENOMEM, "out of memory");

	if (!ret && old)
		sts_written_replay(old, len, made, &nmade, TREE_MAX, &dropped, STS_REPLAY_CREATED);
	for (uint32_t i = 0; !ret && i < nmade; i++) {
		const char *p = made[i].path;
		struct stat st;

		/* the very file the tree made, and none the checkpoint knows */
		if (listed(klog, klen, p) || stasis_own(p) || lstat(p, &st) != 0 ||
		    !S_ISREG(st.st_mode) || (uint64_t)st.st_dev != made[i].dev ||
		    (uint64_t)st.st_ino != made[i].ino)
			continue;
		if (unlink(p) == 0)
			log_info("%s: made by the program after the checkpoint: removed", p);
		else
			log_warn("%s was made by the program after the checkpoint and cannot be "
				 "removed: %s", p, strerror(errno));
	}
	free(made);
	free(klog);
	return ret;
}

/* A copy of from at path, which nothing is at (the descriptor cuts it
 * back to its size at the checkpoint); from stays as it is, for the
 * written files to put back if the checkpoint knows it */
static int copy_back(const char *from, const char *path, mode_t mode)
{
	char *buf = malloc(PIECE);
	int in = open(from, O_RDONLY | O_CLOEXEC), out = -1, ret = 0;
	ssize_t got = 0;

	if (!buf || in < 0)
		goto fail;
	out = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
	if (out < 0)
		goto fail;
	while ((got = read(in, buf, PIECE)) > 0)
		if (write(out, buf, (size_t)got) != got)
			break;
	if (got != 0)
		goto fail;
	goto out;
fail:
	ret = err_set(errno ? -errno : -EIO, "cannot make %s again (renamed to %s after the "
		      "checkpoint): %s", path, from, strerror(errno ? errno : EIO));
	if (out >= 0)
		unlink(path);
out:
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
	free(buf);
	return ret;
}

int proc_written_log_moved_back(const char *old, size_t len, const char *path, uint64_t dev,
				uint64_t ino)
{
	struct sts_written_file *v = malloc(sizeof(*v));
	uint32_t n = 1, dropped = 0;
	size_t pl = strlen(path);
	struct stat st;
	int ret = 0;

	if (!v)
		return err_set(-ENOMEM, "out of memory");
	if (!old || pl >= STS_WRITTEN_PATH || lstat(path, &st) == 0 || errno != ENOENT) {
		free(v);
		return 0;
	}
	*v = (struct sts_written_file){ .dev = dev, .ino = ino };
	memcpy(v->path, path, pl + 1);
	/* where its renames since took it (the opens are no move) */
	sts_written_replay(old, len, v, &n, 1, &dropped, STS_REPLAY_MOVES);
	if (n && strcmp(v->path, path) != 0 && !stasis_own(v->path) && lstat(v->path, &st) == 0 &&
	    S_ISREG(st.st_mode) && (uint64_t)st.st_dev == dev && (uint64_t)st.st_ino == ino) {
		ret = copy_back(v->path, path, st.st_mode & 07777);
		if (!ret)
			log_info("%s: renamed to %s after the checkpoint: made again", path, v->path);
	}
	free(v);
	return ret;
}

static int log_read(int fd, char **out, size_t *len)
{
	struct stat st;
	char *buf;
	ssize_t got;

	if (fstat(fd, &st) != 0)
		return err_set(-errno, "cannot read the list of written files: %s", strerror(errno));
	buf = malloc((size_t)st.st_size + 1);
	if (!buf)
		return err_set(-ENOMEM, "out of memory");
	got = pread(fd, buf, (size_t)st.st_size, 0);
	if (got < 0) {
		free(buf);
		return err_set(-errno, "cannot read the list of written files: %s", strerror(errno));
	}
	*out = buf;
	*len = (size_t)got;
	return 0;
}

int proc_written_log_list(int fd, char ***paths, size_t *n)
{
	struct sts_written_file *v = malloc(TREE_MAX * sizeof(*v));
	uint32_t nv = 0, dropped = 0;
	size_t len = 0, bytes = 0;
	char *log = NULL, **p, *s;
	int ret = v ? log_read(fd, &log, &len) : err_set(-ENOMEM, "out of memory");

	*paths = NULL;
	*n = 0;
	if (ret) {
		free(v);
		return ret;
	}
	sts_written_replay(log, len, v, &nv, TREE_MAX, &dropped, STS_REPLAY_ALL);
	sts_written_files_forget_gone(v, &nv);
	if (dropped)
		fprintf(stderr, "stasis: %u opens for writing since the last checkpoint found the "
			"list of %d files the processes wrote full: those files are not saved (a "
			"restart finds them as they are then)\n", dropped, TREE_MAX);
	if (len >= STS_WRITTEN_LOG_MAX)
		fprintf(stderr, "stasis: the list of files the processes wrote reached %llu MiB "
			"since the last checkpoint: the files opened later are not saved\n",
			STS_WRITTEN_LOG_MAX >> 20);
	/* the log again, as short as the list: the processes are parked */
	if (ftruncate(fd, 0) == 0)
		for (uint32_t i = 0; i < nv; i++)
			sts_written_log_put(fd, STS_WRITTEN_OPEN, v[i].dev, v[i].ino, v[i].path, NULL);
	for (uint32_t i = 0; i < nv; i++)
		bytes += strlen(v[i].path) + 1;
	p = malloc((nv + 1) * sizeof(*p) + bytes);
	if (!p) {
		free(v);
		free(log);
		return err_set(-ENOMEM, "out of memory");
	}
	s = (char *)(p + nv + 1);
	for (uint32_t i = 0; i < nv; i++) {
		p[i] = s;
		s = stpcpy(s, v[i].path) + 1;
	}
	p[nv] = NULL;
	*paths = p;
	*n = nv;
	free(v);
	free(log);
	return 0;
}

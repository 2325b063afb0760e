/* test_store.c - the checkpoint store: commit protocol, selection, verify,
 * prune, concurrent ranks and checkpoints, fault points. */
#include "check.h"
#include "common/config.h"
#include "common/crc32c.h"
#include "common/err.h"
#include "common/fault.h"
#include "common/log.h"
#include "image/image.h"
#include "node/node.h"
#include "store/store.h"
#include "store/tier.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static char root[PATH_MAX / 4];
static const struct store_tier_ops *posix;

static void make_root(void)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(root, sizeof(root), "%s/test_store.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(root)) {
		perror("mkdtemp");
		exit(2);
	}
}

static struct store *open_job(const char *job)
{
	struct store *s = NULL;

	CHECK_EQ(store_open("global", root, job, &s), 0);
	if (!s) {
		fprintf(stderr, "store_open %s: %s\n", job, err_msg());
		exit(2);
	}
	return s;
}

static void path_of(struct store *s, const char *ckpt, const char *file, char *buf)
{
	CHECK_EQ(store_ckpt_path(s, ckpt, file, buf, PATH_MAX), 0);
}

static int exists(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0;
}

static void fill(char *buf, size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = (char)(seed * 31 + i * 7 + (i >> 8));
}

/* Bytes with no runs for a large file (shift: a different pattern) */
static void fill_hashed(unsigned char *data, size_t size, unsigned shift)
{
	for (size_t i = 0; i < size; i++)
		data[i] = (unsigned char)(i * 2654435761u >> shift);
}

/* Write one file of `size` bytes in pieces, and commit it. */
static int put_file(struct store_ckpt *c, const char *name, size_t size, unsigned seed)
{
	char buf[10000];
	struct store_file *f = NULL;
	size_t done = 0;
	int ret;

	ret = store_file_create(c, name, &f);
	while (ret == 0 && done < size) {
		size_t n = size - done < 3333 ? size - done : 3333;

		fill(buf, n, seed + (unsigned)done);
		ret = store_file_write(f, buf, n);
		done += n;
	}
	if (ret == 0)
		ret = store_file_commit(f);
	store_file_free(&f);
	return ret;
}

/* A whole checkpoint: begin, `files` files, commit. Returns its name. */
static int make_ckpt(struct store *s, unsigned files, char *name)
{
	struct store_ckpt *c = NULL;
	char fname[32];
	int ret;

	ret = store_ckpt_begin(s, &c);
	for (unsigned i = 0; ret == 0 && i < files; i++) {
		snprintf(fname, sizeof(fname), "rank-%u.dat", i);
		ret = put_file(c, fname, 5000 + i * 100, i);
	}
	if (ret == 0)
		ret = store_ckpt_commit(c, files);
	if (ret && c)
		store_ckpt_abort(c, err_msg());
	if (c && name)
		strcpy(name, store_ckpt_name(c));
	store_ckpt_free(&c);
	return ret;
}

static int selected(struct store *s, const char *want)
{
	char name[64] = "";
	int ret = store_select(s, name, sizeof(name));

	if (!want)
		return ret == -ENOENT;
	if (ret || strcmp(name, want) != 0)
		fprintf(stderr, "  selected '%s' (%d: %s), want %s\n", name, ret, err_msg(), want);
	return ret == 0 && strcmp(name, want) == 0;
}

static enum store_state state_of(struct store *s, const char *name)
{
	struct store_ckpt_info *list = NULL;
	enum store_state st = (enum store_state)-1;
	size_t count = 0;

	CHECK_EQ(store_list(s, &list, &count, NULL), 0);
	for (size_t i = 0; i < count; i++)
		if (strcmp(list[i].name, name) == 0)
			st = list[i].state;
	free(list);
	return st;
}

static void truncate_file(const char *path, off_t size)
{
	CHECK_EQ(truncate(path, size), 0);
}

static void flip_byte(const char *path, off_t at)
{
	int fd = open(path, O_RDWR);
	unsigned char b = 0;

	CHECK(fd >= 0);
	CHECK_EQ(pread(fd, &b, 1, at), 1);
	b ^= 0x10;
	CHECK_EQ(pwrite(fd, &b, 1, at), 1);
	close(fd);
}

/* ---- names ---- */

static void test_names(void)
{
	static const char *const bad_jobs[] = { "", "a/b", "/abs", ".", "..", "tab\there", "nl\n", "\x7f", "caf\xc3\xa9" };
	struct store *s = NULL;
	struct store_ckpt *c = NULL;
	struct store_file *f = NULL;
	char path[PATH_MAX];

	for (size_t i = 0; i < sizeof(bad_jobs) / sizeof(bad_jobs[0]); i++) {
		err_clear();
		CHECK_EQ(store_open("global", root, bad_jobs[i], &s), -EINVAL);
		CHECK(s == NULL && strstr(err_msg(), "job name") != NULL);
	}
	CHECK_EQ(store_open("global", root, NULL, &s), -EINVAL);
	CHECK_EQ(store_open("nfs", root, "j", &s), -EINVAL);
	CHECK(strstr(err_msg(), "unknown storage tier 'nfs'") && strstr(err_msg(), "local|global"));
	/* Refused names created nothing. */
	snprintf(path, sizeof(path), "%s/a", root);
	CHECK(!exists(path));

	s = open_job("names");
	CHECK_EQ(store_ckpt_begin(s, &c), 0);
	CHECK_EQ(store_file_create(c, "a/b", &f), -EINVAL);
	CHECK_EQ(store_file_create(c, "x.tmp", &f), -EINVAL);
	CHECK_EQ(store_file_create(c, "", &f), -EINVAL);
	CHECK_EQ(store_file_create(c, "..", &f), -EINVAL);
	CHECK(f == NULL);
	CHECK_EQ(store_ckpt_path(s, "../x", NULL, path, sizeof(path)), -EINVAL);
	CHECK_EQ(store_ckpt_path(s, "ckpt-000001", "f", path, 8), -ENAMETOOLONG);
	CHECK_EQ(store_ckpt_path(s, "ckpt-000001", "f", path, sizeof(path)), 0);
	CHECK(strcmp(path + strlen(path) - strlen("/names/ckpt-000001/f"), "/names/ckpt-000001/f") == 0);
	store_ckpt_free(&c);
	store_close(&s);
	CHECK(s == NULL);
}

/* Checkpoint names in the order they were made, past the six digits of
 * their padding (the node cache's trim ordered them with strcmp) */
static void test_name_order(void)
{
	CHECK(store_ckpt_name_cmp("ckpt-999999", "ckpt-1000000") < 0);
	CHECK(store_ckpt_name_cmp("ckpt-1000000", "ckpt-999999") > 0);
	CHECK(store_ckpt_name_cmp("ckpt-000002", "ckpt-000010") < 0);
	CHECK(store_ckpt_name_cmp("ckpt-000007", "ckpt-000007") == 0);
	CHECK(store_ckpt_name_cmp("index", "ckpt-000001") < 0);
}

/* ---- the basic path ---- */

static void test_round_trip(void)
{
	struct store_ckpt_info *list = NULL;
	struct store_file_info *files = NULL;
	struct store *s = open_job("basic");
	char name[64], path[PATH_MAX], **jobs = NULL;
	size_t count = 0;
	unsigned bad = 99;

	CHECK(selected(s, NULL));
	CHECK(strstr(err_msg(), "no complete checkpoint") != NULL);
	CHECK_EQ(make_ckpt(s, 3, name), 0);
	CHECK(strcmp(name, "ckpt-000001") == 0);
	CHECK(selected(s, "ckpt-000001"));
	CHECK_EQ(store_list(s, &list, &count, &bad), 0);
	CHECK_EQ(count, 1);
	CHECK_EQ(bad, 0);
	CHECK(count == 1 && list[0].state == STORE_COMPLETE && list[0].current && list[0].files == 3 &&
	      list[0].bytes == 5000 + 5100 + 5200 && list[0].begin_time > 0 && list[0].end_time >= list[0].begin_time);
	free(list);
	CHECK_EQ(store_ckpt_files(s, "ckpt-000001", &files, &count), 0);
	CHECK_EQ(count, 3);
	CHECK(count == 3 && strcmp(files[1].name, "rank-1.dat") == 0 && files[1].size == 5100);
	free(files);
	CHECK_EQ(store_ckpt_files(s, "ckpt-000009", &files, &count), -ENOENT);
	CHECK_EQ(store_verify(s, "ckpt-000001"), 0);
	CHECK_EQ(store_index_check(s), 0);
	path_of(s, "ckpt-000001", "rank-0.dat.tmp", path);
	CHECK(!exists(path));

	CHECK_EQ(make_ckpt(s, 1, name), 0);
	CHECK(strcmp(name, "ckpt-000002") == 0);
	CHECK(selected(s, "ckpt-000002"));

	/* Reopening sees the same store. */
	store_close(&s);
	s = open_job("basic");
	CHECK(selected(s, "ckpt-000002"));
	store_close(&s);

	/* Jobs: directories holding an index, sorted. */
	snprintf(path, sizeof(path), "%s/not-a-job", root);
	CHECK_EQ(mkdir(path, 0755), 0);
	s = open_job("another");
	store_close(&s);
	CHECK_EQ(store_jobs("global", root, &jobs, &count), 0);
	CHECK(count >= 3);
	for (size_t i = 0; i < count; i++) {
		CHECK(strcmp(jobs[i], "not-a-job") != 0);
		if (i)
			CHECK(strcmp(jobs[i - 1], jobs[i]) < 0);
	}
	store_names_free(jobs, count);
	snprintf(path, sizeof(path), "%s/nowhere", root);
	CHECK_EQ(store_jobs("global", path, &jobs, &count), 0);
	CHECK_EQ(count, 0);
	store_names_free(jobs, count);
}

static void test_file_rules(void)
{
	struct store *s = open_job("files");
	struct store_ckpt *c = NULL, *c2 = NULL;
	struct store_file *f = NULL, *g = NULL;
	char path[PATH_MAX], name[64];

	CHECK_EQ(store_ckpt_begin(s, &c), 0);
	/* An uncommitted file leaves nothing behind. */
	CHECK_EQ(store_file_create(c, "gone", &f), 0);
	CHECK_EQ(store_file_write(f, "abc", 3), 0);
	path_of(s, store_ckpt_name(c), "gone.tmp", path);
	CHECK(exists(path));
	store_file_free(&f);
	CHECK(f == NULL);
	CHECK(!exists(path));
	/* One writer per name, and a committed file is never replaced. */
	CHECK_EQ(store_file_create(c, "one", &f), 0);
	err_clear();
	CHECK_EQ(store_file_create(c, "one", &g), -EEXIST);
	CHECK(strstr(err_msg(), "one.tmp exists") != NULL);
	CHECK_EQ(store_file_commit(f), 0);
	CHECK_EQ(store_file_commit(f), 0);
	CHECK_EQ(store_file_write(f, "x", 1), -EBADF);
	store_file_free(&f);
	path_of(s, store_ckpt_name(c), "one", path);
	CHECK(exists(path));                                /* committed: kept */
	CHECK_EQ(store_file_create(c, "one", &g), -EEXIST);
	CHECK(strstr(err_msg(), "already committed") != NULL);

	/* A file that appeared under the final name while we wrote (another
	 * writer ignoring the protocol) is never replaced by the rename. */
	CHECK_EQ(store_file_create(c, "raced", &f), 0);
	CHECK_EQ(store_file_write(f, "mine", 4), 0);
	path_of(s, store_ckpt_name(c), "raced", path);
	close(open(path, O_CREAT | O_WRONLY, 0644));
	err_clear();
	CHECK_EQ(store_file_commit(f), -EEXIST);
	CHECK(strstr(err_msg(), "raced.tmp: cannot rename to raced") != NULL);
	store_file_free(&f);
	CHECK(exists(path));                                /* theirs, untouched */
	CHECK_EQ(unlink(path), 0);

	/* Joining: only an open checkpoint, only a known one. */
	CHECK_EQ(store_ckpt_join(s, store_ckpt_name(c), &c2), 0);
	CHECK(c2 && strcmp(store_ckpt_name(c2), store_ckpt_name(c)) == 0);
	store_ckpt_free(&c2);
	CHECK_EQ(store_ckpt_join(s, "ckpt-000077", &c2), -ENOENT);
	/* Joining without the index (the caller knows it is begun): a file
	 * committed through it counts like any other */
	CHECK_EQ(store_ckpt_join_begun(s, store_ckpt_name(c), &c2), 0);
	CHECK(c2 && strcmp(store_ckpt_name(c2), store_ckpt_name(c)) == 0);
	CHECK_EQ(store_file_create(c2, "begun", &f), 0);
	CHECK_EQ(store_file_write(f, "joined", 6), 0);
	CHECK_EQ(store_file_commit(f), 0);
	store_file_free(&f);
	store_ckpt_free(&c2);
	CHECK_EQ(store_ckpt_join_begun(s, "ckpt-000077", &c2), -ENOENT);
	CHECK(c2 == NULL);
	CHECK_EQ(store_ckpt_join_begun(s, "ckpt-../x", &c2), -EINVAL);
	CHECK_EQ(store_ckpt_join_begun(s, "other", &c2), -EINVAL);
	CHECK_EQ(store_ckpt_commit(c, 2), 0);
	CHECK_EQ(store_ckpt_commit(c, 2), 0);               /* a second rank sealing: fine */
	err_clear();
	CHECK_EQ(store_ckpt_join(s, store_ckpt_name(c), &c2), -EINVAL);
	CHECK(strstr(err_msg(), "already COMPLETE") != NULL);
	CHECK(c2 == NULL);
	strcpy(name, store_ckpt_name(c));
	store_ckpt_free(&c);

	/* A checkpoint with no file at all cannot be COMPLETE. */
	CHECK_EQ(store_ckpt_begin(s, &c), 0);
	CHECK_EQ(store_ckpt_commit(c, 0), -EIO);
	CHECK_EQ(state_of(s, store_ckpt_name(c)), STORE_FAILED);
	store_ckpt_free(&c);
	CHECK(selected(s, name));
	store_close(&s);
}

/* ---- commit protocol order, through a recording tier ---- */

static char trace[64][96];
static unsigned ntrace;
static char trace_names[64][64];

static const char *base(const char *path)
{
	const char *p = strrchr(path, '/');

	return p ? p + 1 : path;
}

static void note(const char *op, const char *what)
{
	if (ntrace < 64)
		snprintf(trace[ntrace++], sizeof(trace[0]), "%s %s", op, what);
}

static void remember(int fd, const char *path)
{
	if (fd >= 0 && fd < 64)
		snprintf(trace_names[fd], sizeof(trace_names[0]), "%s", base(path));
}

static const char *fd_name(int fd)
{
	return fd >= 0 && fd < 64 ? trace_names[fd] : "?";
}

static int t_create(const char *path, int *fd)
{
	int ret = posix->create(path, fd);

	if (ret == 0)
		remember(*fd, path);
	note("create", base(path));
	return ret;
}

static int t_open_append(const char *path, int *fd)
{
	int ret = posix->open_append(path, fd);

	if (ret == 0)
		remember(*fd, path);
	return ret;
}

static int t_open_direct(const char *path, int *fd)
{
	int ret = posix->open_direct(path, fd);

	if (ret == 0)
		remember(*fd, path);
	note("open_direct", base(path));
	return ret;
}

static ssize_t t_pwrite(int fd, const void *buf, size_t len, uint64_t offset)
{
	note("write", fd_name(fd));
	return posix->pwrite(fd, buf, len, offset);
}

static ssize_t t_write(int fd, const void *buf, size_t len)
{
	note("write", fd_name(fd));
	return posix->write(fd, buf, len);
}

static int t_fsync(int fd)
{
	note("fsync", fd_name(fd));
	return posix->fsync(fd);
}

static int t_rename(const char *from, const char *to)
{
	char both[80];

	snprintf(both, sizeof(both), "%.38s>%.38s", base(from), base(to));
	note("rename", both);
	return posix->rename(from, to);
}

static int t_fsync_dir(const char *path)
{
	note("fsync_dir", base(path));
	return posix->fsync_dir(path);
}

static int t_lock(int fd, int exclusive)
{
	note(exclusive ? "lock_ex" : "lock_sh", fd_name(fd));
	return posix->lock(fd, exclusive);
}

static int t_unlock(int fd)
{
	note("unlock", fd_name(fd));
	return posix->unlock(fd);
}

static int find_trace(const char *entry, unsigned from)
{
	for (unsigned i = from; i < ntrace; i++)
		if (strcmp(trace[i], entry) == 0)
			return (int)i;
	return -1;
}

/* Files larger than the staging buffer go out with direct I/O in whole
 * blocks and the tail through the page cache; either way the bytes on disk,
 * the recorded size and CRC must be exactly what was written, whatever the
 * sizes of the pieces. */
static void check_large_file(const char *direct_io)
{
	const size_t size = (8u << 20) * 2 + 12345;
	unsigned char *data = malloc(size), *back = malloc(size);
	struct store *s = NULL;
	struct store_ckpt *c = NULL;
	struct store_file *f = NULL;
	struct store_file_info *files = NULL;
	char path[PATH_MAX];
	size_t off = 0, piece = 1, nfiles = 0;
	FILE *in;

	CHECK_EQ(cfg_set("direct_io", direct_io), 0);
	fill_hashed(data, size, 13);
	CHECK_EQ(store_open("global", root, direct_io[1] == 'n' ? "large-direct" : "large-buffered", &s), 0);
	CHECK_EQ(store_ckpt_begin(s, &c), 0);
	CHECK_EQ(store_file_create(c, "big.dat", &f), 0);
	while (off < size) {
		size_t n = piece < size - off ? piece : size - off, room_len = 0;
		void *room = NULL;
		int ret = store_file_room(f, &room, &room_len);

		/* one piece in two read straight into the stage, where the file has one */
		CHECK_EQ(ret, direct_io[1] == 'n' ? 0 : -EOPNOTSUPP);
		if (ret == 0 && (piece & 1)) {
			CHECK(room_len >= 1);
			n = n < room_len ? n : room_len;
			memcpy(room, data + off, n);
			CHECK_EQ(store_file_done(f, n), 0);
		} else {
			CHECK_EQ(store_file_write(f, data + off, n), 0);
		}
		off += n;
		piece = piece * 7 + 3;      /* 1, 10, 73, ... bytes: every alignment */
		if (piece > (3u << 20))
			piece = 4095;
	}
	if (direct_io[1] == 'n') {
		void *room = NULL;
		size_t room_len = 0;

		CHECK_EQ(store_file_room(f, &room, &room_len), 0);
		CHECK_EQ(store_file_done(f, room_len + 1), -EINVAL);
		CHECK(strstr(err_msg(), "bytes done, more than the room given") != NULL);
	}
	CHECK_EQ(store_file_commit(f), 0);
	CHECK_EQ(store_ckpt_commit(c, 1), 0);
	CHECK_EQ(store_ckpt_files(s, store_ckpt_name(c), &files, &nfiles), 0);
	CHECK_EQ(nfiles, 1);
	if (nfiles == 1) {
		CHECK_EQ(files[0].size, size);
		CHECK_EQ(files[0].crc, crc32c(0, data, size));
	}
	CHECK_EQ(store_ckpt_path(s, store_ckpt_name(c), "big.dat", path, sizeof(path)), 0);
	in = fopen(path, "rb");
	CHECK(in != NULL);
	if (in) {
		CHECK_EQ(fread(back, 1, size, in), size);
		CHECK(fgetc(in) == EOF);
		CHECK(memcmp(back, data, size) == 0);
		fclose(in);
	}
	CHECK_EQ(store_verify(s, store_ckpt_name(c)), 0);
	free(files);
	store_file_free(&f);
	store_ckpt_free(&c);
	store_close(&s);
	free(data);
	free(back);
	CHECK_EQ(cfg_set("direct_io", "on"), 0);
}

static void test_large_files(void)
{
	check_large_file("on");
	check_large_file("off");
}

/* A tier whose direct writes fail from the second stage on. */
static int failing_dfd = -1;

static int fail_open_direct(const char *path, int *fd)
{
	int ret = posix->open_direct(path, fd);

	failing_dfd = ret == 0 ? *fd : -1;
	return ret;
}

static ssize_t fail_pwrite(int fd, const void *buf, size_t len, uint64_t offset)
{
	if (fd == failing_dfd && offset >= (8u << 20))
		return -EIO;
	return posix->pwrite(fd, buf, len, offset);
}

/* Full stages are written by the file's stage writer while the next one
 * fills: a stage it failed to write fails the file all the same, at the
 * next full stage or at the commit, and nothing is committed. */
static void test_stage_write_fails(void)
{
	static struct store_tier_ops tf;
	const size_t stage = 8u << 20;
	unsigned char *data = calloc(1, 3 * stage);
	struct store *s = NULL;
	struct store_ckpt *c = NULL;
	struct store_file *f = NULL;
	char path[PATH_MAX];
	int ret;

	tf = *posix;
	tf.name = "failing-direct";
	tf.open_direct = fail_open_direct;
	tf.pwrite = fail_pwrite;
	CHECK(data != NULL);
	CHECK_EQ(store_tier_register(&tf), 0);
	CHECK_EQ(store_open("failing-direct", root, "stage-fails", &s), 0);
	if (!s || !data)
		goto out;
	CHECK_EQ(store_ckpt_begin(s, &c), 0);
	/* three stages: the third waits for the second, which failed */
	CHECK_EQ(store_file_create(c, "a.img", &f), 0);
	ret = store_file_write(f, data, 3 * stage);
	if (failing_dfd < 0) {
		fprintf(stderr, "  (no direct I/O under %s: stage writer not tested)\n", root);
		goto out;
	}
	CHECK_EQ(ret, -EIO);
	CHECK(strstr(err_msg(), "a.img.tmp: cannot write: Input/output error") != NULL);
	CHECK_EQ(store_file_commit(f), -EIO);
	store_file_free(&f);
	path_of(s, store_ckpt_name(c), "a.img", path);
	CHECK(!exists(path));
	/* two stages and a bit: the write returns before the second is out;
	 * the commit waits for it and fails */
	CHECK_EQ(store_file_create(c, "b.img", &f), 0);
	CHECK_EQ(store_file_write(f, data, 2 * stage + 100), 0);
	CHECK_EQ(store_file_commit(f), -EIO);
	CHECK(strstr(err_msg(), "b.img.tmp: cannot write: Input/output error") != NULL);
	store_file_free(&f);
	path_of(s, store_ckpt_name(c), "b.img", path);
	CHECK(!exists(path));
	strcat(path, ".tmp");
	CHECK(!exists(path));
out:
	store_file_free(&f);
	store_ckpt_free(&c);
	store_close(&s);
	free(data);
}

/* A tier that counts the bytes written through the direct descriptor and
 * through the others (the page cache). */
static int counted_dfd = -1;
static uint64_t direct_bytes, cached_bytes;

static int count_open_direct(const char *path, int *fd)
{
	int ret = posix->open_direct(path, fd);

	counted_dfd = ret == 0 ? *fd : -1;
	return ret;
}

static ssize_t count_pwrite(int fd, const void *buf, size_t len, uint64_t offset)
{
	ssize_t n = posix->pwrite(fd, buf, len, offset);

	if (n > 0)
		*(fd == counted_dfd ? &direct_bytes : &cached_bytes) += (uint64_t)n;
	return n;
}

/* Job `job` on a tier `name` that counts what goes through the direct
 * descriptor and what through the page cache (tc: the tier's table,
 * which the store keeps using), and data[size] filled (fill_hashed with
 * shift); NULL if either failed */
static struct store *open_counting(struct store_tier_ops *tc, const char *name, const char *job,
				   unsigned char *data, size_t size, unsigned shift)
{
	struct store *s = NULL;

	*tc = *posix;
	tc->name = name;
	tc->open_direct = count_open_direct;
	tc->pwrite = count_pwrite;
	CHECK(data != NULL);
	CHECK_EQ(store_tier_register(tc), 0);
	CHECK_EQ(store_open(name, root, job, &s), 0);
	if (!data)
		store_close(&s);
	else
		fill_hashed(data, size, shift);
	return s;
}

/* Checkpoint name of s holds n files, each a copy of data[size] in its
 * record, and verifies */
static void check_copies(struct store *s, const char *name, size_t n, const unsigned char *data,
			 size_t size)
{
	struct store_file_info *files = NULL;
	size_t nfiles = 0;

	CHECK_EQ(store_ckpt_files(s, name, &files, &nfiles), 0);
	CHECK_EQ(nfiles, n);
	for (size_t i = 0; i < nfiles; i++)
		CHECK(files[i].size == size && files[i].crc == crc32c(0, data, size));
	CHECK_EQ(store_verify(s, name), 0);
	free(files);
}

/* The last, partial stage of a large file goes out with direct I/O too,
 * all but its last partial block: only that block passes through the page
 * cache (before, the whole partial stage did, up to 8 MiB a file, which
 * the commit's fsync then wrote). */
static void test_stage_tail_direct(void)
{
	static struct store_tier_ops tc;
	const size_t size = (8u << 20) + 3 * 4096 + 100;
	unsigned char *data = malloc(size);
	struct store *s = NULL;
	struct store_ckpt *c = NULL;
	struct store_file *f = NULL;

	s = open_counting(&tc, "counting", "stage-tail", data, size, 11);
	if (!s)
		goto out;
	CHECK_EQ(store_ckpt_begin(s, &c), 0);
	CHECK_EQ(store_file_create(c, "t.img", &f), 0);
	CHECK_EQ(store_file_write(f, data, size), 0);
	CHECK_EQ(store_file_commit(f), 0);
	if (counted_dfd < 0) {
		fprintf(stderr, "  (no direct I/O under %s: stage tail not tested)\n", root);
		goto out;
	}
	CHECK_EQ(direct_bytes, size - 100);
	CHECK_EQ(cached_bytes, 100);
	CHECK_EQ(store_ckpt_commit(c, 1), 0);
	check_copies(s, store_ckpt_name(c), 1, data, size);
out:
	store_file_free(&f);
	store_ckpt_free(&c);
	store_close(&s);
	free(data);
}

/* A copy from a mapped file (level global's): whole aligned pieces go from
 * the caller's memory straight to the disk, the tail through the stage;
 * the record takes the vouched CRC, or the commit reads the file back for
 * it. Anything unaligned, or with bytes in the stage, is refused
 * (-EOPNOTSUPP) without writing: the caller writes it as usual. */
static void test_write_direct(void)
{
	static struct store_tier_ops tc;
	const size_t piece = 8u << 20, size = 2 * piece + 5000;
	unsigned char *data = aligned_alloc(4096, size + 4096 - size % 4096);
	struct store *s = NULL;
	struct store_ckpt *c = NULL;
	struct store_file *f = NULL;
	char path[PATH_MAX], name[64];

	s = open_counting(&tc, "counting-direct", "write-direct", data, size, 13);
	if (!s)
		goto out;
	CHECK_EQ(store_ckpt_begin(s, &c), 0);
	snprintf(name, sizeof(name), "%s", store_ckpt_name(c));
	for (int vouch = 0; vouch < 2; vouch++) {
		direct_bytes = cached_bytes = 0;
		CHECK_EQ(store_file_create(c, vouch ? "vouched.img" : "read-back.img", &f), 0);
		CHECK_EQ(store_file_write_direct(f, data + 1, piece), -EOPNOTSUPP);
		if (counted_dfd < 0) {
			fprintf(stderr, "  (no direct I/O under %s: direct copy not tested)\n", root);
			goto out;
		}
		CHECK_EQ(store_file_write_direct(f, data, piece - 100), -EOPNOTSUPP);
		CHECK_EQ(store_file_write_direct(f, data, piece), 0);
		CHECK_EQ(store_file_write_direct(f, data + piece, piece), 0);
		CHECK_EQ(store_file_write(f, data + 2 * piece, size - 2 * piece), 0);
		/* the stage holds the tail: nothing more goes around it */
		CHECK_EQ(store_file_write_direct(f, data, 4096), -EOPNOTSUPP);
		if (vouch)
			store_file_vouch(f, crc32c(0, data, size));
		CHECK_EQ(store_file_commit(f), 0);
		store_file_free(&f);
		/* the tail's whole block direct too, its last 904 bytes cached */
		CHECK_EQ(direct_bytes, size - 904);
		CHECK_EQ(cached_bytes, 904);
	}
	CHECK_EQ(store_ckpt_commit(c, 2), 0);
	check_copies(s, name, 2, data, size);
	path_of(s, name, "vouched.img", path);
	{
		int fd = open(path, O_RDONLY);
		unsigned char *back = malloc(size);

		CHECK(fd >= 0 && back && read(fd, back, size) == (ssize_t)size);
		CHECK(back && memcmp(back, data, size) == 0);
		free(back);
		if (fd >= 0)
			close(fd);
	}
out:
	store_file_free(&f);
	store_ckpt_free(&c);
	store_close(&s);
	free(data);
}

static void test_commit_order(void)
{
	static struct store_tier_ops tr;
	struct store *s = NULL;
	struct store_ckpt *c = NULL;
	struct store_file *f = NULL;
	int w, fs, rn, fd, lk, iw, ifs, ul;

	tr = *posix;
	tr.name = "trace";
	tr.create = t_create;
	tr.open_append = t_open_append;
	tr.write = t_write;
	tr.open_direct = t_open_direct;
	tr.pwrite = t_pwrite;
	tr.fsync = t_fsync;
	tr.rename = t_rename;
	tr.fsync_dir = t_fsync_dir;
	tr.lock = t_lock;
	tr.unlock = t_unlock;
	CHECK_EQ(store_tier_register(&tr), 0);
	CHECK_EQ(store_tier_register(&tr), -EEXIST);
	CHECK_EQ(store_open("trace", root, "order", &s), 0);
	if (!s)
		return;
	CHECK_EQ(store_ckpt_begin(s, &c), 0);
	CHECK_EQ(store_file_create(c, "rank-0.img", &f), 0);
	ntrace = 0;
	CHECK_EQ(store_file_write(f, "hello", 5), 0);
	CHECK_EQ(store_file_commit(f), 0);
	/* data written, data durable, name, name durable, then the record. */
	w = find_trace("write rank-0.img.tmp", 0);
	fs = find_trace("fsync rank-0.img.tmp", 0);
	rn = find_trace("rename rank-0.img.tmp>rank-0.img", 0);
	fd = find_trace("fsync_dir ckpt-000001", 0);
	lk = find_trace("lock_ex index", 0);
	iw = find_trace("write index", 0);
	ifs = find_trace("fsync index", 0);
	ul = find_trace("unlock index", 0);
	CHECK(w >= 0 && w < fs && fs < rn && rn < fd && fd < lk && lk < iw && iw < ifs && ifs < ul);
	if (!(w >= 0 && w < fs && fs < rn && rn < fd && fd < lk && lk < iw && iw < ifs && ifs < ul))
		for (unsigned i = 0; i < ntrace; i++)
			fprintf(stderr, "  trace %u: %s\n", i, trace[i]);
	/* Sealing: the COMPLETE record is written and fsynced under the lock. */
	ntrace = 0;
	CHECK_EQ(store_ckpt_commit(c, 1), 0);
	lk = find_trace("lock_ex index", 0);
	iw = find_trace("write index", 0);
	ifs = find_trace("fsync index", 0);
	ul = find_trace("unlock index", 0);
	CHECK(lk >= 0 && lk < iw && iw < ifs && ifs < ul);
	/* Readers take the lock shared. */
	ntrace = 0;
	CHECK(selected(s, "ckpt-000001"));
	CHECK(ntrace >= 1 && strncmp(trace[0], "lock_sh", 7) == 0);
	store_file_free(&f);
	store_ckpt_free(&c);
	store_close(&s);
}

/* ---- selection ---- */

static void test_selection(void)
{
	struct store *s = open_job("select");
	struct store_ckpt *c = NULL;
	struct store_ckpt_info *list = NULL;
	char c1[64], c4[64], c5[64], path[PATH_MAX];
	size_t count = 0;

	CHECK_EQ(make_ckpt(s, 2, c1), 0);
	/* ckpt 2: begun, a file committed, never sealed. */
	CHECK_EQ(store_ckpt_begin(s, &c), 0);
	CHECK_EQ(put_file(c, "rank-0.dat", 100, 1), 0);
	store_ckpt_free(&c);
	/* ckpt 3: aborted. */
	CHECK_EQ(store_ckpt_begin(s, &c), 0);
	CHECK_EQ(put_file(c, "rank-0.dat", 100, 1), 0);
	CHECK_EQ(store_ckpt_abort(c, "rank 1: out of memory"), 0);
	store_ckpt_free(&c);
	CHECK(selected(s, c1));
	CHECK_EQ(state_of(s, "ckpt-000002"), STORE_PARTIAL);
	CHECK_EQ(state_of(s, "ckpt-000003"), STORE_FAILED);

	CHECK_EQ(make_ckpt(s, 2, c4), 0);
	CHECK_EQ(make_ckpt(s, 2, c5), 0);
	CHECK(selected(s, c5));
	/* Newest damaged: truncated file -> skipped; deleted file -> skipped. */
	path_of(s, c5, "rank-1.dat", path);
	truncate_file(path, 10);
	CHECK(selected(s, c4));
	path_of(s, c4, "rank-0.dat", path);
	CHECK_EQ(unlink(path), 0);
	CHECK(selected(s, c1));
	CHECK_EQ(store_list(s, &list, &count, NULL), 0);
	for (size_t i = 0; i < count; i++)
		CHECK_EQ(list[i].current, strcmp(list[i].name, c1) == 0);
	free(list);
	/* Still COMPLETE in the index (verify names the damage), never chosen. */
	CHECK_EQ(state_of(s, c5), STORE_COMPLETE);
	path_of(s, c1, NULL, path);
	CHECK_EQ(posix->remove_tree(path), 0);
	CHECK(selected(s, NULL));
	CHECK(strstr(err_msg(), "3 complete but damaged, 1 partial, 1 failed") != NULL);
	store_close(&s);
}

/* ---- sealing ---- */

static void test_commit_checks(void)
{
	struct store *s = open_job("seal");
	struct store_ckpt *c = NULL;
	struct store_file *f = NULL;
	char good[64], path[PATH_MAX];

	CHECK_EQ(make_ckpt(s, 1, good), 0);

	/* Fewer files than expected; a writer still holds its *.tmp. */
	CHECK_EQ(store_ckpt_begin(s, &c), 0);
	CHECK_EQ(put_file(c, "rank-0.dat", 100, 0), 0);
	CHECK_EQ(store_file_create(c, "rank-1.dat", &f), 0);
	err_clear();
	CHECK_EQ(store_ckpt_commit(c, 2), -EIO);
	CHECK(strstr(err_msg(), "1 of 2 expected") && strstr(err_msg(), "rank-1.dat"));
	CHECK_EQ(state_of(s, store_ckpt_name(c)), STORE_FAILED);
	CHECK_EQ(store_ckpt_commit(c, 1), -EIO);            /* FAILED is final */
	CHECK(strstr(err_msg(), "already FAILED") != NULL);
	store_file_free(&f);
	store_ckpt_free(&c);

	/* A committed file that vanished before the seal. */
	CHECK_EQ(store_ckpt_begin(s, &c), 0);
	CHECK_EQ(put_file(c, "rank-0.dat", 100, 0), 0);
	CHECK_EQ(put_file(c, "rank-1.dat", 100, 0), 0);
	path_of(s, store_ckpt_name(c), "rank-1.dat", path);
	CHECK_EQ(unlink(path), 0);
	err_clear();
	CHECK_EQ(store_ckpt_commit(c, 2), -EIO);
	CHECK(strstr(err_msg(), "rank-1.dat is missing") != NULL);
	CHECK_EQ(state_of(s, store_ckpt_name(c)), STORE_FAILED);
	err_clear();
	CHECK_EQ(store_verify(s, store_ckpt_name(c)), -EBADMSG);
	CHECK(strstr(err_msg(), "not established (FAILED: rank-1.dat is missing)") != NULL);
	store_ckpt_free(&c);

	/* A committed file that changed size before the seal. */
	CHECK_EQ(store_ckpt_begin(s, &c), 0);
	CHECK_EQ(put_file(c, "rank-0.dat", 100, 0), 0);
	path_of(s, store_ckpt_name(c), "rank-0.dat", path);
	truncate_file(path, 99);
	CHECK_EQ(store_ckpt_commit(c, 0), -EIO);
	CHECK(strstr(err_msg(), "rank-0.dat has 99 bytes, the index says 100") != NULL);
	store_ckpt_free(&c);
	CHECK(selected(s, good));
	store_close(&s);
}

/* ---- verify ---- */

static void test_verify(void)
{
	static const char fake[] = "\x89STASIS\nnot really an image, though it starts like one";
	struct store *s = open_job("verify");
	struct store_ckpt *c = NULL;
	struct store_file *f = NULL;
	char name[64], partial[64], path[PATH_MAX];

	CHECK_EQ(make_ckpt(s, 2, name), 0);
	CHECK_EQ(store_verify(s, name), 0);
	err_clear();
	CHECK_EQ(store_verify(s, "ckpt-000042"), -ENOENT);
	CHECK(strstr(err_msg(), "ckpt-000042") != NULL);

	CHECK_EQ(store_ckpt_begin(s, &c), 0);
	strcpy(partial, store_ckpt_name(c));
	err_clear();
	CHECK_EQ(store_verify(s, partial), -EBADMSG);
	CHECK(strstr(err_msg(), "not established (PARTIAL: no commit record)") != NULL);
	CHECK(strncmp(err_msg(), partial, strlen(partial)) == 0);
	store_ckpt_free(&c);

	/* A leftover *.tmp in a COMPLETE checkpoint is a note, not an error. */
	CHECK_EQ(store_ckpt_join(s, partial, &c), 0);
	store_ckpt_free(&c);
	path_of(s, name, "rank-9.dat.tmp", path);
	close(open(path, O_CREAT | O_WRONLY, 0644));
	CHECK_EQ(store_verify(s, name), 0);

	/* One flipped byte in a file that is not an image: CRC32C. */
	path_of(s, name, "rank-1.dat", path);
	flip_byte(path, 4000);
	err_clear();
	CHECK_EQ(store_verify(s, name), -EBADMSG);
	CHECK(strstr(err_msg(), "rank-1.dat: content damaged") != NULL);
	flip_byte(path, 4000);
	CHECK_EQ(store_verify(s, name), 0);
	/* Wrong size, missing. */
	truncate_file(path, 4000);
	CHECK_EQ(store_verify(s, name), -EBADMSG);
	CHECK(strstr(err_msg(), "rank-1.dat: 4000 bytes, the index says 5100") != NULL);
	CHECK_EQ(unlink(path), 0);
	CHECK_EQ(store_verify(s, name), -EBADMSG);
	CHECK(strstr(err_msg(), "rank-1.dat: missing") != NULL);

	/* A file that only starts like an image goes to the image reader,
	 * whose message comes through. */
	CHECK_EQ(store_ckpt_begin(s, &c), 0);
	CHECK_EQ(store_file_create(c, "fake.img", &f), 0);
	CHECK_EQ(store_file_write(f, fake, sizeof(fake) - 1), 0);
	CHECK_EQ(store_file_commit(f), 0);
	store_file_free(&f);
	CHECK_EQ(store_ckpt_commit(c, 1), 0);
	err_clear();
	CHECK_EQ(store_verify(s, store_ckpt_name(c)), -EBADMSG);
	CHECK(strstr(err_msg(), "fake.img") != NULL);
	store_ckpt_free(&c);
	store_close(&s);
}

/* A file written (partly) through its descriptor, as a transport splices
 * a copy into it: the bytes land in order whichever way each part came,
 * the record's CRC is read back or the one vouched for, and a vouched CRC
 * that is not the content's is caught: at the commit when the bytes went
 * through store_file_write, by verify when they did not */
static int put_by_fd(struct store_ckpt *c, const char *name, const char *data, size_t len,
		     int vouch, uint32_t crc)
{
	struct store_file *f = NULL;
	uint64_t at = 1;
	int ret = store_file_create(c, name, &f), fd = ret ? -1 : store_file_fd(f, &at);

	CHECK(fd >= 0 && at == 0);
	/* the first third through the descriptor, the second by write, the
	 * last through the descriptor again */
	ret = ret ? ret : pwrite(fd, data, len / 3, 0) == (ssize_t)(len / 3) ? 0 : -EIO;
	ret = ret ? ret : store_file_wrote(f, len / 3, 0);
	ret = ret ? ret : store_file_write(f, data + len / 3, len / 3);
	fd = ret ? -1 : store_file_fd(f, &at);
	CHECK(at == 2 * (len / 3));
	ret = ret ? ret : pwrite(fd, data + at, len - at, (off_t)at) == (ssize_t)(len - at) ? 0 : -EIO;
	ret = ret ? ret : store_file_wrote(f, len - at, 0);
	if (vouch)
		store_file_vouch(f, crc);
	ret = ret ? ret : store_file_commit(f);
	store_file_free(&f);
	return ret;
}

static void test_file_fd(void)
{
	struct store *s = open_job("file-fd");
	struct store_ckpt *c = NULL;
	struct store_file *f = NULL;
	static char data[300001], back[sizeof(data)];
	char path[PATH_MAX], name[64];
	uint32_t crc;
	uint64_t at;
	int fd;

	/* (staged through O_DIRECT, a file has no descriptor to write) */
	CHECK_EQ(cfg_set("direct_io", "off"), 0);
	fill(data, sizeof(data), 7);
	crc = crc32c(0, data, sizeof(data));
	CHECK_EQ(store_ckpt_begin(s, &c), 0);
	snprintf(name, sizeof(name), "%s", store_ckpt_name(c));
	CHECK_EQ(put_by_fd(c, "read-back.dat", data, sizeof(data), 0, 0), 0);
	CHECK_EQ(put_by_fd(c, "vouched.dat", data, sizeof(data), 1, crc), 0);
	CHECK_EQ(put_by_fd(c, "vouched-wrong.dat", data + 8, sizeof(data) - 8, 1, crc), 0);
	/* written by store_file_write, vouched for wrongly: not committed */
	CHECK_EQ(store_file_create(c, "damaged.dat", &f), 0);
	CHECK_EQ(store_file_write(f, data + 1, sizeof(data) - 1), 0);
	store_file_vouch(f, crc);
	err_clear();
	CHECK_EQ(store_file_commit(f), -EBADMSG);
	CHECK(strstr(err_msg(), "damaged.dat.tmp: CRC ") && strstr(err_msg(), "damaged on its way"));
	store_file_free(&f);
	/* a write through the descriptor that failed: the file cannot commit */
	CHECK_EQ(store_file_create(c, "failed.dat", &f), 0);
	fd = store_file_fd(f, &at);
	CHECK(fd >= 0);
	err_clear();
	CHECK_EQ(store_file_wrote(f, 10, -ENOSPC), -ENOSPC);
	CHECK(strstr(err_msg(), "failed.dat.tmp: cannot write") != NULL);
	CHECK(store_file_commit(f) != 0);
	CHECK_EQ(store_file_fd(f, &at), -EBADF);
	store_file_free(&f);
	CHECK_EQ(store_ckpt_commit(c, 3), 0);
	store_ckpt_free(&c);
	path_of(s, name, "vouched.dat", path);
	fd = open(path, O_RDONLY);
	CHECK(fd >= 0 && read(fd, back, sizeof(back)) == (ssize_t)sizeof(data));
	CHECK(memcmp(back, data, sizeof(data)) == 0);
	close(fd);
	/* the record's CRC is the bytes' (verify reads them) except where a
	 * wrong one was vouched for */
	err_clear();
	CHECK_EQ(store_verify(s, name), -EBADMSG);
	CHECK(strstr(err_msg(), "vouched-wrong.dat: content damaged") != NULL);
	path_of(s, name, "vouched-wrong.dat", path);
	CHECK_EQ(unlink(path), 0);
	err_clear();
	CHECK_EQ(store_verify(s, name), -EBADMSG);
	CHECK(strstr(err_msg(), "vouched-wrong.dat: missing") != NULL);
	store_close(&s);
	CHECK_EQ(cfg_set("direct_io", "on"), 0);
}

/* An image written through the store (its sink) verifies with img_verify;
 * one flipped payload byte is found with the image reader's message. */
static void test_verify_image(void)
{
	struct store *s = open_job("image");
	struct img_writer_opts opts;
	struct img_writer *w = NULL;
	struct store_ckpt *c = NULL;
	struct store_file *f = NULL;
	char path[PATH_MAX], buf[100000], name[64];
	int failures = check_failures;
	uint64_t bytes = 0;

	fill(buf, sizeof(buf), 5);
	img_writer_opts_default(&opts);
	opts.compress = "none";
	opts.threads = 0;
	CHECK_EQ(store_ckpt_begin(s, &c), 0);
	CHECK_EQ(store_file_create(c, "rank-0.img", &f), 0);
	CHECK_EQ(img_writer_create(store_file_write, f, &opts, &w), 0);
	if (w) {
		CHECK_EQ(img_section_begin(w, "memory", "heap"), 0);
		CHECK_EQ(img_write(w, buf, sizeof(buf)), 0);
		CHECK_EQ(img_section_end(w), 0);
		CHECK_EQ(img_writer_finish(w, &bytes), 0);
		img_writer_free(&w);
	}
	CHECK_EQ(store_file_commit(f), 0);
	store_file_free(&f);
	CHECK_EQ(store_ckpt_commit(c, 1), 0);
	strcpy(name, store_ckpt_name(c));
	store_ckpt_free(&c);
	CHECK_EQ(store_verify(s, name), 0);
	if (check_failures != failures)
		fprintf(stderr, "  verify: %s\n", err_msg());
	/* Somewhere in the middle of the payload. */
	path_of(s, name, "rank-0.img", path);
	flip_byte(path, (off_t)(bytes / 3));
	err_clear();
	CHECK_EQ(store_verify(s, name), -EBADMSG);
	CHECK(strstr(err_msg(), "ckpt-000001/rank-0.img") != NULL);
	CHECK(strstr(err_msg(), "'heap'") != NULL);        /* the reader's own words */
	if (check_failures != failures)
		fprintf(stderr, "  verify: %s\n", err_msg());
	flip_byte(path, (off_t)(bytes / 3));
	CHECK_EQ(store_verify(s, name), 0);
	/* A damaged magic: the FILE record knows it was an image, so the image
	 * reader still gets it, and says what is wrong, not just "CRC". */
	flip_byte(path, 1);
	err_clear();
	CHECK_EQ(store_verify(s, name), -EBADMSG);
	CHECK(strstr(err_msg(), "rank-0.img") != NULL);
	CHECK(strstr(err_msg(), "CRC32C") == NULL);
	store_close(&s);
}

/* ---- concurrency ---- */

#define RANKS 6

static void rank_main(const char *ckpt, unsigned rank)
{
	struct store *s = NULL;
	struct store_ckpt *c = NULL;
	char fname[32];
	int ret;

	ret = store_open("global", root, "ranks", &s);
	if (ret == 0)
		ret = store_ckpt_join(s, ckpt, &c);
	snprintf(fname, sizeof(fname), "rank-%u.dat", rank);
	if (ret == 0)
		ret = put_file(c, fname, 200000 + rank, rank);
	if (ret)
		fprintf(stderr, "rank %u: %s\n", rank, err_msg());
	store_ckpt_free(&c);
	store_close(&s);
	_exit(ret ? 1 : 0);
}

/* Images whose chunks reach the store with their CRC (store_file_write_crc,
 * no second pass): the file's record holds the CRC of the bytes on disk,
 * for every kind of chunk (full, partial, sparse, zero, compressed), with
 * and without the writer's threads. */
static void test_write_crc(void)
{
	struct store *s = open_job("write-crc");
	static char buf[5 * 16384 + 1000];
	char path[PATH_MAX], name[64], file[32];
	struct img_writer_opts opts;
	struct store_ckpt *c = NULL;
	struct store_file_info *files = NULL;
	size_t n = 0;

	fill(buf, sizeof(buf), 9);
	memset(buf + 16384, 0, 16384);          /* a zero chunk */
	memset(buf + 3 * 16384, 0, 4096);       /* a sparse one */
	img_writer_opts_default(&opts);
	opts.chunk_size = 16384;
	CHECK_EQ(store_ckpt_begin(s, &c), 0);
	for (int i = 0; c && i < 4; i++) {
		struct img_writer *w = NULL;
		struct store_file *f = NULL;

		opts.threads = i & 1 ? 2 : 0;
		opts.compress = i & 2 ? "zstd" : "none";
		snprintf(file, sizeof(file), "rank-%d.img", i);
		CHECK_EQ(store_file_create(c, file, &f), 0);
		CHECK_EQ(img_writer_create(store_file_write, f, &opts, &w), 0);
		if (w) {
			img_writer_sink_crc(w, store_file_write_crc);
			CHECK_EQ(img_section_begin(w, "memory", "heap"), 0);
			CHECK_EQ(img_write(w, buf, sizeof(buf)), 0);
			CHECK_EQ(img_section_end(w), 0);
			CHECK_EQ(img_writer_finish(w, NULL), 0);
			img_writer_free(&w);
		}
		CHECK_EQ(store_file_commit(f), 0);
		store_file_free(&f);
	}
	CHECK_EQ(store_ckpt_commit(c, 4), 0);
	snprintf(name, sizeof(name), "%s", c ? store_ckpt_name(c) : "");
	store_ckpt_free(&c);
	CHECK_EQ(store_ckpt_files(s, name, &files, &n), 0);
	CHECK_EQ(n, 4);
	for (size_t i = 0; i < n; i++) {
		static char disk[sizeof(buf) * 2];
		int fd;
		ssize_t got = -1;

		path_of(s, name, files[i].name, path);
		fd = open(path, O_RDONLY);
		if (fd >= 0)
			got = read(fd, disk, sizeof(disk));
		if (fd >= 0)
			close(fd);
		CHECK(got > 0 && (uint64_t)got == files[i].size);
		if (got > 0)
			CHECK_EQ(files[i].crc, crc32c(0, disk, (size_t)got));
	}
	free(files);
	CHECK_EQ(store_verify(s, name), 0);
	store_close(&s);
}

static void test_ranks(void)
{
	struct store *s = open_job("ranks");
	struct store_file_info *files = NULL;
	struct store_ckpt *c = NULL;
	pid_t pids[RANKS];
	size_t count = 0;
	int status;

	CHECK_EQ(store_ckpt_begin(s, &c), 0);
	if (!c)
		return;
	for (unsigned r = 0; r < RANKS; r++) {
		pids[r] = fork();
		if (pids[r] == 0)
			rank_main(store_ckpt_name(c), r);
	}
	for (unsigned r = 0; r < RANKS; r++) {
		CHECK_EQ(waitpid(pids[r], &status, 0), pids[r]);
		CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	CHECK_EQ(store_ckpt_commit(c, RANKS), 0);
	CHECK_EQ(store_ckpt_files(s, store_ckpt_name(c), &files, &count), 0);
	CHECK_EQ(count, RANKS);
	free(files);
	CHECK_EQ(store_verify(s, store_ckpt_name(c)), 0);
	CHECK(selected(s, store_ckpt_name(c)));
	store_ckpt_free(&c);
	store_close(&s);
}

#define NODE_FILES 200     /* more than one FILES record holds */

/* A node agent's way (docs/coordinator.md): its ranks commit their images
 * without records, it records them all at once in FILES records (each file
 * checked in place first); the seal, the file list and verify see every
 * file. A file committed but never recorded fails the seal. */
static void test_node_records(void)
{
	struct store *s = open_job("node_records"), *agent = open_job("node_records");
	struct store_file_record recs[NODE_FILES], extra;
	struct store_file_info *files = NULL;
	struct store_ckpt *c = NULL, *join = NULL;
	struct store_file *f = NULL;
	size_t count = 0;
	char name[32], path[PATH_MAX];
	int ret;

	CHECK_EQ(store_ckpt_begin(s, &c), 0);
	if (!c)
		return;
	for (unsigned i = 0; i < NODE_FILES; i++) {
		char buf[100];

		snprintf(name, sizeof(name), "rank-%05u.img", i);
		fill(buf, sizeof(buf), i);
		CHECK_EQ(store_file_create(c, name, &f), 0);
		CHECK_EQ(store_file_write(f, buf, 50 + i % 50), 0);
		CHECK_EQ(store_file_commit_unrecorded(f, &recs[i]), 0);
		CHECK_EQ(recs[i].info.size, 50 + i % 50);
		CHECK_EQ(recs[i].info.crc, crc32c(0, buf, 50 + i % 50));
		store_file_free(&f);
		path_of(s, store_ckpt_name(c), name, path);
		CHECK(exists(path));    /* durable under its name, kept */
	}
	/* not recorded yet: the index knows none of them */
	CHECK_EQ(store_ckpt_files(s, store_ckpt_name(c), &files, &count), 0);
	CHECK_EQ(count, 0);
	free(files);
	CHECK_EQ(store_ckpt_join_begun(agent, store_ckpt_name(c), &join), 0);
	/* a record must say what is in place: refused, nothing appended */
	extra = recs[7];
	extra.info.size++;
	CHECK_EQ(store_ckpt_record_files(join, &extra, 1), -EIO);
	CHECK(strstr(err_msg(), "rank-00007.img has 57 bytes, its record says 58") != NULL);
	snprintf(extra.info.name, sizeof(extra.info.name), "rank-99999.img");
	CHECK_EQ(store_ckpt_record_files(join, &extra, 1), -EIO);
	CHECK(strstr(err_msg(), "rank-99999.img is missing") != NULL);
	CHECK_EQ(store_ckpt_files(s, store_ckpt_name(c), &files, &count), 0);
	CHECK_EQ(count, 0);
	free(files);
	CHECK_EQ(store_ckpt_record_files(join, recs, NODE_FILES), 0);
	CHECK_EQ(store_ckpt_commit(c, NODE_FILES), 0);
	CHECK_EQ(store_ckpt_files(s, store_ckpt_name(c), &files, &count), 0);
	CHECK_EQ(count, NODE_FILES);
	for (size_t i = 0; i < count; i++)
		CHECK(files[i].size == recs[i].info.size && files[i].crc == recs[i].info.crc &&
		      strcmp(files[i].name, recs[i].info.name) == 0);
	free(files);
	CHECK_EQ(store_verify(s, store_ckpt_name(c)), 0);
	CHECK(selected(s, store_ckpt_name(c)));
	store_ckpt_free(&join);
	store_ckpt_free(&c);

	/* one of 3 committed but not recorded: the seal fails, naming the count */
	CHECK_EQ(store_ckpt_begin(s, &c), 0);
	if (!c)
		return;
	for (unsigned i = 0; i < 3; i++) {
		snprintf(name, sizeof(name), "rank-%05u.img", i);
		CHECK_EQ(store_file_create(c, name, &f), 0);
		CHECK_EQ(store_file_write(f, "abc", 3), 0);
		CHECK_EQ(store_file_commit_unrecorded(f, i < 2 ? &recs[i] : &extra), 0);
		store_file_free(&f);
	}
	CHECK_EQ(store_ckpt_record_files(c, recs, 2), 0);
	ret = store_ckpt_commit(c, 3);
	CHECK_EQ(ret, -EIO);
	CHECK(strstr(err_msg(), "2 of 3 expected file(s) committed") != NULL);
	CHECK_EQ(state_of(s, store_ckpt_name(c)), STORE_FAILED);
	store_ckpt_free(&c);
	store_close(&agent);
	store_close(&s);
}

#define BEGINNERS 8

/* Checkpoints begun at the same time get distinct names. */
static void test_concurrent_begin(void)
{
	struct store *s = open_job("begins");
	struct store_ckpt_info *list = NULL;
	pid_t pids[BEGINNERS];
	size_t count = 0;
	int status;

	for (int p = 0; p < BEGINNERS; p++) {
		pids[p] = fork();
		if (pids[p] == 0) {
			struct store *t = NULL;
			int ret = store_open("global", root, "begins", &t);

			for (int k = 0; ret == 0 && k < 5; k++) {
				struct store_ckpt *c = NULL;

				ret = store_ckpt_begin(t, &c);
				if (ret == 0)
					ret = put_file(c, "only", 10, (unsigned)p);
				if (ret == 0)
					ret = store_ckpt_commit(c, 1);
				store_ckpt_free(&c);
			}
			store_close(&t);
			_exit(ret ? 1 : 0);
		}
	}
	for (int p = 0; p < BEGINNERS; p++) {
		CHECK_EQ(waitpid(pids[p], &status, 0), pids[p]);
		CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	CHECK_EQ(store_list(s, &list, &count, NULL), 0);
	CHECK_EQ(count, BEGINNERS * 5);
	for (size_t i = 0; i < count; i++) {
		char want[64];

		snprintf(want, sizeof(want), "ckpt-%06zu", i + 1);
		CHECK(strcmp(list[i].name, want) == 0);
		CHECK_EQ(list[i].state, STORE_COMPLETE);
		CHECK_EQ(list[i].files, 1);
	}
	free(list);
	CHECK_EQ(store_index_check(s), 0);
	store_close(&s);
}

/* A handle's begin reads the index on from its last begin or seal:
 * checkpoints another handle began meanwhile still count, the next number
 * is past them. A seal reads from its BEGIN on: files another handle
 * committed into it count. */
static void test_begin_reads_on(void)
{
	struct store *a = open_job("readson"), *b = open_job("readson");
	struct store_ckpt *c = NULL, *j = NULL;
	char name[64], path[PATH_MAX];

	CHECK_EQ(make_ckpt(a, 1, name), 0);
	CHECK(strcmp(name, "ckpt-000001") == 0);
	CHECK_EQ(make_ckpt(b, 1, name), 0);
	CHECK_EQ(make_ckpt(b, 2, name), 0);
	CHECK(strcmp(name, "ckpt-000003") == 0);
	CHECK_EQ(store_prune(b, 1, NULL), 0);          /* ckpt-000002's directory goes */
	CHECK_EQ(store_ckpt_begin(a, &c), 0);
	CHECK(c && strcmp(store_ckpt_name(c), "ckpt-000004") == 0);
	CHECK_EQ(make_ckpt(b, 1, name), 0);            /* begun and sealed meanwhile */
	CHECK(strcmp(name, "ckpt-000005") == 0);
	CHECK_EQ(store_ckpt_join(b, "ckpt-000004", &j), 0);
	CHECK_EQ(put_file(j, "rank-1.dat", 50, 1), 0);
	CHECK_EQ(put_file(c, "rank-0.dat", 40, 2), 0);
	CHECK_EQ(store_ckpt_commit(c, 2), 0);
	CHECK_EQ(state_of(b, "ckpt-000004"), STORE_COMPLETE);
	store_ckpt_free(&j);
	store_ckpt_free(&c);
	/* the seal read on past ckpt-000005 for the next begin: with its
	 * directory gone, its number still does not come again */
	path_of(a, "ckpt-000005", NULL, path);
	CHECK_EQ(posix->remove_tree(path), 0);
	CHECK_EQ(store_ckpt_begin(a, &c), 0);
	CHECK(c && strcmp(store_ckpt_name(c), "ckpt-000006") == 0);
	CHECK_EQ(store_ckpt_commit(c, 1), -EIO);       /* no file: still checked */
	CHECK(strstr(err_msg(), "0 of 1 expected") != NULL);
	store_ckpt_free(&c);
	CHECK_EQ(store_index_check(a), 0);
	store_close(&a);
	store_close(&b);
}

/* ---- fault points ---- */

/* One attempt at a checkpoint, as a producer would make it. */
static int attempt(struct store *s, char *name)
{
	struct store_ckpt *c = NULL;
	int ret;

	name[0] = '\0';
	ret = store_ckpt_begin(s, &c);
	if (ret == 0) {
		strcpy(name, store_ckpt_name(c));
		ret = put_file(c, "rank-0.dat", 20000, 3);
	}
	if (ret == 0)
		ret = put_file(c, "rank-1.dat", 20000, 4);
	if (ret == 0)
		ret = store_ckpt_commit(c, 2);
	if (ret && c)
		store_ckpt_abort(c, err_msg());
	store_ckpt_free(&c);
	return ret;
}

static const char *const commit_points[] = {
	"store.file.write", "store.file.fsync", "store.file.rename", "store.dir.fsync",
	"store.index.append", "store.index.torn", "store.index.fsync", "store.ckpt.commit",
};

/* Every point, every pass a checkpoint makes through it, with `fail`: the
 * attempt reports the error, and restart still picks the previous one. */
static void test_faults_fail(void)
{
	struct store *s = open_job("faults");
	char good[64], name[64], spec[64], path[PATH_MAX];
	int failures = check_failures;

	CHECK_EQ(make_ckpt(s, 1, good), 0);
	for (size_t p = 0; p < sizeof(commit_points) / sizeof(commit_points[0]); p++) {
		for (unsigned n = 1; n <= 8; n++) {
			int ret;

			snprintf(spec, sizeof(spec), "%s:%u:fail", commit_points[p], n);
			CHECK_EQ(fault_configure(spec), 0);
			err_clear();
			ret = attempt(s, name);
			CHECK_EQ(fault_configure(NULL), 0);
			if (ret == 0) {
				/* Fewer passes than n: nothing fired. */
				CHECK(selected(s, name));
				strcpy(good, name);
				break;
			}
			CHECK_EQ(ret, -EIO);
			CHECK(strstr(err_msg(), commit_points[p]) != NULL);
			CHECK(selected(s, good));
			if (name[0]) {
				CHECK(state_of(s, name) == STORE_FAILED);
				/* A failed file leaves neither its *.tmp nor an
				 * unrecorded final name behind. */
				path_of(s, name, "rank-1.dat.tmp", path);
				CHECK(!exists(path));
				path_of(s, name, "rank-0.dat.tmp", path);
				CHECK(!exists(path));
			}
			if (check_failures != failures) {
				fprintf(stderr, "  (fault %s: %s)\n", spec, err_msg());
				failures = check_failures;
			}
		}
	}
	/* The store still works afterwards. */
	CHECK_EQ(make_ckpt(s, 2, name), 0);
	CHECK(selected(s, name));
	store_close(&s);
}

/* The same points with `kill`: a crash at any of them leaves the previous
 * checkpoint selected, and the next checkpoint succeeds. */
static void test_faults_kill(void)
{
	struct store *s = open_job("crashes");
	char good[64], name[64], spec[64];
	int failures = check_failures;

	CHECK_EQ(make_ckpt(s, 1, good), 0);
	for (size_t p = 0; p < sizeof(commit_points) / sizeof(commit_points[0]); p++) {
		for (unsigned n = 1; n <= 8; n += 3) {
			int status;
			pid_t pid;

			snprintf(spec, sizeof(spec), "%s:%u:kill", commit_points[p], n);
			pid = fork();
			if (pid == 0) {
				struct store *t = NULL;

				if (fault_configure(spec) || store_open("global", root, "crashes", &t))
					_exit(3);
				_exit(attempt(t, name) ? 1 : 0);
			}
			CHECK_EQ(waitpid(pid, &status, 0), pid);
			CHECK(WIFSIGNALED(status) ? WTERMSIG(status) == SIGKILL
						  : WIFEXITED(status) && WEXITSTATUS(status) == 0);
			/* What restart picks is the last good one, or the new one
			 * if it got as far as a written COMPLETE record (a kill
			 * before its fsync loses nothing: the kernel has it). */
			CHECK_EQ(store_select(s, name, sizeof(name)), 0);
			CHECK(strcmp(name, good) >= 0);
			CHECK_EQ(state_of(s, name), STORE_COMPLETE);
			CHECK_EQ(store_verify(s, name), 0);
			if (strcmp(name, good) != 0) {
				CHECK(!WIFSIGNALED(status) || strcmp(commit_points[p], "store.index.fsync") == 0);
				strcpy(good, name);
			}
			if (check_failures != failures) {
				fprintf(stderr, "  (fault %s)\n", spec);
				failures = check_failures;
			}
		}
	}
	CHECK_EQ(make_ckpt(s, 2, name), 0);
	CHECK(selected(s, name));
	store_close(&s);
}

/* ---- the index through the store ---- */

static off_t find_in_file(const char *path, const char *needle)
{
	static char buf[1 << 16];
	int fd = open(path, O_RDONLY);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
	char *at;

	if (fd >= 0)
		close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	at = strstr(buf, needle);
	return at ? at - buf : -1;
}

static void test_damaged_index(void)
{
	struct store *s = open_job("damaged");
	struct store_ckpt_info *list = NULL;
	char a[64], b[64], path[PATH_MAX];
	size_t count = 0;
	unsigned bad = 0;
	off_t at;

	CHECK_EQ(make_ckpt(s, 1, a), 0);
	CHECK_EQ(make_ckpt(s, 1, b), 0);
	snprintf(path, sizeof(path), "%s/index", store_job_dir(s));
	/* b's COMPLETE record damaged: b is PARTIAL again, a is current. */
	at = find_in_file(path, "\"op\":\"COMPLETE\",\"ckpt\":\"ckpt-000002\"");
	CHECK(at > 0);
	flip_byte(path, at + 3);
	CHECK(selected(s, a));
	CHECK_EQ(store_list(s, &list, &count, &bad), 0);
	CHECK_EQ(bad, 1);
	CHECK(count == 2 && list[1].state == STORE_PARTIAL && list[0].current);
	free(list);
	err_clear();
	CHECK_EQ(store_index_check(s), -EBADMSG);
	CHECK(strstr(err_msg(), "damaged record at byte ") && strstr(err_msg(), path));
	flip_byte(path, at + 3);
	CHECK_EQ(store_index_check(s), 0);
	CHECK(selected(s, b));
	/* b's FILE record damaged: its COMPLETE promises a file the index no
	 * longer describes, so b cannot be checked and is not used. */
	at = find_in_file(path, "\"op\":\"FILE\",\"ckpt\":\"ckpt-000002\"");
	CHECK(at > 0);
	flip_byte(path, at + 3);
	CHECK(selected(s, a));
	CHECK_EQ(state_of(s, b), STORE_COMPLETE);
	err_clear();
	CHECK_EQ(store_verify(s, b), -EBADMSG);
	CHECK(strstr(err_msg(), "lost 1 of its 1 FILE record") != NULL);
	store_close(&s);
}

/* ---- prune ---- */

static void test_prune(void)
{
	struct store *s = open_job("prune");
	struct store_ckpt *c = NULL;
	char n[9][64], path[PATH_MAX];
	unsigned removed = 0;

	CHECK_EQ(make_ckpt(s, 1, n[1]), 0);                 /* 1 C */
	CHECK_EQ(make_ckpt(s, 1, n[2]), 0);                 /* 2 C */
	CHECK_EQ(store_ckpt_begin(s, &c), 0);               /* 3 FAILED */
	strcpy(n[3], store_ckpt_name(c));
	CHECK_EQ(store_ckpt_abort(c, "test"), 0);
	store_ckpt_free(&c);
	CHECK_EQ(make_ckpt(s, 1, n[4]), 0);                 /* 4 C */
	CHECK_EQ(store_ckpt_begin(s, &c), 0);               /* 5 PARTIAL */
	strcpy(n[5], store_ckpt_name(c));
	store_ckpt_free(&c);
	CHECK_EQ(make_ckpt(s, 1, n[6]), 0);                 /* 6 C */
	CHECK_EQ(store_ckpt_begin(s, &c), 0);               /* 7 PARTIAL, newest: in progress */
	strcpy(n[7], store_ckpt_name(c));
	store_ckpt_free(&c);

	/* keep 0: every COMPLETE stays; abandoned ones go. */
	CHECK_EQ(store_prune(s, 0, &removed), 0);
	CHECK_EQ(removed, 2);
	CHECK_EQ(state_of(s, n[3]), STORE_PRUNED);
	CHECK_EQ(state_of(s, n[5]), STORE_PRUNED);
	CHECK_EQ(state_of(s, n[7]), STORE_PARTIAL);
	CHECK_EQ(state_of(s, n[1]), STORE_COMPLETE);
	path_of(s, n[3], NULL, path);
	CHECK(!exists(path));

	/* keep 2: 6 and 4 stay. */
	CHECK_EQ(store_prune(s, 2, &removed), 0);
	CHECK_EQ(removed, 2);
	CHECK_EQ(state_of(s, n[1]), STORE_PRUNED);
	CHECK_EQ(state_of(s, n[2]), STORE_PRUNED);
	CHECK_EQ(state_of(s, n[4]), STORE_COMPLETE);
	CHECK_EQ(state_of(s, n[6]), STORE_COMPLETE);
	CHECK_EQ(state_of(s, n[7]), STORE_PARTIAL);
	path_of(s, n[1], NULL, path);
	CHECK(!exists(path));
	path_of(s, n[4], "rank-0.dat", path);
	CHECK(exists(path));
	CHECK(selected(s, n[6]));

	/* The current one stays even beyond keep: newest damaged -> 4 current. */
	path_of(s, n[6], "rank-0.dat", path);
	CHECK_EQ(unlink(path), 0);
	CHECK(selected(s, n[4]));
	CHECK_EQ(store_prune(s, 1, &removed), 0);
	CHECK_EQ(removed, 0);
	CHECK(selected(s, n[4]));

	/* A crash between the PRUNED record and the removal: the next prune
	 * finishes the job; meanwhile nothing trusts the checkpoint. */
	CHECK_EQ(make_ckpt(s, 1, n[8]), 0);
	CHECK_EQ(fault_configure("store.prune.remove:1:fail"), 0);
	CHECK_EQ(store_prune(s, 1, &removed), -EIO);
	CHECK_EQ(fault_configure(NULL), 0);
	CHECK(strstr(err_msg(), "store.prune.remove") != NULL);
	CHECK(selected(s, n[8]));
	CHECK_EQ(store_prune(s, 1, &removed), 0);
	CHECK_EQ(removed, 3);                               /* 4, 6, and 7 now */
	CHECK_EQ(state_of(s, n[7]), STORE_PRUNED);          /* older than 8 */
	path_of(s, n[4], NULL, path);
	CHECK(!exists(path));
	path_of(s, n[6], NULL, path);
	CHECK(!exists(path));
	CHECK_EQ(store_verify(s, n[4]), -EBADMSG);
	CHECK(strstr(err_msg(), "PRUNED") != NULL);
	CHECK(selected(s, n[8]));

	/* A directory the index never heard of (a begin that died before its
	 * BEGIN record): verify refuses it, prune removes it once a newer
	 * checkpoint is COMPLETE, and begin never reuses its number. */
	path_of(s, "ckpt-000009", NULL, path);
	CHECK_EQ(mkdir(path, 0755), 0);
	err_clear();
	CHECK_EQ(store_verify(s, "ckpt-000009"), -EBADMSG);
	CHECK(strstr(err_msg(), "ckpt-000009: not established (not in the index") != NULL);
	CHECK_EQ(store_prune(s, 1, &removed), 0);
	CHECK_EQ(removed, 0);                               /* newer than every COMPLETE */
	CHECK(exists(path));
	CHECK_EQ(make_ckpt(s, 1, n[0]), 0);
	CHECK(strcmp(n[0], "ckpt-000010") == 0);
	CHECK_EQ(store_prune(s, 2, &removed), 0);
	CHECK_EQ(removed, 1);
	CHECK(!exists(path));
	CHECK(selected(s, n[0]));
	CHECK_EQ(store_verify(s, n[8]), 0);
	store_close(&s);
}

/* Annex: files added to a COMPLETE checkpoint, never replacing a sealed one;
 * LEVEL records; a PARTIAL checkpoint has no annex. */
static void test_annex(void)
{
	struct store *s = open_job("annex");
	struct store_ckpt *c = NULL, *a = NULL;
	struct store_file_info *files = NULL;
	struct store_ckpt_info *list = NULL;
	char name[64], path[PATH_MAX];
	size_t count = 0;

	CHECK_EQ(make_ckpt(s, 2, name), 0);
	CHECK_EQ(store_ckpt_annex(s, name, &a), 0);
	CHECK_EQ(put_file(a, "partner-0.dat", 777, 9), 0);
	/* a sealed file keeps its record: the annex cannot even create it */
	CHECK_EQ(put_file(a, "rank-0.dat", 10, 1), -EEXIST);
	store_ckpt_free(&a);
	CHECK_EQ(store_ckpt_files(s, name, &files, &count), 0);
	CHECK(count == 3 && strcmp(files[2].name, "partner-0.dat") == 0 && files[2].size == 777);
	CHECK(files[0].size == 5000);
	free(files);
	CHECK(selected(s, name));
	CHECK_EQ(store_verify(s, name), 0);

	CHECK_EQ(store_ckpt_level(s, name, "partner", NULL), 0);
	CHECK_EQ(store_list(s, &list, &count, NULL), 0);
	CHECK(count == 1 && strcmp(list[0].level, "partner") == 0 && !list[0].level_reason[0] &&
	      list[0].files == 3 && list[0].state == STORE_COMPLETE);
	free(list);
	CHECK_EQ(store_ckpt_level(s, name, "single", "rank 3: connection refused"), 0);
	CHECK_EQ(store_list(s, &list, &count, NULL), 0);
	CHECK(count == 1 && strcmp(list[0].level, "single") == 0 &&
	      strcmp(list[0].level_reason, "rank 3: connection refused") == 0);
	free(list);

	/* a FILE record lost to damage is not made up for by an annex file */
	{
		char ipath[PATH_MAX], *text = NULL, *at;
		FILE *fi;
		long len;

		snprintf(ipath, sizeof(ipath), "%s/index", store_job_dir(s));
		fi = fopen(ipath, "rb");
		CHECK(fi != NULL);
		if (fi) {
			fseek(fi, 0, SEEK_END);
			len = ftell(fi);
			rewind(fi);
			text = malloc((size_t)len + 1);
			CHECK(text && fread(text, 1, (size_t)len, fi) == (size_t)len);
			fclose(fi);
			text[len] = '\0';
			at = strstr(text, "\"rank-1.dat\"");
			CHECK(at != NULL);
			if (at)
				flip_byte(ipath, at - text + 3);
			free(text);
		}
		CHECK_EQ(store_verify(s, name), -EBADMSG);
		CHECK(strstr(err_msg(), "lost 1 of its 2 FILE record(s)") != NULL);
		CHECK(selected(s, NULL));
	}

	/* an annex file that went missing makes the checkpoint unusable, as
	 * any of its files would */
	path_of(s, name, "partner-0.dat", path);
	CHECK_EQ(unlink(path), 0);
	CHECK(selected(s, NULL));

	CHECK_EQ(store_ckpt_begin(s, &c), 0);
	CHECK_EQ(store_ckpt_annex(s, store_ckpt_name(c), &a), -EINVAL);
	CHECK(a == NULL && strstr(err_msg(), "PARTIAL, not COMPLETE") != NULL);
	store_ckpt_free(&c);
	store_close(&s);
}

/* An annex written before the seal (a partner copy streamed while the
 * images are written): its file commits only once the checkpoint is
 * COMPLETE; the file being written is read as it grows. */
#define BIG (9u << 20)
static void test_annex_early(void)
{
	struct store *s = open_job("early");
	struct store_ckpt *c = NULL, *a = NULL;
	struct store_file *f = NULL, *p = NULL, *q = NULL;
	struct store_file_info *files = NULL;
	struct store_io *io = NULL;
	char buf[4096], path[PATH_MAX], *big = calloc(1, BIG);
	size_t count = 0;

	memset(buf, 7, sizeof(buf));
	CHECK_EQ(store_ckpt_begin(s, &c), 0);
	CHECK_EQ(store_io_open_writing(s, store_ckpt_name(c), "rank-0.img", &io), -ENOENT);
	CHECK_EQ(store_file_create(c, "rank-0.img", &f), 0);
	CHECK_EQ(store_file_write(f, buf, 1000), 0);
	CHECK_EQ(store_io_open_writing(s, store_ckpt_name(c), "rank-0.img", &io), 0);
	/* (with direct I/O the writer's bytes land in stages of 8 MiB) */
	CHECK(store_io_size(io) <= 1000 && !store_io_committed(io));
	CHECK(big != NULL);
	if (big)
		CHECK_EQ(store_file_write(f, big, BIG), 0);
	/* a full stage goes out on the file's stage writer: it lands soon */
	for (int i = 0; i < 10000 && store_io_size(io) < (8u << 20); i++)
		usleep(1000);
	CHECK(store_io_size(io) >= (8u << 20) && store_io_size(io) <= BIG + 1000 &&
	      !store_io_committed(io));

	CHECK_EQ(store_ckpt_annex_early(s, store_ckpt_name(c), &a), 0);
	CHECK_EQ(store_file_create(a, "partner-1.img", &p), 0);
	CHECK_EQ(store_file_write(p, buf, 2000), 0);
	CHECK_EQ(store_file_create(a, "partner-2.img", &q), 0);
	/* not sealed yet: nothing of the annex counts */
	CHECK_EQ(store_file_commit(p), -EINVAL);
	CHECK(strstr(err_msg(), "PARTIAL, not COMPLETE") != NULL);

	CHECK_EQ(store_file_commit(f), 0);
	CHECK(store_io_committed(io) && store_io_size(io) == BIG + 1000);
	CHECK_EQ(store_ckpt_commit(c, 1), 0);
	CHECK_EQ(store_file_commit(p), 0);
	/* one never committed leaves nothing, not even its *.tmp */
	store_file_free(&q);
	path_of(s, store_ckpt_name(c), "partner-2.img.tmp", path);
	CHECK(!exists(path));
	CHECK_EQ(store_ckpt_files(s, store_ckpt_name(c), &files, &count), 0);
	CHECK(count == 2 && strcmp(files[1].name, "partner-1.img") == 0 && files[1].size == 2000);
	free(files);
	CHECK_EQ(store_verify(s, store_ckpt_name(c)), 0);
	store_file_free(&p);
	store_file_free(&f);
	store_io_close(&io);
	store_ckpt_free(&a);
	store_ckpt_free(&c);
	store_close(&s);
	free(big);
}

/* A checkpoint of .img files of the given sizes (seeds 1, 2, ...). */
static int make_images(struct store *s, const size_t *sizes, unsigned n, char *name)
{
	struct store_ckpt *c = NULL;
	char fname[32];
	int ret = store_ckpt_begin(s, &c);

	for (unsigned i = 0; ret == 0 && i < n; i++) {
		snprintf(fname, sizeof(fname), "rank-%u.img", i);
		ret = put_file(c, fname, sizes[i], i + 1);
	}
	ret = ret ? ret : put_file(c, "note.json", 100, 9);
	ret = ret ? ret : store_ckpt_commit(c, n + 1);
	if (c && name)
		strcpy(name, store_ckpt_name(c));
	store_ckpt_free(&c);
	return ret;
}

static ino_t inode_of(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 ? st.st_ino : 0;
}

/* Recycling: prune keeps a removed checkpoint's images as spares, a new file
 * is written over one (the same inode, preferring the same name), cut to its
 * own length, and verifies; spares never show as checkpoints; drop removes
 * them; with recycling off prune removes everything. */
static void test_recycle(void)
{
	struct store *s = open_job("recycle");
	struct store_ckpt_info *list = NULL;
	size_t first[] = { 90000, 91000 }, next[] = { 3000, 200000, 5000 }, count = 0;
	char a[64], b[64], c[64], path[PATH_MAX], spare0[PATH_MAX], spare1[PATH_MAX];
	ino_t i0, i1;
	unsigned removed = 0;

	store_set_recycle(s, 8);
	CHECK_EQ(make_images(s, first, 2, a), 0);
	CHECK_EQ(make_images(s, first, 2, b), 0);
	CHECK_EQ(store_prune(s, 1, &removed), 0);
	CHECK_EQ(removed, 1);
	snprintf(spare0, sizeof(spare0), "%s/.spare/%s-rank-0.img", store_job_dir(s), a);
	snprintf(spare1, sizeof(spare1), "%s/.spare/%s-rank-1.img", store_job_dir(s), a);
	i0 = inode_of(spare0);
	i1 = inode_of(spare1);
	CHECK(i0 && i1);
	path_of(s, a, NULL, path);
	CHECK(!exists(path));
	snprintf(path, sizeof(path), "%s/.spare/%s-note.json", store_job_dir(s), a);
	CHECK(!exists(path));                           /* images only */

	/* smaller over rank-0's, larger over rank-1's, the third new */
	CHECK_EQ(make_images(s, next, 3, c), 0);
	path_of(s, c, "rank-0.img", path);
	CHECK(inode_of(path) == i0);
	path_of(s, c, "rank-1.img", path);
	CHECK(inode_of(path) == i1);
	CHECK(!exists(spare0) && !exists(spare1));
	CHECK_EQ(store_verify(s, c), 0);                /* sizes and CRCs as written */
	CHECK_EQ(store_list(s, &list, &count, NULL), 0);
	CHECK(count == 3 && list[0].state == STORE_PRUNED && strcmp(list[2].name, c) == 0 &&
	      list[2].files == 4);
	free(list);

	CHECK_EQ(store_prune(s, 1, &removed), 0);       /* b's images become spares */
	snprintf(path, sizeof(path), "%s/.spare", store_job_dir(s));
	CHECK(exists(path));
	CHECK_EQ(store_spares_drop(s), 0);
	CHECK(!exists(path));
	CHECK_EQ(store_spares_drop(s), 0);              /* nothing to drop: fine */

	/* a reservation is a spare named after the file it is for */
	{
		struct store_ckpt *ck = NULL;
		char rpath[PATH_MAX];
		struct stat st;
		ino_t ri;

		CHECK_EQ(store_spare_reserve(s, "rank-9.img", 1u << 20), 0);
		CHECK_EQ(store_spare_reserve(s, "rank-9.img", 2u << 20), 0);   /* grows */
		snprintf(rpath, sizeof(rpath), "%s/.spare/reserve-rank-9.img", store_job_dir(s));
		CHECK(stat(rpath, &st) == 0 && st.st_size == (2 << 20));
		ri = st.st_ino;
		CHECK_EQ(store_ckpt_begin(s, &ck), 0);
		CHECK_EQ(put_file(ck, "rank-9.img", 5000, 3), 0);
		path_of(s, store_ckpt_name(ck), "rank-9.img", rpath);
		CHECK(stat(rpath, &st) == 0 && st.st_ino == ri && st.st_size == 5000);
		CHECK_EQ(store_ckpt_commit(ck, 1), 0);
		CHECK_EQ(store_verify(s, store_ckpt_name(ck)), 0);
		store_ckpt_free(&ck);
		CHECK_EQ(store_spare_reserve(s, "../x", 10), -EINVAL);
	}

	CHECK_EQ(store_spares_drop(s), 0);
	store_set_recycle(s, 0);
	CHECK_EQ(make_images(s, first, 2, a), 0);
	CHECK_EQ(store_prune(s, 1, &removed), 0);
	CHECK(!exists(path));
	CHECK_EQ(store_spare_reserve(s, "rank-9.img", 1u << 20), 0);     /* off: nothing */
	CHECK(!exists(path));
	store_close(&s);
}

/* Retiring (a node cache's images and copies beyond cache_keep): a
 * committed file becomes a spare with its bytes; the next file of that
 * name is written over it, a reader following it sees only what was
 * written (the writer's mark, not the spare's length), and it is cut to
 * its own length at commit; a file a reader holds is removed instead, and
 * the reader still reads it whole; without recycling it is removed. */
static void test_retire(void)
{
	struct store *s = open_job("retire");
	size_t sizes[] = { 90000, 91000 };
	char a[64], path[PATH_MAX], spare[PATH_MAX], tmp[PATH_MAX + 8], buf[3333];
	struct store_ckpt *ck = NULL;
	struct store_file *f = NULL;
	struct store_io *io = NULL;
	struct stat st;
	ino_t i0;

	store_set_recycle(s, 8);
	CHECK_EQ(make_images(s, sizes, 2, a), 0);
	path_of(s, a, "rank-0.img", path);
	i0 = inode_of(path);
	CHECK_EQ(store_io_open(s, a, "rank-1.img", &io), 0);     /* a reader holds rank-1 */
	CHECK_EQ(store_file_retire(s, a, "rank-0.img"), 0);
	CHECK_EQ(store_file_retire(s, a, "rank-1.img"), 0);
	CHECK_EQ(store_file_retire(s, a, "rank-7.img"), 0);      /* missing: fine */
	CHECK(!exists(path));
	snprintf(spare, sizeof(spare), "%s/.spare/%s-rank-0.img", store_job_dir(s), a);
	CHECK(stat(spare, &st) == 0 && st.st_ino == i0 && st.st_size == 90000);
	snprintf(spare, sizeof(spare), "%s/.spare/%s-rank-1.img", store_job_dir(s), a);
	CHECK(!exists(spare));                                   /* removed, not spared */
	path_of(s, a, "rank-1.img", path);
	CHECK(!exists(path));
	CHECK(io && store_io_size(io) == 91000 && store_io_read(io, buf, 3333, 87000) == 0);
	store_io_close(&io);

	CHECK_EQ(store_ckpt_begin(s, &ck), 0);
	CHECK_EQ(store_file_create(ck, "rank-0.img", &f), 0);
	fill(buf, sizeof(buf), 5);
	CHECK_EQ(store_file_write(f, buf, sizeof(buf)), 0);
	path_of(s, store_ckpt_name(ck), "rank-0.img", path);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	CHECK(stat(tmp, &st) == 0 && st.st_ino == i0 && st.st_size == 90000);
	/* a reader following it sees what was written, never the spare's bytes */
	CHECK_EQ(store_io_open_writing(s, store_ckpt_name(ck), "rank-0.img", &io), 0);
	CHECK(io && store_io_size(io) <= sizeof(buf));
	CHECK(io && store_fd_written("global", store_io_fd(io)) == store_io_size(io));
	store_io_close(&io);
	CHECK_EQ(store_file_commit(f), 0);
	store_file_free(&f);
	CHECK(stat(path, &st) == 0 && st.st_ino == i0 && st.st_size == 3333);
	CHECK_EQ(store_ckpt_commit(ck, 1), 0);
	CHECK_EQ(store_verify(s, store_ckpt_name(ck)), 0);

	store_set_recycle(s, 0);                                 /* off: removed */
	CHECK_EQ(store_file_retire(s, store_ckpt_name(ck), "rank-0.img"), 0);
	CHECK(!exists(path));
	snprintf(spare, sizeof(spare), "%s/.spare/%s-rank-0.img", store_job_dir(s),
		 store_ckpt_name(ck));
	CHECK(!exists(spare));
	store_ckpt_free(&ck);
	store_close(&s);
}

/* A file still being written (its *.tmp: the copy of an older checkpoint
 * whose member still runs when the node agent retires that checkpoint's
 * partner copies, node_level.c drop_stale) is removed, never made a
 * spare: the next file written over the spare would share its pages with
 * a writer that goes on writing into them. */
static void test_retire_writing(void)
{
	struct store *s = open_job("retire-writing");
	char a[64], path[PATH_MAX], tmp[PATH_MAX + 8], spare[PATH_MAX], buf[4096];
	struct store_ckpt *ck = NULL, *ck2 = NULL;
	struct store_file *w = NULL, *f = NULL;
	struct stat st;
	ino_t i0;

	store_set_recycle(s, 8);
	fill(buf, sizeof(buf), 9);
	CHECK_EQ(store_ckpt_begin(s, &ck), 0);
	snprintf(a, sizeof(a), "%s", store_ckpt_name(ck));
	CHECK_EQ(store_file_create(ck, "partner-1.img", &w), 0);
	CHECK_EQ(store_file_write(w, buf, sizeof(buf)), 0);
	path_of(s, a, "partner-1.img", path);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	i0 = inode_of(tmp);
	CHECK_EQ(store_file_retire(s, a, "partner-1.img.tmp"), 0);
	snprintf(spare, sizeof(spare), "%s/.spare/%s-partner-1.img.tmp", store_job_dir(s), a);
	CHECK(!exists(spare));
	CHECK(!exists(tmp));

	CHECK_EQ(store_ckpt_begin(s, &ck2), 0);
	CHECK_EQ(store_file_create(ck2, "partner-1.img", &f), 0);
	path_of(s, store_ckpt_name(ck2), "partner-1.img", path);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	CHECK(stat(tmp, &st) == 0 && st.st_ino != i0);
	store_file_free(&f);
	store_file_free(&w);
	store_ckpt_free(&ck2);
	store_ckpt_free(&ck);
	store_close(&s);
}

/* A reader holds a shared lock on what it reads only where the file can
 * be written over (a store that recycles): on the global tier an open
 * takes no lock, a round trip each on NFS. */
static void test_io_lock(void)
{
	struct store *s = open_job("io-lock");
	size_t sizes[] = { 5000 };
	char a[64], path[PATH_MAX];
	struct store_io *io = NULL;
	int fd;

	CHECK_EQ(make_images(s, sizes, 1, a), 0);
	path_of(s, a, "rank-0.img", path);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	CHECK(fd >= 0);
	for (int recycle = 0; recycle < 2; recycle++) {
		store_set_recycle(s, recycle ? 8 : 0);
		CHECK_EQ(store_io_open(s, a, "rank-0.img", &io), 0);
		CHECK_EQ(flock(fd, LOCK_EX | LOCK_NB) == 0 ? 0 : -errno,
			 recycle ? -EWOULDBLOCK : 0);
		flock(fd, LOCK_UN);
		store_io_close(&io);
	}
	close(fd);
	store_close(&s);
}

/* A node cache once a checkpoint is established (node_level_verdict): the
 * older checkpoints beyond cache_keep lose every file (into spares) and
 * their directories, ordered by number across the six digits of the
 * padding (ckpt-999999 is older than ckpt-1000000, which strcmp puts
 * first); a newer one (being written) and what is no checkpoint stay; a
 * failed one loses its own. */
static void test_cache_trim(void)
{
	static const char *const names[] = { "ckpt-999998", "ckpt-999999", "ckpt-1000000",
					     "ckpt-1000001", "ckpt-1000002" };
	const unsigned n = sizeof(names) / sizeof(names[0]);
	struct store *s = open_job("cache-trim");
	struct store_ckpt *c = NULL;
	char path[PATH_MAX];
	int gone[5];

	store_set_recycle(s, 64);
	for (unsigned i = 0; i < n; i++) {
		CHECK_EQ(store_ckpt_begin_named(s, names[i], &c), 0);
		CHECK(c && put_file(c, "rank-00000.img", 3000, i) == 0);
		CHECK(c && put_file(c, "partner-00001.img", 2000, i) == 0);
		store_ckpt_free(&c);
	}
	/* cache_keep 2, ckpt-1000001 established: 1000000 and it stay */
	CHECK_EQ(store_cache_trim(s, "ckpt-1000001", 2), 0);
	for (unsigned i = 0; i < n; i++) {
		path_of(s, names[i], NULL, path);
		gone[i] = !exists(path);
	}
	CHECK(gone[0] && gone[1] && !gone[2] && !gone[3] && !gone[4]);
	snprintf(path, sizeof(path), "%s/.spare/ckpt-999999-partner-00001.img", store_job_dir(s));
	CHECK(exists(path));
	snprintf(path, sizeof(path), "%s/index", store_job_dir(s));
	CHECK(exists(path));
	/* cache_keep 1 */
	CHECK_EQ(store_cache_trim(s, "ckpt-1000001", 1), 0);
	path_of(s, "ckpt-1000000", NULL, path);
	CHECK(!exists(path));
	path_of(s, "ckpt-1000001", "rank-00000.img", path);
	CHECK(exists(path));
	/* ckpt-1000002 failed: its files go, ckpt-1000001 stays */
	CHECK_EQ(store_ckpt_retire(s, "ckpt-1000002"), 0);
	CHECK_EQ(store_ckpt_retire(s, "ckpt-1000003"), 0);      /* missing: fine */
	path_of(s, "ckpt-1000002", NULL, path);
	CHECK(!exists(path));
	path_of(s, "ckpt-1000001", "partner-00001.img", path);
	CHECK(exists(path));
	store_close(&s);
}

/* ---- interleavings: one thread held at a system call ----
 *
 * trap_run runs fn in a thread whose first call of system call nr waits
 * (seccomp user notification) while at runs here; then the call goes on.
 * The interleaving of two writers, or a writer and a reader, that a race
 * needs is so made every time. */
struct trap {
	long nr;
	long einval;                    /* a system call that fails with EINVAL there, or -1 */
	void (*fn)(void *);
	void *arg;
	int pipe[2];
};

static void *trap_thread(void *p)
{
	struct trap *t = p;
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)t->einval, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EINVAL),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)t->nr, 0, 3),
		/* not the write of the listener below (nr write) */
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)t->pipe[1], 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { sizeof(f) / sizeof(f[0]), f };
	int fd = -1;

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0)
		fd = (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
				  SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
	if (write(t->pipe[1], &fd, sizeof(fd)) != sizeof(fd) || fd < 0)
		return NULL;
	t->fn(t->arg);
	return NULL;
}

/* 1: at ran while fn's thread waited at nr; 0: fn never called it; -1:
 * no seccomp here. System call einval fails with EINVAL in that thread. */
static int trap_run_einval(long nr, long einval, void (*fn)(void *), void *arg,
			   void (*at)(void *), void *at_arg)
{
	struct trap t = { nr, einval, fn, arg, { -1, -1 } };
	struct seccomp_notif req;
	struct seccomp_notif_resp resp;
	struct pollfd pfd = { .events = POLLIN };
	pthread_t th;
	int ran = 0;

	if (pipe(t.pipe) || pthread_create(&th, NULL, trap_thread, &t))
		return -1;
	if (read(t.pipe[0], &pfd.fd, sizeof(pfd.fd)) != sizeof(pfd.fd))
		pfd.fd = -1;
	/* the first call waits for at, later ones go on at once; the
	 * thread's end hangs the listener up */
	while (pfd.fd >= 0 && poll(&pfd, 1, -1) == 1 && (pfd.revents & POLLIN)) {
		memset(&req, 0, sizeof(req));
		if (ioctl(pfd.fd, SECCOMP_IOCTL_NOTIF_RECV, &req) != 0)
			continue;       /* the caller went (a signal) */
		if (!ran)
			at(at_arg);
		ran = 1;
		resp = (struct seccomp_notif_resp){ .id = req.id,
						    .flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE };
		ioctl(pfd.fd, SECCOMP_IOCTL_NOTIF_SEND, &resp);
	}
	pthread_join(th, NULL);
	if (pfd.fd >= 0)
		close(pfd.fd);
	close(t.pipe[0]);
	close(t.pipe[1]);
	return pfd.fd < 0 ? -1 : ran;
}

static int trap_run(long nr, void (*fn)(void *), void *arg, void (*at)(void *), void *at_arg)
{
	return trap_run_einval(nr, -1, fn, arg, at, at_arg);
}

struct follow {
	struct store *s;
	struct store_ckpt *ck;
	struct store_file *f;
	struct store_io *io;
	uint64_t seen;
	int ret;
};

static void follow_create(void *p)
{
	struct follow *w = p;

	w->ret = store_file_create(w->ck, "rank-0.img", &w->f);
}

/* a reader opens the *.tmp as soon as it is there: what it sees written */
static void follow_look(void *p)
{
	struct follow *w = p;
	struct store_io *io = NULL;

	w->seen = UINT64_MAX;
	if (store_io_open_writing(w->s, store_ckpt_name(w->ck), "rank-0.img", &io) == 0)
		w->seen = store_io_size(io);
	store_io_close(&io);
}

static void follow_size(void *p)
{
	struct follow *w = p;

	w->seen = store_io_size(w->io);
}

static void follow_commit(void *p)
{
	struct follow *w = p;

	w->ret = store_file_commit(w->f);
}

/* A file written over a spare, followed by a reader (the partner stream,
 * the node agent's global copy), shows the reader only what its writer
 * wrote: right after the spare is renamed into place, before the writer
 * marks it (the spare is marked empty when it becomes one), and while the
 * commit cuts it and removes the mark (the reader takes the mark before
 * the length). Each interleaving is made (trap_run). */
static void test_retire_follow(void)
{
	struct store *s = open_job("retire-follow");
	size_t sizes[] = { 90000 };
	char a[64], buf[3333];
	struct follow w = { .s = s };
	int r;

	store_set_recycle(s, 8);
	CHECK_EQ(make_images(s, sizes, 1, a), 0);
	CHECK_EQ(store_file_retire(s, a, "rank-0.img"), 0);
	CHECK_EQ(store_ckpt_begin(s, &w.ck), 0);
	/* the writer held where it marks the spare it took */
	r = trap_run(SYS_fsetxattr, follow_create, &w, follow_look, &w);
	if (r < 0) {
		fprintf(stderr, "test_retire_follow: no seccomp user notification here: skipped\n");
		goto out;
	}
	CHECK_EQ(r, 1);
	CHECK_EQ(w.ret, 0);
	CHECK_EQ(w.seen, 0);            /* not the spare's 90000 bytes */
	fill(buf, sizeof(buf), 4);
	CHECK(w.f && store_file_write(w.f, buf, sizeof(buf)) == 0);
	CHECK_EQ(store_io_open_writing(s, store_ckpt_name(w.ck), "rank-0.img", &w.io), 0);
	CHECK(w.io && store_io_size(w.io) <= sizeof(buf));       /* staged, maybe */
	/* the reader held between the mark and the length while the
	 * writer commits */
	w.seen = 0;
	CHECK_EQ(trap_run(SYS_fgetxattr, follow_size, &w, follow_commit, &w), 1);
	CHECK_EQ(w.ret, 0);
	CHECK_EQ(w.seen, sizeof(buf));  /* not the spare's length */
	CHECK(w.io && store_io_size(w.io) == sizeof(buf));
out:
	store_io_close(&w.io);
	store_file_free(&w.f);
	store_ckpt_free(&w.ck);
	store_close(&s);
}

struct taking {
	struct store_ckpt *ck;
	struct store_file *f, *g;
	int ret, ret2;
};

static void take_zero(void *p)
{
	struct taking *k = p;

	k->ret = store_file_create(k->ck, "rank-0.img", &k->f);
}

static void take_one(void *p)
{
	struct taking *k = p;

	k->ret2 = store_file_create(k->ck, "rank-1.img", &k->g);
}

/* Where the file system cannot rename without replacing (NFS: the tier
 * links the new name, then unlinks the old), two processes taking the
 * same spare both link it: the one whose unlink comes second drops its
 * link and takes another spare or a new file, never the same pages as
 * the other (nor fails on its own *.tmp left there). */
static void test_take_by_link(void)
{
	struct store *s = open_job("take-by-link");
	size_t sizes[] = { 90000 };
	char a[64], p0[PATH_MAX], p1[PATH_MAX], spare[PATH_MAX];
	struct taking k = { 0 };
	ino_t i0;
	int r;

	store_set_recycle(s, 8);
	CHECK_EQ(make_images(s, sizes, 1, a), 0);
	CHECK_EQ(store_file_retire(s, a, "rank-0.img"), 0);
	snprintf(spare, sizeof(spare), "%s/.spare/%s-rank-0.img", store_job_dir(s), a);
	i0 = inode_of(spare);
	CHECK_EQ(store_ckpt_begin(s, &k.ck), 0);
	/* rank-0's writer, renaming by link, held before its unlink of the
	 * spare's name; rank-1's takes the spare meanwhile */
	r = trap_run_einval(SYS_unlink, SYS_renameat2, take_zero, &k, take_one, &k);
	if (r < 0) {
		fprintf(stderr, "test_take_by_link: no seccomp user notification here: skipped\n");
		goto out;
	}
	CHECK_EQ(r, 1);
	CHECK_EQ(k.ret2, 0);
	CHECK_EQ(k.ret, 0);
	path_of(s, store_ckpt_name(k.ck), "rank-0.img", p0);
	path_of(s, store_ckpt_name(k.ck), "rank-1.img", p1);
	strcat(p0, ".tmp");
	strcat(p1, ".tmp");
	CHECK(inode_of(p1) == i0);
	CHECK(inode_of(p0) && inode_of(p0) != i0);
out:
	store_file_free(&k.f);
	store_file_free(&k.g);
	store_ckpt_free(&k.ck);
	store_close(&s);
}

struct reserving {
	struct store *s;
	struct store_ckpt *ck;
	int ret, put;
};

static void reserve_one(void *p)
{
	struct reserving *v = p;

	v->ret = store_spare_reserve(v->s, "partner-1.img", 1u << 20);
}

static void reserve_meanwhile(void *p)
{
	struct reserving *v = p;

	v->put = put_file(v->ck, "partner-2.img", 5000, 6);
}

/* A reservation growing (its storage allocated) while a copy of the same
 * kind is written and committed: the copy is never written over it, or
 * the allocation would give the committed file the reservation's length */
static void test_reserve_racing(void)
{
	struct store *s = open_job("reserve-racing");
	struct reserving v = { .s = s };
	char path[PATH_MAX];
	struct stat st;

	store_set_recycle(s, 8);
	CHECK_EQ(store_spare_reserve(s, "partner-1.img", 4096), 0);
	CHECK_EQ(store_ckpt_begin(s, &v.ck), 0);
	/* the reservation held at its allocation */
	if (trap_run(SYS_fallocate, reserve_one, &v, reserve_meanwhile, &v) < 0) {
		fprintf(stderr, "test_reserve_racing: no seccomp user notification here: skipped\n");
		goto out;
	}
	CHECK_EQ(v.ret, 0);
	CHECK_EQ(v.put, 0);
	path_of(s, store_ckpt_name(v.ck), "partner-2.img", path);
	CHECK(stat(path, &st) == 0 && st.st_size == 5000);
	CHECK_EQ(store_ckpt_commit(v.ck, 1), 0);
	CHECK_EQ(store_verify(s, store_ckpt_name(v.ck)), 0);
	snprintf(path, sizeof(path), "%s/.spare/reserve-partner-1.img", store_job_dir(s));
	CHECK(stat(path, &st) == 0 && st.st_size == (1 << 20));
out:
	store_ckpt_free(&v.ck);
	store_close(&s);
}

/* ---- the node agent's compressed global copy beside a retirement ---- */

#define COPY_CHUNK (64u << 10)
#define COPY_BYTES (3 * COPY_CHUNK)

/* A plain image of one section, COPY_BYTES of fill(seed), as file name of
 * checkpoint ckpt (begun here) of s, committed */
static int put_image(struct store *s, const char *ckpt, const char *name, unsigned seed)
{
	struct img_writer_opts o = { .compress = "none", .chunk_size = COPY_CHUNK };
	struct img_writer *w = NULL;
	struct store_ckpt *c = NULL;
	struct store_file *f = NULL;
	char *data = malloc(COPY_BYTES);
	int ret = data ? store_ckpt_begin_named(s, ckpt, &c) : -ENOMEM;

	ret = ret ? ret : store_file_create(c, name, &f);
	ret = ret ? ret : img_writer_create(store_file_write, f, &o, &w);
	ret = ret ? ret : img_section_begin(w, "memory", "m");
	if (!ret)
		fill(data, COPY_BYTES, seed);
	ret = ret ? ret : img_write(w, data, COPY_BYTES);
	ret = ret ? ret : img_section_end(w);
	ret = ret ? ret : img_writer_finish(w, NULL);
	ret = ret ? ret : store_file_commit(f);
	img_writer_free(&w);
	store_file_free(&f);
	store_ckpt_free(&c);
	free(data);
	return ret;
}

struct copying {
	struct store *local, *global;
	char path[PATH_MAX];
	int ret, retired, put;
};

static void copy_compressed_image(void *p)
{
	struct copying *k = p;

	k->ret = node_copy_image(k->global, k->path, "ckpt-000001", "rank-00000.img", NULL);
}

/* the node's next checkpoint stands (cache_keep 1): the copied one's image
 * retired, the next image written, over its spare if it became one */
static void retire_meanwhile(void *p)
{
	struct copying *k = p;

	k->retired = store_file_retire(k->local, "ckpt-000001", "rank-00000.img");
	k->put = put_image(k->local, "ckpt-000002", "rank-00000.img", 2);
}

/* With stage_compress, img_recompress reads the image by its name: the
 * copy holds it read locked all along, so that a retirement during the
 * copy removes it instead of making it a spare the next image is written
 * over; the global copy has the image's own bytes (it had the next one's
 * when the copy held no lock). */
static void test_copy_compressed_held(void)
{
	struct copying k = { .local = open_job("copy-held"), .global = open_job("copy-held-global") };
	struct store_ckpt *c = NULL;
	struct img_reader *r = NULL;
	struct store_io *io = NULL;
	char *want = malloc(COPY_BYTES);
	void *got = NULL;
	size_t len = 0;
	int ret;

	store_set_recycle(k.local, 8);
	CHECK_EQ(cfg_set("stage_compress", "zstd"), 0);
	/* the copy writes as it goes, not from a stage at its end */
	CHECK_EQ(cfg_set("direct_io", "off"), 0);
	CHECK_EQ(put_image(k.local, "ckpt-000001", "rank-00000.img", 1), 0);
	path_of(k.local, "ckpt-000001", "rank-00000.img", k.path);
	CHECK_EQ(store_ckpt_begin_named(k.global, "ckpt-000001", &c), 0);
	CHECK(c && put_file(c, "note.json", 100, 9) == 0 && store_ckpt_commit(c, 1) == 0);
	/* the copy held at its first write, once the image is open: its
	 * header, before its chunks are read */
	ret = trap_run(SYS_write, copy_compressed_image, &k, retire_meanwhile, &k);
	if (ret < 0) {
		fprintf(stderr, "test_copy_compressed_held: no seccomp user notification here: "
			"skipped\n");
		goto out;
	}
	CHECK_EQ(ret, 1);
	CHECK_EQ(k.retired, 0);
	CHECK_EQ(k.put, 0);
	CHECK_EQ(k.ret, 0);
	CHECK_EQ(store_io_open(k.global, "ckpt-000001", "rank-00000.img", &io), 0);
	CHECK(io && img_open(store_io_path(io), &r) == 0);
	CHECK(r && img_section_load(r, "m", COPY_BYTES, &got, &len) == 0);
	fill(want, COPY_BYTES, 1);
	CHECK(got && len == COPY_BYTES && memcmp(got, want, COPY_BYTES) == 0);
out:
	CHECK_EQ(cfg_set("stage_compress", "off"), 0);
	CHECK_EQ(cfg_set("direct_io", "on"), 0);
	img_close(&r);
	store_io_close(&io);
	free(got);
	free(want);
	store_ckpt_free(&c);
	store_close(&k.local);
	store_close(&k.global);
}

int main(void)
{
	log_set_level(LOG_ERROR);
	posix = store_tier_find("global");
	CHECK(posix != NULL && store_tier_find("local") != NULL);
	if (!posix)
		return check_result("test_store");
	make_root();
	test_names();
	test_name_order();
	test_round_trip();
	test_file_rules();
	test_annex();
	test_annex_early();
	test_recycle();
	test_retire();
	test_retire_writing();
	test_io_lock();
	test_cache_trim();
	test_retire_follow();
	test_reserve_racing();
	test_take_by_link();
	test_copy_compressed_held();
	test_commit_order();
	test_large_files();
	test_stage_write_fails();
	test_stage_tail_direct();
	test_write_direct();
	test_selection();
	test_commit_checks();
	test_verify();
	test_file_fd();
	test_verify_image();
	test_write_crc();
	test_ranks();
	test_node_records();
	test_concurrent_begin();
	test_begin_reads_on();
	test_faults_fail();
	test_faults_kill();
	test_damaged_index();
	test_prune();
	if (!check_failures)
		posix->remove_tree(root);
	else
		fprintf(stderr, "test files kept in %s\n", root);
	return check_result("test_store");
}

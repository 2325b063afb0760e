/* test_redundancy_engine.c - the redundancy engine without libstasis.
 *
 * Four member processes on two simulated nodes (A: ranks 0-1, B: ranks
 * 2-3), each holding its own image file in its node's tier, as a node agent
 * of a transparent job would. They bootstrap the engine's TCP link over a
 * communicator of the test's own (shared memory: the transport is a table
 * of operations, and this one stands for a coordinator's channel), then ask
 * for a level of the file set, lose node B's files, and get them back:
 *   partner, through the progress engine;   rs (2 groups of 2, 1 parity);
 *   global (taken from the global tier);    rs with more of a group lost
 *   than its parity covers: refused on the member that cannot be rebuilt;
 *   rs 2+2 on four nodes, its parity's rows encoded while the files are
 *   written (redun_stream_begin), and the same stream abandoned: no parity
 *   left behind; streamed again in two groups (rs 1+1) whose files differ
 *   by rows: the groups end their rows apart, the stream together;
 *   and the link sending a file to a member gone, which ends no sender.
 * Every recovered file is checked byte for byte against what its member
 * wrote, and the level record against the level asked for; the room
 * reserved for a partner copy or parity (redun_reserve) is what it is
 * written over.
 */
#include "redundancy/redundancy.h"
#include "common/config.h"
#include "common/err.h"
#include "image/image.h"
#include "store/store.h"

#include "check.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#define N 4
#define SLOT 4096

/* ---- a bootstrap communicator in shared memory (collectives only) ---- */

struct shm {
	pthread_barrier_t bar;
	char slot[N][SLOT];
	int abort;              /* the streamed checkpoint failed */
};

struct boot {
	struct shm *m;
	int rank;
};

static int b_rank(void *h)
{
	return ((struct boot *)h)->rank;
}

static int b_size(void *h)
{
	(void)h;
	return N;
}

static int b_barrier(void *h)
{
	pthread_barrier_wait(&((struct boot *)h)->m->bar);
	return 0;
}

static int b_allgather(void *h, const void *mine, size_t len, void *all)
{
	struct boot *b = h;

	if (len > SLOT)
		return -EINVAL;
	memcpy(b->m->slot[b->rank], mine, len);
	b_barrier(h);
	for (int r = 0; r < N; r++)
		memcpy((char *)all + (size_t)r * len, b->m->slot[r], len);
	b_barrier(h);
	return 0;
}

static int b_allreduce(void *h, int64_t *v, size_t n, enum redun_op op)
{
	int64_t all[N][SLOT / sizeof(int64_t)];
	int ret;

	if (n > SLOT / sizeof(int64_t))
		return -EINVAL;
	ret = b_allgather(h, v, n * sizeof(*v), all);
	for (size_t i = 0; !ret && i < n; i++)
		for (int r = 0; r < N; r++) {
			int64_t x = ((int64_t *)(void *)all)[(size_t)r * n + i];

			v[i] = r == 0 ? x : op == REDUN_SUM ? v[i] + x : op == REDUN_MIN ?
			       (x < v[i] ? x : v[i]) : (x > v[i] ? x : v[i]);
		}
	return ret;
}

static int b_bcast(void *h, void *buf, size_t len, int root)
{
	struct boot *b = h;

	if (len > SLOT)
		return -EINVAL;
	if (b->rank == root)
		memcpy(b->m->slot[root], buf, len);
	b_barrier(h);
	if (b->rank != root)
		memcpy(buf, b->m->slot[root], len);
	b_barrier(h);
	return 0;
}

static int b_send(void *h, const void *buf, size_t len, int peer)
{
	(void)h, (void)buf, (void)len, (void)peer;
	return -ENOSYS;         /* the link carries the data */
}

static int b_recv(void *h, void *buf, size_t len, int peer)
{
	(void)h, (void)buf, (void)len, (void)peer;
	return -ENOSYS;
}

static int b_sendrecv(void *h, const void *sbuf, size_t slen, int dest, void *rbuf, size_t rlen,
		      int src)
{
	(void)h, (void)sbuf, (void)slen, (void)dest, (void)rbuf, (void)rlen, (void)src;
	return -ENOSYS;
}

static void b_free(void *h)
{
	(void)h;
}

static const struct redun_comm_ops boot_ops = {
	.name = "test-shm", .rank = b_rank, .size = b_size, .barrier = b_barrier,
	.allreduce_i64 = b_allreduce, .bcast = b_bcast, .allgather = b_allgather,
	.send = b_send, .recv = b_recv, .sendrecv = b_sendrecv, .free = b_free,
};

/* ---- one member ---- */

static char root[PATH_MAX];
static const char *const nodes2[N] = { "A", "A", "B", "B" };
static const char *const nodes4[N] = { "A", "B", "C", "D" };
static const char *const *nodes = nodes2;
static int streamed;            /* this scenario streams: files of several rows */
static int *abandon;            /* streamed: set once a row went (the checkpoint fails) */
static int partnered;           /* streamed at partner (else rs) */
static int groups;              /* streamed rs in two groups, 12 MiB apart */

/* Member r's data: sizes differ, so rs pads. */
static size_t data_len(int r)
{
	return (streamed ? 5u << 20 : 300000) + (size_t)r * 12345 +
	       (groups && r >= 2 ? (size_t)12 << 20 : 0);
}

static void fill(int r, unsigned char *buf, size_t len)
{
	uint32_t x = 2463534242u + (uint32_t)r * 7919u;

	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		buf[i] = (unsigned char)x;
	}
}

/* Streamed: the first 4 MiB, then (once this member's parity began, a
 * row of every file went; or at partner, once its copy began on the other
 * node; *abandon set if asked) the rest. Returns whether the pause ended
 * so. */
static int write_paused(struct img_writer *w, const unsigned char *data, size_t len,
			struct store *local, const char *ckpt, int rank)
{
	char name[32], path[PATH_MAX], there[PATH_MAX + 64];
	size_t first = 4u << 20;
	int seen = 0;

	if (img_write(w, data, first) != 0)
		return -EIO;
	snprintf(name, sizeof(name), partnered ? REDUN_PARTNER_FILE ".tmp" : REDUN_RS_FILE ".tmp",
		 rank);
	if (store_ckpt_path(local, ckpt, name, path, sizeof(path)) != 0)
		return -EIO;
	/* partner: the same path in the other node's tier (A A B B: rank r's
	 * partner is r + 2) */
	snprintf(there, sizeof(there), "%s/%s%s", root, partnered ? nodes[(rank + 2) % N] : nodes[rank],
		 path + strlen(root) + 1 + strlen(nodes[rank]));
	for (int i = 0; i < 10000 && !seen; i++) {
		seen = access(there, F_OK) == 0;
		if (!seen)
			usleep(2000);
	}
	if (abandon)
		__atomic_store_n(abandon, 1, __ATOMIC_SEQ_CST);
	return img_write(w, data + first, len - first) ?: (seen ? 0 : -ETIMEDOUT);
}

static int write_image(struct store_ckpt *c, int rank, struct store *local, const char *ckpt)
{
	size_t len = data_len(rank);
	unsigned char *data = malloc(len);
	struct img_writer_opts opts;
	struct img_writer *w = NULL;
	struct store_file *f = NULL;
	char name[32], num[16];
	int ret = data ? 0 : -ENOMEM;

	snprintf(name, sizeof(name), REDUN_FILE, rank);
	snprintf(num, sizeof(num), "%d", rank);
	img_writer_opts_default(&opts);
	opts.threads = 0;
	opts.chunk_size = 64 << 10;     /* the file grows as it is written */
	if (data)
		fill(rank, data, len);
	ret = ret ? ret : store_file_create(c, name, &f);
	ret = ret ? ret : img_writer_create(store_file_write, f, &opts, &w);
	ret = ret ? ret : img_writer_meta(w, "rank", num);
	ret = ret ? ret : img_section_begin(w, "data", "data");
	if (streamed)
		ret = ret ? ret : write_paused(w, data, len, local, ckpt, rank);
	else
		ret = ret ? ret : img_write(w, data, len);
	ret = ret ? ret : img_section_end(w);
	ret = ret ? ret : img_writer_finish(w, NULL);
	ret = ret ? ret : store_file_commit(f);
	img_writer_free(&w);
	store_file_free(&f);
	free(data);
	return ret;
}

/* The checkpoint's record of file name (verify looked at it) */
static int partner_recorded(struct store *s, const char *ckpt, const char *name)
{
	struct store_file_info *files = NULL;
	size_t n = 0;
	int found = 0;

	if (store_ckpt_files(s, ckpt, &files, &n) == 0)
		for (size_t i = 0; i < n; i++)
			found |= !strcmp(files[i].name, name);
	free(files);
	return found;
}

struct accept_arg {
	int rank;
	int accepted;
};

/* What a node agent checks: the chunk CRCs, that the image is this rank's,
 * and here also the bytes. */
static int accept(void *arg, struct store *s, const char *ckpt, const char *name)
{
	struct accept_arg *a = arg;
	struct store_io *io = NULL;
	struct img_reader *r = NULL;
	size_t len = data_len(a->rank);
	unsigned char *want = malloc(len), *got = malloc(len + 1);
	char num[16];
	int ret = want && got ? 0 : -ENOMEM, idx;

	snprintf(num, sizeof(num), "%d", a->rank);
	ret = ret ? ret : store_io_open(s, ckpt, name, &io);
	ret = ret ? ret : img_open_fd(store_io_fd(io), store_io_path(io), &r);
	ret = ret ? ret : img_verify(r);
	if (!ret && (!strstr(img_manifest(r), "\"rank\"") ||
		     !strstr(img_manifest(r), num)))
		ret = err_set(-EBADMSG, "%s: not rank %d's image", name, a->rank);
	idx = ret ? -1 : img_section_find(r, "data");
	if (!ret && (idx < 0 || img_read(r, (unsigned)idx, 0, got, len) != (ssize_t)len))
		ret = err_set(-EIO, "%s: cannot read the data", name);
	if (!ret) {
		fill(a->rank, want, len);
		if (memcmp(want, got, len) != 0)
			ret = err_set(-EBADMSG, "%s: the bytes differ from what rank %d wrote", name,
				      a->rank);
	}
	a->accepted += ret == 0;
	img_close(&r);
	store_io_close(&io);
	free(want);
	free(got);
	return ret;
}

/* Node B is lost: every file of the checkpoint in its tier goes. */
static void lose_node_b(struct store *local, const char *ckpt, int rank)
{
	const char *const fmts[] = { REDUN_FILE, REDUN_PARTNER_FILE, REDUN_RS_FILE };
	char name[32], path[PATH_MAX];

	if (rank != 2)
		return;
	for (int q = 0; q < N; q++)
		for (size_t i = 0; i < sizeof(fmts) / sizeof(fmts[0]); i++) {
			snprintf(name, sizeof(name), fmts[i], q);
			if (store_ckpt_path(local, ckpt, name, path, sizeof(path)) == 0)
				unlink(path);
		}
}

struct upgrade_task {
	struct redun_task task;
	const struct redun_set *set;
	const struct redun_request *req;
	int *result;
};

static int task_run(struct redun_task *t, const struct redun_comm *c)
{
	struct upgrade_task *u = (struct upgrade_task *)t;

	*u->result = redun_upgrade(u->set, c, u->req);
	return *u->result;
}

static void task_free(struct redun_task *t)
{
	free(t);
}

enum scenario { PARTNER, RS, GLOBAL, RS_TOO_MANY, RS_STREAM, RS_STREAM_ABORT, PARTNER_STREAM,
		RS_STREAM_GROUPS, LINK_PEER_GONE };

static const char *const scenario_level[] = { "partner", "rs", "global", "rs", "rs", "rs",
					      "partner", "rs", "partner" };
static const char *const scenario_name[] = {
	"partner", "rs", "global", "rs (too many lost)", "rs (streamed)", "rs (stream abandoned)",
	"partner (streamed)", "rs (streamed, two groups of unequal files)",
	"link (a file sent to a member gone)",
};

/* The TCP link sending a file (sendfile) to a member that closed its end
 * after reading all it was sent, as a rank killed once the last piece of
 * its partner copy arrived does: the sender gets an error, and no
 * SIGPIPE ends it (an application's rank, whose disposition is its own),
 * nor stays pending; its signal mask is as it was. Ranks 2 and 3 only
 * help open the link. */
static int link_peer_gone(struct redun_comm *boot, int rank)
{
	struct redun_comm link = { NULL, NULL };
	sigset_t before, after, pending;
	char byte = 'x', path[PATH_MAX + 16];
	int fd, werr = 0, ret;

	check_failures = 0;
	CHECK_EQ(redun_link_open(boot, &link), 0);
	if (rank == 0)
		CHECK_EQ(link.ops->send(link.h, &byte, 1, 1), 0);
	if (rank == 1) {
		CHECK_EQ(link.ops->recv(link.h, &byte, 1, 0), 0);
		redun_comm_close(&link);        /* nothing left unread: a FIN, no reset */
	}
	b_barrier(boot->h);
	if (rank == 0) {
		snprintf(path, sizeof(path), "%s/gone-XXXXXX", root);
		fd = mkstemp(path);
		CHECK(fd >= 0 && ftruncate(fd, 64 << 20) == 0);   /* more than the socket holds */
		unlink(path);
		pthread_sigmask(SIG_SETMASK, NULL, &before);
		/* both ways, as a partner copy goes: the end of the stream
		 * received may be seen before the sendfile that fails */
		ret = link.ops->sendrecv_files(link.h, fd, 0, 64 << 20, 1, -1, 0, 1 << 20, 1, &werr);
		CHECK(ret == -EPIPE || ret == -ECONNRESET);
		CHECK_EQ(werr, 0);
		pthread_sigmask(SIG_SETMASK, NULL, &after);
		CHECK_EQ(sigismember(&after, SIGPIPE), sigismember(&before, SIGPIPE));
		sigpending(&pending);
		CHECK_EQ(sigismember(&pending, SIGPIPE), 0);
		close(fd);
	}
	redun_comm_close(&link);
	return check_failures;
}

/* A member's image written by a process of its own, as a rank writes
 * while its node agent streams: its pid */
static pid_t writer_start(struct store_ckpt *lc, int rank, struct store *local, const char *ckpt)
{
	pid_t pid = fork();

	if (pid == 0)
		_exit(write_image(lc, rank, local, ckpt) ? 1 : 0);
	return pid;
}

static int writer_wait(pid_t pid)
{
	int status = 0;

	return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
	       WEXITSTATUS(status) == 0 ? 0 : -1;
}

static int stream_abort(void *arg)
{
	struct shm *m = arg;

	return __atomic_load_n(&m->abort, __ATOMIC_SEQ_CST);
}

/* No parity of ckpt in this member's tier, not even a *.tmp */
static int no_parity_left(struct store *local, const char *ckpt)
{
	char dir[PATH_MAX];
	char *slash;
	struct dirent *e;
	DIR *d;
	int left = 0;

	if (store_ckpt_path(local, ckpt, "x", dir, sizeof(dir)) != 0)
		return 0;
	slash = strrchr(dir, '/');
	*slash = '\0';
	d = opendir(dir);
	while (d && (e = readdir(d)))
		if (!strncmp(e->d_name, "rs-", 3)) {
			fprintf(stderr, "left: %s/%s\n", dir, e->d_name);
			left++;
		}
	if (d)
		closedir(d);
	return d && !left;
}

/* rs's parity image of this member was streamed: it has rows */
static int parity_has_rows(struct store *local, const char *ckpt, int rank)
{
	struct store_io *io = NULL;
	struct img_reader *r = NULL;
	char name[32];
	int ret;

	snprintf(name, sizeof(name), REDUN_RS_FILE, rank);
	ret = store_io_open(local, ckpt, name, &io);
	ret = ret ? ret : img_open_fd(store_io_fd(io), store_io_path(io), &r);
	ret = ret ? ret : img_verify(r);
	ret = ret ? ret : img_section_find(r, "row") >= 0 ? 0 : -ENOENT;
	img_close(&r);
	store_io_close(&io);
	return ret == 0;
}

/* One scenario on one member; returns the number of failed checks. */
static int member(struct shm *m, int rank, enum scenario sc)
{
	struct boot b = { m, rank };
	struct redun_comm boot = { &boot_ops, &b }, link = { NULL, NULL };
	struct store *local = NULL, *global = NULL;
	struct store_ckpt *lc = NULL, *gc = NULL;
	struct redun_progress *progress = NULL;
	struct redun_found found;
	struct accept_arg a = { rank, 0 };
	char dir[PATH_MAX + 8], job[32], ckpt[64] = "", msg[REDUN_MSG_LEN];
	int64_t size, sizes[N];
	int leader, ret, bad, result = -1, have_own;
	const char *level_name = scenario_level[sc];
	struct redun_stream *stream = NULL;

	const int four = sc == RS_STREAM || sc == RS_STREAM_ABORT ||
			 sc == RS_STREAM_GROUPS;                        /* nodes A B C D */

	if (sc == LINK_PEER_GONE)
		return link_peer_gone(&boot, rank);
	streamed = four || sc == PARTNER_STREAM;
	partnered = sc == PARTNER_STREAM;
	groups = sc == RS_STREAM_GROUPS;
	nodes = four ? nodes4 : nodes2;
	leader = four || rank == 0 || rank == 2;
	check_failures = 0;
	if (streamed)   /* the file grows as written, not by 8 MiB stages */
		CHECK_EQ(cfg_set("direct_io", "off"), 0);
	snprintf(job, sizeof(job), "job-%d", (int)sc);
	snprintf(dir, sizeof(dir), "%s/%s", root, nodes[rank]);
	/* rank 0 and the node leaders create, the others open */
	for (int pass = 0; pass < 2; pass++) {
		if ((pass == 0) == (rank == 0))
			CHECK_EQ(store_open("global", root, job, &global), 0);
		if ((pass == 0) == leader)
			CHECK_EQ(store_open("local", dir, job, &local), 0);
		b_barrier(&b);
	}
	if (rank == 0 && store_ckpt_begin(global, &gc) == 0)
		snprintf(ckpt, sizeof(ckpt), "%s", store_ckpt_name(gc));
	b_bcast(&b, ckpt, sizeof(ckpt), 0);
	CHECK(ckpt[0] != '\0');
	CHECK_EQ(store_ckpt_begin_named(local, ckpt, &lc), 0);
	if (streamed) {
		/* the parity's rows encoded, or the copies sent, while the
		 * images are written */
		struct redun_set sset = { .ckpt = ckpt, .local = local, .nranks = N, .node = nodes,
					  .group_size = groups ? 2 : 4, .rs_parity = groups ? 1 : 2,
					  .producer = "test" };

		pid_t writer;

		abandon = sc == RS_STREAM_ABORT ? &m->abort : NULL;
		CHECK_EQ(redun_link_open(&boot, &link), 0);
		writer = writer_start(lc, rank, local, ckpt);
		CHECK_EQ(redun_stream_begin(redun_level_find(level_name), &sset, &link, stream_abort,
					    m, &stream), 0);
		CHECK_EQ(writer_wait(writer), 0);
		CHECK(stream != NULL);
		if (sc == RS_STREAM_ABORT) {
			/* the checkpoint failed: what the stream encoded goes */
			redun_stream_free(&stream);
			CHECK(no_parity_left(local, ckpt));
			goto out;
		}
	} else {
		CHECK_EQ(write_image(lc, rank, local, ckpt), 0);
	}
	b_barrier(&b);
	if (leader)
		CHECK_EQ(store_ckpt_commit(lc, four ? 1 : 2), 0);
	if (rank == 0) {
		struct store_file *f = NULL;

		/* established in the global tier, as libstasis's checkpoint.json does */
		CHECK_EQ(store_file_create(gc, "info", &f), 0);
		CHECK_EQ(store_file_write(f, "{}", 2), 0);
		CHECK_EQ(store_file_commit(f), 0);
		store_file_free(&f);
		CHECK_EQ(store_ckpt_commit(gc, 1), 0);
	}
	{
		char name[32];
		struct store_io *io = NULL;

		snprintf(name, sizeof(name), REDUN_FILE, rank);
		CHECK_EQ(store_io_open(local, ckpt, name, &io), 0);
		size = io ? (int64_t)store_io_size(io) : -1;
		store_io_close(&io);
	}
	b_allgather(&b, &size, sizeof(size), sizes);

	ret = link.ops ? 0 : redun_link_open(&boot, &link);
	CHECK_EQ(ret, 0);
	if (ret)
		return check_failures;
	{
		struct redun_set set = {
			.ckpt = ckpt, .local = local, .global = global, .nranks = N, .node = nodes,
			.size = sizes, .group_size = groups ? 2 : 4,
			.rs_parity = streamed && !groups ? 2 : 1, .producer = "test",
			.stream = stream,
		};
		struct redun_request req = { .level = redun_level_find(level_name) };
		struct store_ckpt_info *list = NULL;
		char *reserved_spare = NULL;
		size_t count = 0;

		CHECK(req.level != NULL);
		if (sc == PARTNER || sc == RS) {
			/* room for the copy or parity this member will hold, taken
			 * now; the upgrade writes over it */
			char spare[PATH_MAX + 64];
			const int held = sc == PARTNER ? (rank + 2) % N : rank;

			store_set_recycle(local, 16);
			CHECK_EQ(redun_reserve(&set, req.level, rank, (uint64_t)size), 0);
			snprintf(spare, sizeof(spare), "%s/.spare/reserve-%s-%05d.img",
				 store_job_dir(local), sc == PARTNER ? "partner" : "rs", held);
			CHECK(access(spare, F_OK) == 0);
			reserved_spare = strdup(spare);
		}
		if (sc == PARTNER) {
			/* through the progress engine, as libstasis's upgrades run */
			struct upgrade_task *t = calloc(1, sizeof(*t));

			CHECK_EQ(redun_progress_start(&link, 1, &progress), 0);
			t->task.run = task_run;
			t->task.free = task_free;
			t->set = &set;
			t->req = &req;
			t->result = &result;
			redun_progress_queue(progress, &t->task);
			CHECK_EQ(redun_progress_wait(progress, 0, 1), 0);
			CHECK_EQ(result, 0);
			/* it closes the link it took over: recovery opens another */
			redun_progress_stop(&progress);
			CHECK_EQ(redun_link_open(&boot, &link), 0);
		} else {
			CHECK_EQ(redun_upgrade(&set, &link, &req), 0);
		}
		redun_stream_free(&stream);
		if (four)       /* the rows went on after the seal */
			CHECK(parity_has_rows(local, ckpt, rank));
		if (sc == PARTNER || sc == PARTNER_STREAM) {
			char name[32];

			/* spliced into its file, the copy this member keeps took
			 * its source's CRC in its record: the bytes are what it
			 * vouches for (every copy is committed: the upgrade
			 * ended in an agreement) */
			snprintf(name, sizeof(name), REDUN_PARTNER_FILE, (rank + 2) % N);
			CHECK(partner_recorded(local, ckpt, name));
			CHECK_EQ(store_verify(local, ckpt), 0);
		}
		b_barrier(&b);
		if (reserved_spare)     /* taken by the copy or the parity */
			CHECK(access(reserved_spare, F_OK) != 0);
		free(reserved_spare);
		if (rank == 0) {
			CHECK_EQ(store_list(global, &list, &count, NULL), 0);
			CHECK(count == 1 && strcmp(list[0].level, level_name) == 0);
			free(list);
		}
		if ((sc == PARTNER || sc == PARTNER_STREAM) && rank >= 2) {
			char name[32];

			/* the copies are on the other node */
			snprintf(name, sizeof(name), REDUN_PARTNER_FILE, rank - 2);
			CHECK(store_io_exists(local, ckpt, name));
		}
		b_barrier(&b);  /* every check of node b's files done before it goes */
		lose_node_b(local, ckpt, rank);
		if (sc == RS_TOO_MANY && rank == 0) {
			char path[PATH_MAX];

			store_ckpt_path(local, ckpt, "rank-00000.img", path, sizeof(path));
			unlink(path);
		}
		b_barrier(&b);
		{
			char name[32];

			snprintf(name, sizeof(name), REDUN_FILE, rank);
			have_own = store_io_exists(local, ckpt, name) && accept(&a, local, ckpt, name) == 0;
		}
		CHECK_EQ(have_own, four ? rank != 2 : rank < 2 && !(sc == RS_TOO_MANY && rank == 0));
		ret = redun_recover(req.level, &set, &link, have_own, 0, accept, &a, &found);
		bad = redun_agree(&boot, ret == 0, msg);
		if (sc == RS_TOO_MANY) {
			/* group {0, 2} lost both data files and rank 2's parity:
			 * rank 2's data survives as rank 0's parity (rs 1+1 is a
			 * copy), rank 0's was only in rank 2's parity */
			CHECK_EQ(bad, 0);
			CHECK(rank == 0 ? ret != 0 : ret == 0);
			if (rank == 0)
				CHECK(strstr(msg, "missing") != NULL);
		} else {
			CHECK_EQ(bad, N);
			CHECK_EQ(ret, 0);
			CHECK_EQ(a.accepted, 1);
			if (four ? rank == 2 : rank >= 2)
				CHECK(found.name[0] != '\0');
		}
		if (ret && sc != RS_TOO_MANY)
			fprintf(stderr, "rank %d: %s\n", rank, err_msg());
		redun_found_drop(&found);
	}
out:
	redun_comm_close(&link);
	store_ckpt_free(&lc);
	store_ckpt_free(&gc);
	store_close(&local);
	store_close(&global);
	return check_failures;
}

static int run(enum scenario sc)
{
	struct shm *m = mmap(NULL, sizeof(*m), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
			     -1, 0);
	pthread_barrierattr_t attr;
	pid_t pid[N];
	int failed = 0;

	if (m == MAP_FAILED)
		return 1;
	pthread_barrierattr_init(&attr);
	pthread_barrierattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
	pthread_barrier_init(&m->bar, &attr, N);
	for (int r = 0; r < N; r++) {
		pid[r] = fork();
		if (pid[r] == 0)
			_exit(member(m, r, sc) ? 1 : 0);
	}
	for (int r = 0; r < N; r++) {
		int status = 0;

		if (pid[r] < 0 || waitpid(pid[r], &status, 0) != pid[r] || !WIFEXITED(status) ||
		    WEXITSTATUS(status) != 0) {
			if (WIFSIGNALED(status))
				fprintf(stderr, "%s: rank %d killed by signal %d\n", scenario_name[sc], r,
					WTERMSIG(status));
			else
				fprintf(stderr, "%s: rank %d failed\n", scenario_name[sc], r);
			failed = 1;
		}
	}
	pthread_barrier_destroy(&m->bar);
	munmap(m, sizeof(*m));
	return failed;
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");
	int failed = 0;

	snprintf(root, sizeof(root), "%s/stasis-engine-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(root)) {
		perror("mkdtemp");
		return 1;
	}
	for (int sc = PARTNER; sc <= LINK_PEER_GONE; sc++) {
		int f = run((enum scenario)sc);

		printf("%s: %s\n", scenario_name[sc], f ? "FAIL" : "ok");
		failed += f;
	}
	if (!failed) {
		char cmd[PATH_MAX + 16];

		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
		if (system(cmd) != 0)
			fprintf(stderr, "cannot remove %s\n", root);
	}
	check_failures = failed;
	return check_result("redundancy_engine");
}

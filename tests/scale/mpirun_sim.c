/* mpirun_sim.c - the scale harness's launcher (docs/scale.md): many
 * simulated nodes and ranks of an MPI job, driving the production
 * coordinator and node agents over their real sockets.
 *
 *   stasis run --dir D -- mpirun.sim --nodes N --ppn P PROGRAM
 *
 * Its name makes `stasis run` treat it as an MPI launcher (job.h); PROGRAM
 * is any executable (the coordinator wants one among a launcher's
 * operands; it is recorded in the launch record, never run). It starts
 * one real node agent (STASIS_LH_DIR/stasis-node) per simulated node,
 * each in a UTS namespace of its own whose host name is the node's
 * (sim00000, sim00001, ...), detached as a rank would start it, then
 * forks workers that each serve up to RANKS_PER_WORKER ranks in one
 * epoll loop. A simulated rank speaks the rank side of docs/coordinator.md
 * "Rank and agent" on a Unix socket to its node's agent: RANK, parked at
 * once on a CHECKPOINT posted on its node's board (node_park.c, as a lower
 * half: its slot written, itself counted, the last of the node ringing
 * the agent's bell; the ranks of a node in one worker share the board's
 * mapping and its bell's wake-up, where a real node wakes each rank's
 * thread), PARKED on a CHECKPOINT line, on WRITE a real (tiny) image rank-NNNNN.img
 * (one made by image/ a checkpoint, linked under each rank's name;
 * SCALE_WRITE=store: each made and committed through image/ and
 * store/ like a lower half's), then DONE naming it (its node agent
 * records the node's images at once); BYE after EXIT. At restart
 * (STASIS_RESTORE_DIR) every rank registers with restarts 1 after finding
 * its image in the checkpoint.
 *
 * Harness variables (none reaches the coordinator or the agents):
 *   SCALE_DIR         the node agents' TMPDIR (their sockets) [/tmp]; its
 *                     file "agents" gets a line "<host> <pid>" per agent
 *   SCALE_STATS       a file each worker appends one JSON line to per
 *                     event (registered, checkpoint), with CLOCK_MONOTONIC
 *                     times in microseconds
 *   SCALE_AGENTS_AT_ONCE  node agents started at the same time [16]
 *   SCALE_WRITE       "store": each rank's image made and committed
 *                     through image/ and store/ as a lower half does (about
 *                     100 us of CPU a rank); by default one image a
 *                     checkpoint, linked by each rank ("batch": see
 *                     write_batch)
 *   SCALE_JOIN        "worker" (with SCALE_WRITE=store): each worker joins
 *                     a checkpoint once for all its ranks' images
 *                     (store_ckpt_join reads the whole index); by default
 *                     each rank joins, as a lower half
 *   SCALE_RECORD      "rank" (implies SCALE_WRITE=store): each rank appends
 *                     its image's FILE record to the index itself
 *                     (store_file_commit); by default it commits the image
 *                     without it and its DONE names the file, its size and
 *                     CRC, for its node agent to record with the node's
 *                     others (one FILES record a node)
 *   SCALE_FAIL_RANK   this rank closes its connection without a word when
 *   SCALE_FAIL_CKPT   the SCALE_FAIL_CKPT-th CHECKPOINT reaches it (a rank
 *                     killed during a checkpoint)
 *   SCALE_BAD_DONE_RANK  this rank sends SCALE_BAD_DONE_LINE instead of its
 *   SCALE_BAD_DONE_LINE  DONE line in the first checkpoint (batch writes)
 *   SCALE_PARK_FAIL_RANK this rank cannot park in the first checkpoint: it
 *                     answers as a lower half whose threads did not stop
 *                     (counted on the board, FAILED on its socket)
 */
#include "common/crc32c.h"
#include "common/err.h"
#include "image/image.h"
#include "node/node.h"
#include "node/node_park.h"
#include "store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RANKS_PER_WORKER 16384    /* descriptors: the hard limit may be 20000 */
#define AGENTS_AT_ONCE 16         /* node agents starting at the same time
				     (SCALE_AGENTS_AT_ONCE: another number) */
#define READY_TIMEOUT_MS 60000
#define PROTOCOL NODE_RANK_PROTOCOL_VERSION

struct rank {
	int fd, rank, node;
	unsigned ckpts;           /* CHECKPOINTs seen */
	int slot;                 /* on its node's board, or -1: told by lines */
	uint32_t seen;            /* the board's last generation for it */
	size_t len;
	char in[128];
};

/* A node's board (node_park.h), shared by the worker's ranks of the node */
struct board {
	struct node_park *p;
	int ranks_bell, agent_bell;
	struct rank *ranks;       /* the worker's ranks of the node */
	int n;
};

static struct {
	int nodes, ppn, size, restarts;
	const char *job, *run, *tmp, *stats, *restore;
	char secret[33];
	int fail_rank, join_each, record_each, write_store, bad_done_rank, park_fail_rank;
	unsigned fail_ckpt;
	const char *bad_done_line;
} S = { .fail_rank = -1, .bad_done_rank = -1, .park_fail_rank = -1 };

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "mpirun.sim: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

static void stat_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void stat_line(const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	int fd, n;

	if (!S.stats)
		return;
	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
	va_end(ap);
	buf[n++] = '\n';
	fd = open(S.stats, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0 || write(fd, buf, (size_t)n) != n)
		fprintf(stderr, "mpirun.sim: cannot write %s: %s\n", S.stats, strerror(errno));
	if (fd >= 0)
		close(fd);
}

static void host_of(int node, char *out, size_t len)
{
	snprintf(out, len, "sim%05d", node);
}

/* node.h's node_sock_path as the agent on host computes it (TMPDIR=S.tmp) */
static void sock_of(int node, char *out, size_t len)
{
	char host[16];

	host_of(node, host, sizeof(host));
	snprintf(out, len, "%s/stasis-node.%u/%.40s.%.16s.%.40s.sock", S.tmp, (unsigned)getuid(),
		 S.job, S.run, host);
}

/* ---- the node agents ---- */

/* Start node's agent as a rank would: detached (double fork, setsid), no
 * inherited descriptor but the ready pipe, stdout and stderr to
 * <socket>.log; here in a UTS namespace named after the node. Returns the
 * read end of its ready pipe. */
static int agent_start(int node, const char *prog)
{
	char host[16], log[PATH_MAX + 8], fdv[16];
	int p[2];
	pid_t pid;

	if (pipe2(p, O_CLOEXEC) != 0)
		die("pipe: %s", strerror(errno));
	pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		int fd;

		host_of(node, host, sizeof(host));
		if (unshare(CLONE_NEWUTS) != 0 || sethostname(host, strlen(host)) != 0) {
			fprintf(stderr, "mpirun.sim: a UTS namespace for %s: %s (needs root)\n", host,
				strerror(errno));
			_exit(1);
		}
		setsid();
		pid = fork();
		if (pid != 0) {
			/* the agent's pid first, then (from it) the ready byte */
			dprintf(p[1], "%d\n", (int)pid);
			_exit(0);
		}
		sock_of(node, log, sizeof(log));
		strcat(log, ".log");
		fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
			close(fd);
		}
		fd = open("/dev/null", O_RDONLY);
		if (fd >= 0 && fd != 0) {
			dup2(fd, 0);
			close(fd);
		}
		fcntl(p[1], F_SETFD, 0);
		snprintf(fdv, sizeof(fdv), "%d", p[1]);
		setenv("STASIS_NODE_READY_FD", fdv, 1);
		setenv("TMPDIR", S.tmp, 1);
		unsetenv("LD_PRELOAD");
		execl(prog, "stasis-node", (char *)NULL);
		fprintf(stderr, "mpirun.sim: cannot execute %s: %s\n", prog, strerror(errno));
		_exit(127);
	}
	close(p[1]);
	waitpid(pid, NULL, 0);
	return p[0];
}

/* The agent's "<pid>\n" then its ready "1" on fd; 0, or -1 with why */
static int agent_ready(int fd, int node, int *pid, char *why, size_t len)
{
	struct pollfd p = { fd, POLLIN, 0 };
	uint64_t t0 = now_us();
	char b[32], sock[PATH_MAX], log[256] = "";
	ssize_t got = 0, r = 0;
	FILE *f;

	while (got < (ssize_t)sizeof(b) - 1 && !(got && b[got - 1] == '1') &&
	       poll(&p, 1, READY_TIMEOUT_MS) > 0 &&
	       (r = read(fd, b + got, sizeof(b) - 1 - (size_t)got)) > 0)
		got += r;
	b[got] = 0;
	close(fd);
	*pid = atoi(b);
	if (got && b[got - 1] == '1' && strchr(b, '\n'))
		return 0;
	sock_of(node, sock, sizeof(sock));
	strcat(sock, ".log");
	if ((f = fopen(sock, "re"))) {
		log[fread(log, 1, sizeof(log) - 1, f)] = 0;
		fclose(f);
	}
	for (char *c = log; *c; c++)
		if (*c == '\n' || *c == '"')
			*c = ' ';
	snprintf(why, len, "the node agent of sim%05d (pid %d) did not start: %s after %llu ms, "
		 "the process %s; its log: %s", node, *pid, r == 0 ? "its pipe closed" : "no word",
		 (unsigned long long)(now_us() - t0) / 1000,
		 *pid > 0 && kill(*pid, 0) == 0 ? "runs" : "is gone", log);
	return -1;
}

static void agents_start(void)
{
	const char *lh = getenv("STASIS_LH_DIR");
	char prog[PATH_MAX], dir[PATH_MAX], why[600];
	uint64_t t0 = now_us();
	unsigned retries = 0;
	const char *env = getenv("SCALE_AGENTS_AT_ONCE");
	int at_once = env && atoi(env) > 0 ? atoi(env) : AGENTS_AT_ONCE;
	FILE *pids;

	if (!lh)
		die("STASIS_LH_DIR is not set: run me under `stasis run`");
	snprintf(prog, sizeof(prog), "%s/stasis-node", lh);
	snprintf(dir, sizeof(dir), "%s/stasis-node.%u", S.tmp, (unsigned)getuid());
	mkdir(S.tmp, 0755);
	mkdir(dir, 0700);
	snprintf(dir, sizeof(dir), "%s/agents", S.tmp);
	pids = fopen(dir, "we");
	for (int first = 0; first < S.nodes; first += at_once) {
		int fds[at_once], n = 0, pid;

		for (int k = first; k < S.nodes && n < at_once; k++)
			fds[n++] = agent_start(k, prog);
		for (int i = 0; i < n; i++) {
			if (agent_ready(fds[i], first + i, &pid, why, sizeof(why)) != 0) {
				/* once more, and said in the stats: the benchmark reports it */
				stat_line("{\"event\":\"agent_retry\",\"why\":\"%.400s\"}", why);
				fprintf(stderr, "mpirun.sim: %s; starting it again\n", why);
				retries++;
				if (agent_ready(agent_start(first + i, prog), first + i, &pid, why,
						sizeof(why)) != 0)
					die("%s", why);
			}
			if (pids)
				fprintf(pids, "sim%05d %d\n", first + i, pid);
		}
	}
	if (pids)
		fclose(pids);
	stat_line("{\"event\":\"agents\",\"nodes\":%d,\"retries\":%u,\"start_us\":%llu,"
		  "\"ready_us\":%llu}", S.nodes, retries, (unsigned long long)t0,
		  (unsigned long long)now_us());
}

/* ---- a worker's ranks ---- */

static struct store *store;
static struct store_ckpt *joined;

/* The rank's image of checkpoint name, as a lower half writes it (a tiny
 * one: meta data, no section); its record in *rec unless SCALE_RECORD=rank */
static int write_image(const struct rank *r, const char *name, struct store_file_record *rec)
{
	struct img_writer_opts opts;
	struct img_writer *w = NULL;
	struct store_file *f = NULL;
	char file[32], num[16];
	int ret = 0;

	/* a lower half joins the checkpoint once per rank (lh_agent.c);
	 * SCALE_JOIN=worker: once per worker */
	if (joined && (S.join_each || strcmp(store_ckpt_name(joined), name) != 0))
		store_ckpt_free(&joined);
	if (!joined)
		ret = store_ckpt_join_begun(store, name, &joined);
	snprintf(file, sizeof(file), "rank-%05d.img", r->rank);
	img_writer_opts_default(&opts);
	opts.threads = 0;
	ret = ret ? ret : store_file_create(joined, file, &f);
	ret = ret ? ret : img_writer_create(store_file_write, f, &opts, &w);
	ret = ret ? ret : img_writer_meta(w, "producer", "stasis scale simulation");
	ret = ret ? ret : img_writer_meta(w, "job", S.job);
	snprintf(num, sizeof(num), "%d", r->rank);
	ret = ret ? ret : img_writer_meta(w, "rank", num);
	snprintf(num, sizeof(num), "%d", S.size);
	ret = ret ? ret : img_writer_meta(w, "size", num);
	ret = ret ? ret : img_writer_finish(w, NULL);
	if (S.record_each)
		ret = ret ? ret : store_file_commit(f);
	else
		ret = ret ? ret : store_file_commit_unrecorded(f, rec);
	img_writer_free(&w);
	store_file_free(&f);
	return ret;
}

static int say(struct rank *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int say(struct rank *r, const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
	va_end(ap);
	buf[n++] = '\n';
	return send(r->fd, buf, (size_t)n, MSG_NOSIGNAL) == n ? 0 : -EPIPE;
}

/* ---- SCALE_WRITE=batch (the default): the images of a wake-up at once ----
 *
 * What a lower half pays to commit its image (image/ building it, store/'s
 * create, write, fsync, rename and directory fsync through whole paths:
 * about 100 us of CPU and 15 system calls) is its own node's work, done on
 * every node at once; here 65,536 of them would share 2 cores with the
 * coordinator and the agents being measured. So a worker builds one image
 * a checkpoint through image/, writes it once into SCALE_DIR, and links it
 * under each rank's final name through the checkpoint's directory (where
 * the store's file system takes no such link: a copy with one write,
 * openat, write, fsync, close); the agent's check of the file in place and
 * the seal see what they would see of a lower half's. One directory fsync
 * for the ranks of a wake-up, then their DONE lines. */

static struct {
	char name[64];       /* the checkpoint of the image below */
	int dirfd;           /* its directory */
	char *bytes;
	size_t len, cap;
	uint32_t crc;
	char file[PATH_MAX];  /* the image as a file in SCALE_DIR, linked ... */
	int link;             /* ... while the store's file system takes links */
} T = { .dirfd = -1, .link = 1 };

static struct rank **writes;   /* the ranks told WRITE in this wake-up */
static unsigned nwrites;

static int mem_sink(void *ctx, const void *buf, size_t len)
{
	(void)ctx;
	if (T.len + len > T.cap) {
		size_t cap = (T.len + len) * 2;
		char *b = realloc(T.bytes, cap);

		if (!b)
			return -ENOMEM;
		T.bytes = b;
		T.cap = cap;
	}
	memcpy(T.bytes + T.len, buf, len);
	T.len += len;
	return 0;
}

/* The image of checkpoint name and its directory, made once a checkpoint */
static int template_file(void);

static int template_for(const char *name)
{
	struct img_writer_opts opts;
	struct img_writer *w = NULL;
	struct store_ckpt *ck = NULL;
	char path[PATH_MAX], num[16];
	int ret;

	if (T.dirfd >= 0 && !strcmp(T.name, name))
		return 0;
	if (T.dirfd >= 0)
		close(T.dirfd);
	T.dirfd = -1;
	T.len = 0;
	ret = store_ckpt_join_begun(store, name, &ck);
	store_ckpt_free(&ck);
	if (ret)
		return ret;
	snprintf(path, sizeof(path), "%s/%s", store_job_dir(store), name);
	T.dirfd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (T.dirfd < 0)
		return err_set(-errno, "%s: %s", path, strerror(errno));
	img_writer_opts_default(&opts);
	opts.threads = 0;
	ret = img_writer_create(mem_sink, NULL, &opts, &w);
	ret = ret ? ret : img_writer_meta(w, "producer", "stasis scale simulation");
	ret = ret ? ret : img_writer_meta(w, "job", S.job);
	snprintf(num, sizeof(num), "%d", S.size);
	ret = ret ? ret : img_writer_meta(w, "size", num);
	ret = ret ? ret : img_writer_finish(w, NULL);
	img_writer_free(&w);
	if (ret) {
		close(T.dirfd);
		T.dirfd = -1;
		return ret;
	}
	T.crc = crc32c(0, T.bytes, T.len);
	snprintf(T.name, sizeof(T.name), "%s", name);
	if (T.link && template_file() != 0)
		T.link = 0;
	return 0;
}

/* The image in T.file, for the ranks to link (SCALE_DIR: the harness's) */
static int template_file(void)
{
	int fd, ret = 0;

	snprintf(T.file, sizeof(T.file), "%s/image.%d", S.tmp, (int)getpid());
	unlink(T.file);
	fd = open(T.file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	if (write(fd, T.bytes, T.len) != (ssize_t)T.len || fsync(fd) != 0)
		ret = -EIO;
	close(fd);
	return ret;
}

static int write_copy(const struct rank *r)
{
	char file[32];
	int fd, ret = 0;

	snprintf(file, sizeof(file), "rank-%05d.img", r->rank);
	if (T.link) {
		/* a name for the one image: no inode, page or descriptor a rank */
		if (linkat(AT_FDCWD, T.file, T.dirfd, file, 0) == 0)
			return 0;
		if (errno != EXDEV && errno != EMLINK && errno != EPERM && errno != EOPNOTSUPP)
			return err_set(-errno, "%s/%s: %s", T.name, file, strerror(errno));
		T.link = 0;   /* another file system, or one without links: copies */
	}
	fd = openat(T.dirfd, file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0)
		return err_set(-errno, "%s/%s: %s", T.name, file, strerror(errno));
	if (write(fd, T.bytes, T.len) != (ssize_t)T.len || fsync(fd) != 0)
		ret = err_set(-EIO, "%s/%s: cannot write", T.name, file);
	close(fd);
	return ret;
}

/* What a worker saw of the checkpoint under way */
static struct {
	char name[64];
	unsigned got, parked, done, failed, verdicts;
	uint64_t first_us, parked_us, done_us, verdict_us;
	char verdict[32];
} C;

static void ckpt_report(int worker)
{
	stat_line("{\"event\":\"checkpoint\",\"worker\":%d,\"name\":\"%s\",\"ranks\":%u,"
		  "\"parked\":%u,\"done\":%u,\"failed\":%u,\"verdict\":\"%s\",\"first_us\":%llu,"
		  "\"parked_us\":%llu,\"done_us\":%llu,\"verdict_us\":%llu}",
		  worker, C.name, C.got, C.parked, C.done, C.failed, C.verdict,
		  (unsigned long long)C.first_us, (unsigned long long)C.parked_us,
		  (unsigned long long)C.done_us, (unsigned long long)C.verdict_us);
	memset(&C, 0, sizeof(C));
}

/* The images of the ranks told WRITE in this wake-up, then their DONE
 * lines (SCALE_WRITE=batch) */
static void write_batch(void)
{
	int ret = template_for(C.name), ok[nwrites];

	for (unsigned i = 0; i < nwrites; i++)
		ok[i] = !ret && write_copy(writes[i]) == 0;
	if (!ret && T.dirfd >= 0) {
		/* the names durable before any DONE (a lower half's directory fsync) */
		int d = openat(T.dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

		if (d < 0 || fsync(d) != 0)
			ret = err_set(-EIO, "%s: cannot fsync its directory", T.name);
		if (d >= 0)
			close(d);
	}
	for (unsigned i = 0; i < nwrites; i++) {
		struct rank *r = writes[i];

		/* a rank whose agent is gone sees its connection close next */
		if (ret || !ok[i]) {
			C.failed++;
			say(r, "FAILED rank %d: %s", r->rank, err_msg());
			continue;
		}
		C.done++;
		C.done_us = now_us();
		if (r->rank == S.bad_done_rank && r->ckpts == 1)
			say(r, "%s", S.bad_done_line);
		else
			say(r, "DONE 0 0 rank-%05d.img %zu %08x 1", r->rank, T.len, T.crc);
	}
	nwrites = 0;
}

static struct board *boards;   /* the worker's nodes', from first_node */
static int first_node, nboards;

/* The descriptors that came with a rank's OK (SCM_RIGHTS) */
static int got_fds[NODE_PARK_FDS], ngot;

static void close_got(void)
{
	for (int i = 0; i < ngot; i++)
		close(got_fds[i]);
	ngot = 0;
}

/* OK <slot> <gen> with the board's descriptors: the rank's slot, the
 * node's board mapped and its bell in the worker's epoll set once */
static int board_join(struct rank *r, const char *line, int ep)
{
	struct board *b = &boards[r->node - first_node];
	unsigned slot, gen;
	int n = 0;

	if (ngot != NODE_PARK_FDS || sscanf(line, "OK %u %u%n", &slot, &gen, &n) != 2 || line[n] ||
	    slot >= NODE_PARK_SLOTS)
		return err_set(-EPROTO, "an OK line of another form: %.60s (%d descriptors)", line,
			       ngot);
	r->slot = (int)slot;
	r->seen = gen;
	if (b->p) {
		close_got();   /* the node's: mapped already */
		return 0;
	}
	if (node_park_map(got_fds[0], &b->p) != 0)
		return -EPROTO;
	close(got_fds[0]);
	b->ranks_bell = got_fds[1];
	b->agent_bell = got_fds[2];
	ngot = 0;
	/* each write of the bell an event (node_park.h) */
	if (epoll_ctl(ep, EPOLL_CTL_ADD, b->ranks_bell,
		      &(struct epoll_event){ .events = EPOLLIN | EPOLLET, .data.ptr = b }) != 0)
		return err_set(-errno, "epoll: %s", strerror(errno));
	return 0;
}

/* CHECKPOINT name reaches rank r (posted: on the board); -1: the rank goes */
static int rank_checkpoint(struct rank *r, const char *name, int posted)
{
	uint64_t t = now_us();

	r->ckpts++;
	if (r->rank == S.fail_rank && r->ckpts == S.fail_ckpt)
		return -1;   /* killed: not a word */
	if (!C.got++) {
		snprintf(C.name, sizeof(C.name), "%.63s", name);
		C.first_us = t;
	}
	if (r->rank == S.park_fail_rank && r->ckpts == 1) {
		/* as lh_agent.c's checkpoint(): counted first, then the reason */
		if (posted) {
			struct board *b = &boards[r->node - first_node];

			node_park_answer(b->p, (unsigned)r->slot, r->seen, 0, 0, b->agent_bell);
		}
		C.failed++;
		return say(r, "FAILED rank %d: 1 thread(s) of the program did not stop within 10 s "
			   "(simulated)", r->rank) ? -1 : 0;
	}
	C.parked++;
	C.parked_us = t;
	if (posted) {
		struct board *b = &boards[r->node - first_node];

		node_park_answer(b->p, (unsigned)r->slot, r->seen, 1, 1, b->agent_bell);
		return 0;
	}
	/* as say() would, without formatting a line 65,536 times */
	return send(r->fd, "PARKED 1\n", 9, MSG_NOSIGNAL) == 9 ? 0 : -1;
}

/* The ranks' bell of board b rang: each rank of it on the board looks */
static int board_rang(struct board *b)
{
	char name[sizeof(b->p->ckpt)];
	int gone = 0;

	for (int i = 0; i < b->n; i++) {
		struct rank *r = &b->ranks[i];

		if (r->fd < 0 || r->slot < 0 || !node_park_posted(b->p, &r->seen, name, sizeof(name)))
			continue;
		if (rank_checkpoint(r, name, 1) < 0) {
			close(r->fd);
			r->fd = -1;
			gone++;
		}
	}
	return gone;
}

/* A line from rank r's agent; -1: the rank goes */
static int rank_line(struct rank *r, const char *line, unsigned *registered, int worker, int ep)
{
	uint64_t t;

	if (!strcmp(line, "OK") || !strncmp(line, "OK ", 3)) {
		if (line[2] && board_join(r, line, ep) != 0) {
			fprintf(stderr, "mpirun.sim: rank %d: %s\n", r->rank, err_msg());
			return -1;
		}
		++*registered;
		return 0;
	}
	if (!strncmp(line, "ERR", 3)) {
		fprintf(stderr, "mpirun.sim: rank %d: the node agent refused it: %s\n", r->rank, line);
		return -1;
	}
	t = now_us();
	if (!strncmp(line, "CHECKPOINT ", 11))
		return rank_checkpoint(r, line + 11, 0);
	if (!strcmp(line, "WRITE") && !S.write_store) {
		writes[nwrites++] = r;   /* written with the wake-up's others */
		return 0;
	}
	if (!strcmp(line, "WRITE")) {
		struct store_file_record rec;

		if (write_image(r, C.name, &rec) != 0) {
			C.failed++;
			return say(r, "FAILED rank %d: %s", r->rank, err_msg()) ? -1 : 0;
		}
		C.done++;
		C.done_us = now_us();
		if (S.record_each)
			return say(r, "DONE 0 0") ? -1 : 0;
		/* the image's record is the node agent's to append */
		return say(r, "DONE 0 0 %s %llu %08x %d", rec.info.name, (unsigned long long)rec.info.size,
			   rec.info.crc, rec.image) ? -1 : 0;
	}
	if (!strcmp(line, "RESUME") || !strcmp(line, "RESUME failed") || !strcmp(line, "EXIT")) {
		snprintf(C.verdict, sizeof(C.verdict), "%.31s", line);
		C.verdict_us = t;
		if (++C.verdicts == C.got)
			ckpt_report(worker);
		if (!strcmp(line, "EXIT")) {
			say(r, "BYE");
			return -1;
		}
		return 0;
	}
	fprintf(stderr, "mpirun.sim: rank %d: unexpected line from the node agent: %.80s\n", r->rank,
		line);
	return 0;
}

static int sock_dirfd = -1;   /* the agents' directory, for paths over sun_path */

static int rank_connect(struct rank *r)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char path[PATH_MAX];

	sock_of(r->node, path, sizeof(path));
	if (strlen(path) < sizeof(sa.sun_path)) {
		strcpy(sa.sun_path, path);
	} else {
		/* as node_client.c does: through a descriptor on the directory */
		if (sock_dirfd < 0) {
			*strrchr(path, '/') = 0;
			sock_dirfd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
			sock_of(r->node, path, sizeof(path));
		}
		snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d/%s", sock_dirfd,
			 strrchr(path, '/') + 1);
	}
	r->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (r->fd < 0 || connect(r->fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
		return -errno;
	return 0;
}

/* What rank r's agent sent, to a short read (its socket is edge-
 * triggered), with the descriptors of an OK; 1 if the rank goes. events:
 * epoll's; once the agent closed (EPOLLRDHUP) its close comes after its
 * last line in the same edge, and a short read is not the end */
static int rank_read(struct rank *r, unsigned *registered, int id, int ep, uint32_t events)
{
	int closed = (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0;

	for (;;) {
		size_t room = sizeof(r->in) - r->len;
		union {
			struct cmsghdr h;
			char b[CMSG_SPACE(sizeof(got_fds))];
		} u;
		struct iovec iov = { r->in + r->len, room };
		struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b,
				    .msg_controllen = sizeof(u.b) };
		ssize_t got = room ? recvmsg(r->fd, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC) : 0;
		char *nl;

		for (struct cmsghdr *c = got > 0 ? CMSG_FIRSTHDR(&m) : NULL; c; c = CMSG_NXTHDR(&m, c))
			if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
				int n = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));

				close_got();
				memcpy(got_fds, CMSG_DATA(c), sizeof(int) * (size_t)(n < NODE_PARK_FDS ? n : NODE_PARK_FDS));
				ngot = n < NODE_PARK_FDS ? n : NODE_PARK_FDS;
			}

		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0 && errno == EAGAIN)
			return 0;
		if (got <= 0)
			return 1;
		r->len += (size_t)got;
		while ((nl = memchr(r->in, '\n', r->len))) {
			*nl = 0;
			if (rank_line(r, r->in, registered, id, ep) < 0)
				return 1;
			r->len -= (size_t)(nl + 1 - r->in);
			memmove(r->in, nl + 1, r->len);
		}
		if ((size_t)got < room && !closed)
			return 0;
	}
}

static int worker(int id, int first, int count)
{
	struct rank *ranks = calloc((size_t)count, sizeof(*ranks));
	int ep = epoll_create1(EPOLL_CLOEXEC), open_ranks = 0;
	unsigned registered = 0, reported = 0;
	char host[16];
	uint64_t t0;
	const char *tier = getenv("STASIS_STORE_TIER");

	writes = calloc((size_t)count, sizeof(*writes));
	first_node = first / S.ppn;
	nboards = (first + count - 1) / S.ppn - first_node + 1;
	boards = calloc((size_t)nboards, sizeof(*boards));
	if (!ranks || !writes || !boards || ep < 0)
		die("worker %d: out of memory", id);
	if (store_open(tier && *tier ? tier : NULL, getenv("STASIS_STORE_ROOT"), S.job, &store) != 0)
		die("worker %d: the job's store: %s", id, err_msg());
	t0 = now_us();
	for (int i = 0; i < count; i++) {
		struct rank *r = &ranks[i];
		/* edge-triggered: epoll_wait does not poll each socket it
		 * reported once more (rank_read reads until a short read, or
		 * once the agent closed, to the end) */
		struct epoll_event ev = { .events = EPOLLIN | EPOLLET | EPOLLRDHUP, .data.ptr = r };
		char img[PATH_MAX];

		r->rank = first + i;
		r->node = r->rank / S.ppn;
		r->slot = -1;
		if (!boards[r->node - first_node].n++)
			boards[r->node - first_node].ranks = r;
		if (S.restore) {
			struct stat st;

			snprintf(img, sizeof(img), "%s/rank-%05d.img", S.restore, r->rank);
			if (stat(img, &st) != 0 || !st.st_size)
				die("rank %d: no image %s to restart from", r->rank, img);
		}
		if (rank_connect(r) != 0)
			die("rank %d: cannot reach the node agent of sim%05d: %s", r->rank, r->node,
			    strerror(errno));
		host_of(r->node, host, sizeof(host));
		if (say(r, "RANK %d %s %d %d %d %s %d", PROTOCOL, S.secret, r->rank, S.size,
			(int)getpid(), host, S.restarts) != 0 ||
		    epoll_ctl(ep, EPOLL_CTL_ADD, r->fd, &ev) != 0)
			die("rank %d: %s", r->rank, strerror(errno));
		open_ranks++;
	}
	while (open_ranks) {
		struct epoll_event evs[256];
		int n = epoll_wait(ep, evs, 256, -1);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			die("epoll_wait: %s", strerror(errno));
		for (int e = 0; e < n; e++) {
			struct rank *r = evs[e].data.ptr;
			struct board *b = evs[e].data.ptr;

			if (b >= boards && b < boards + nboards) {
				open_ranks -= board_rang(b);
				continue;
			}
			if (rank_read(r, &registered, id, ep, evs[e].events)) {
				/* EXIT, killed by the harness, or the agent went */
				close(r->fd);
				r->fd = -1;   /* a write of this wake-up's batch fails */
				open_ranks--;
			}
			close_got();   /* descriptors no OK took */
		}
		if (nwrites)
			write_batch();
		if (registered == (unsigned)count && !reported) {
			reported = 1;
			stat_line("{\"event\":\"registered\",\"worker\":%d,\"ranks\":%d,\"restarts\":%d,"
				  "\"start_us\":%llu,\"done_us\":%llu}", id, count, S.restarts,
				  (unsigned long long)t0, (unsigned long long)now_us());
		}
	}
	store_ckpt_free(&joined);
	store_close(&store);
	if (T.file[0])
		unlink(T.file);
	return 0;
}

/* ---- the launcher ---- */

static void read_secret(void)
{
	char path[PATH_MAX];
	int fd;

	snprintf(path, sizeof(path), "%s/coord.secret", getenv("STASIS_JOB_DIR"));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || read(fd, S.secret, 32) != 32)
		die("cannot read the job's secret %s", path);
	close(fd);
}

static void usage(void)
{
	fprintf(stderr, "usage: stasis run -- mpirun.sim --nodes N --ppn P PROGRAM\n");
	exit(2);
}

int main(int argc, char **argv)
{
	int workers, status = 0, rc = 0;
	const char *v;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--nodes") && i + 1 < argc)
			S.nodes = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--ppn") && i + 1 < argc)
			S.ppn = atoi(argv[++i]);
		else if (argv[i][0] == '-')
			usage();
	}
	if (S.nodes <= 0 || S.ppn <= 0)
		usage();
	S.size = S.nodes * S.ppn;
	S.job = getenv("STASIS_JOB_NAME");
	S.run = getenv("STASIS_RUN_ID");
	if (!S.job || !S.run || !getenv("STASIS_JOB_DIR"))
		die("no job in the environment: run me under `stasis run`");
	S.tmp = getenv("SCALE_DIR") ? getenv("SCALE_DIR") : "/tmp";
	S.stats = getenv("SCALE_STATS");
	S.restore = getenv("STASIS_RESTORE_DIR");
	S.restarts = S.restore != NULL;
	if ((v = getenv("SCALE_FAIL_RANK")))
		S.fail_rank = atoi(v);
	S.fail_ckpt = (v = getenv("SCALE_FAIL_CKPT")) ? (unsigned)atoi(v) : 1;
	if ((v = getenv("SCALE_PARK_FAIL_RANK")))
		S.park_fail_rank = atoi(v);
	if ((v = getenv("SCALE_BAD_DONE_RANK")) && (S.bad_done_line = getenv("SCALE_BAD_DONE_LINE")))
		S.bad_done_rank = atoi(v);
	S.join_each = !getenv("SCALE_JOIN") || strcmp(getenv("SCALE_JOIN"), "worker") != 0;
	S.record_each = getenv("SCALE_RECORD") && !strcmp(getenv("SCALE_RECORD"), "rank");
	S.write_store = S.record_each ||
			(getenv("SCALE_WRITE") && !strcmp(getenv("SCALE_WRITE"), "store"));
	read_secret();
	{
		struct rlimit rl;

		/* one descriptor a rank in each worker */
		if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
			rl.rlim_cur = rl.rlim_max;
			setrlimit(RLIMIT_NOFILE, &rl);
		}
	}
	signal(SIGPIPE, SIG_IGN);
	agents_start();
	workers = (S.size + RANKS_PER_WORKER - 1) / RANKS_PER_WORKER;
	for (int w = 0; w < workers; w++) {
		int first = w * RANKS_PER_WORKER;
		int count = S.size - first < RANKS_PER_WORKER ? S.size - first : RANKS_PER_WORKER;
		pid_t pid = fork();

		if (pid < 0)
			die("fork: %s", strerror(errno));
		if (pid == 0)
			_exit(worker(w, first, count));
	}
	while (wait(&status) > 0)
		if (!WIFEXITED(status) || WEXITSTATUS(status))
			rc = 1;
	return rc;
}

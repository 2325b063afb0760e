/* node_agent.c - the node agent's loop (node.h, docs/coordinator.md "Node
 * agents"). One thread serves the node's ranks of the job and the
 * coordinator, in one epoll loop; mover threads (stage_copies of them, at
 * idle CPU and I/O priority) copy the staged images to the global tier.
 *
 * A checkpoint, as the agent sees it: CHECKPOINT from the coordinator goes
 * to every registered rank; when each has said PARKED (or FAILED, or
 * died) the agent says PARKED <max us> <ranks> (or FAILED <the first
 * reason>) once; WRITE likewise gives DONE <regions> <pages> <ranks>, after
 * the agent appended the index records of the images its ranks left to it
 * (their DONE names the file, its size and CRC: one append a node); the
 * verdict (RESUME, RESUME failed, EXIT) goes to every rank. Registrations
 * that arrive during a checkpoint wait for its end. CHECKPOINT reaches the
 * ranks on the board (node_park.h) in one write, and they count
 * themselves parked there: one wake-up of the agent a node, not a line
 * each way a rank.
 */
#include "node/node.h"
#include "node/node_level.h"
#include "node/node_migrate.h"
#include "node/node_park.h"

#include "common/config.h"
#include "common/err.h"
#include "common/fault.h"
#include "common/line.h"
#include "common/log.h"
#include "store/store.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LINE_MAX_LEN 1024
#define FIRST_RANK_TIMEOUT_MS (300 * 1000)   /* no rank ever came: give up */
#define MOVERS_MAX 16
#define IOPRIO_CLASS_IDLE 3
#define IOPRIO_WHO_PROCESS 1
#define IMAGE_FMT "rank-%05d.img"             /* split_format.h's SPLIT_IMAGE_FMT */

int node_sock_listen(const char *path, int *out);   /* node_client.c */

struct conn {
	int fd;
	size_t len;
	char in[LINE_MAX_LEN];
};

enum rank_state {
	R_HELLO,    /* connected, RANK line not read yet */
	R_QUEUED,   /* RANK read during a checkpoint: forwarded after it */
	R_WAIT,     /* RANK forwarded, the coordinator's answer awaited */
	R_REG,      /* registered */
};

struct rank {
	struct conn c;
	enum rank_state state;
	int rank, size, pid;
	unsigned restarts;
	char host[64];
	int in_ckpt, answered, written, leaving;
	int writing;           /* the WRITE line of the phase names it */
	int quit;              /* said QUIT: the program ends it (its close is a goodbye) */
	unsigned slot;         /* its place in A.r */
	int has_rec;           /* its DONE left its image's record to the agent */
	struct store_file_record rec;
	int park_slot;         /* its slot on the board, or -1: it is told by lines */
};

enum phase { IDLE, COLLECT, ANSWERED };

static struct {
	struct conn coord;
	pthread_mutex_t send_lock;
	int lfd;
	int ep;                       /* epoll: the coordinator, the socket, each rank */
	struct rank **r;
	unsigned n, cap;
	struct rank **by_fd;          /* a rank by its socket, for epoll's events */
	unsigned fd_cap;
	int had_ranks;
	char secret[33], host[64], sock[PATH_MAX];
	/* the checkpoint under way */
	enum phase phase;
	const char *word;             /* PARKED or DONE */
	char ckpt[64];
	unsigned waiting, answers;
	uint64_t max, sum1, sum2;
	char failed[400];
	/* the board (node_park.h): NULL when it could not be made */
	struct node_park *board;
	int board_fd, ranks_bell, agent_bell;
	int board_phase;              /* this phase's ranks with a slot answer there */
	unsigned char slot_used[NODE_PARK_SLOTS];
	/* staging */
	struct store *global;
	const char *stage_dir;
	char local_job[256];
	/* a migration's receiver started here (RECEIVE): a move into this
	 * node's spares */
	struct node_receiver recv;
} A = { .send_lock = PTHREAD_MUTEX_INITIALIZER, .lfd = -1, .ep = -1, .coord = { .fd = -1 },
	.board_fd = -1, .ranks_bell = -1, .agent_bell = -1,
	.recv = { .out = -1, .pidfd = -1 } };

/* Something went wrong that the log keeps: a clean end removes the log */
static int warned;
/* KILL from the coordinator (a recovery stops the job): the ranks are
 * killed and the agent ends, which the coordinator sees as its answer */
static int killed;
/* The fault point node.agent.migrate: a MIGRATE left unanswered, as by an
 * agent whose sending hangs while its heartbeats go on; it stays (its
 * ranks gone) until the coordinator ends it */
static int migrate_hung;
#define agent_warn(...) (warned = 1, log_warn(__VA_ARGS__))

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- lines ---- */

static int send_bytes(int fd, const char *buf, int n)
{
	return fd >= 0 && n > 0 && send(fd, buf, (size_t)n, MSG_NOSIGNAL) == n ? 0 : -EPIPE;
}

static int send_line(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int send_line(int fd, const char *fmt, ...)
{
	char buf[LINE_MAX_LEN];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = line_vformat(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	return n < 0 ? n : send_bytes(fd, buf, n);
}

/* A line to send to many ranks, formatted once (a phase's line reaches
 * every rank of the node): its length, or a negative errno */
static int format_line(char *buf, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int format_line(char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = line_vformat(buf, len, fmt, ap);
	va_end(ap);
	return n;
}

/* to the coordinator: the loop and the movers both speak */
static void to_coord(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void to_coord(const char *fmt, ...)
{
	char buf[LINE_MAX_LEN];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&A.send_lock);
	send_line(A.coord.fd, "%s", buf);
	pthread_mutex_unlock(&A.send_lock);
}

/* What the peer sent: 0, or -EPIPE once it closed (lines read before stay) */
static int conn_fill(struct conn *c)
{
	ssize_t r;

	if (c->len == sizeof(c->in))
		return -E2BIG;
	r = read(c->fd, c->in + c->len, sizeof(c->in) - c->len);
	if (r < 0 && (errno == EINTR || errno == EAGAIN))
		return 0;
	if (r <= 0)
		return -EPIPE;
	c->len += (size_t)r;
	return 0;
}

/* The next whole line in out (1), or none yet (0) */
static int conn_line(struct conn *c, char *out, size_t len)
{
	char *nl = memchr(c->in, '\n', c->len);
	size_t n;

	if (!nl)
		return 0;
	n = (size_t)(nl - c->in);
	/* copied (cut to fit), not printed: every line of every rank comes here */
	memcpy(out, c->in, n < len ? n : len - 1);
	out[n < len ? n : len - 1] = 0;
	memmove(c->in, nl + 1, c->len - n - 1);
	c->len -= n + 1;
	return 1;
}

/* A line from the coordinator, waiting at most timeout_ms (start-up only) */
static int coord_line(char *out, size_t len, int timeout_ms)
{
	uint64_t end = now_ms() + (uint64_t)timeout_ms;

	while (!conn_line(&A.coord, out, len)) {
		struct pollfd p = { A.coord.fd, POLLIN, 0 };
		uint64_t t = now_ms();

		if (t >= end || poll(&p, 1, (int)(end - t)) <= 0)
			return -ETIMEDOUT;
		if (conn_fill(&A.coord) != 0 && !memchr(A.coord.in, '\n', A.coord.len))
			return -EPIPE;
	}
	return 0;
}

/* ---- copies to the global tier ---- */

struct copy {
	char name[64];
	int rank;
	unsigned batch;
	int follow;            /* queued at WRITE: copied while the rank writes it */
};
struct batch {
	char name[64];
	unsigned left, ok;
	int verdict;           /* 1 sealed, 0 awaited (followed copies), -1 failed */
};
#define COPIES_MAX 1024
#define BATCHES_MAX 16

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct copy q[COPIES_MAX];
	unsigned head, tail, busy, started;
	struct batch b[BATCHES_MAX];
	unsigned nb;
	unsigned follow;       /* 1 + the batch of the checkpoint being written, or 0 */
} M = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

/* node_copy_wait's verdict of a followed copy: its batch's */
static int batch_verdict(void *arg)
{
	int v;

	pthread_mutex_lock(&M.lock);
	v = M.b[(uintptr_t)arg].verdict;
	pthread_mutex_unlock(&M.lock);
	return v;
}

static int copy_rank(struct store *global, const char *name, int rank,
		     const struct node_copy_wait *w)
{
	char path[PATH_MAX], file[64];

	snprintf(file, sizeof(file), IMAGE_FMT, rank);
	if (snprintf(path, sizeof(path), "%s/%s/%s/%s", A.stage_dir, A.local_job, name, file) >=
	    (int)sizeof(path))
		return err_set(-ENAMETOOLONG, "%s/%s: path too long", A.stage_dir, A.local_job);
	return node_copy_image(global, path, name, file, w);
}

static void *mover(void *arg)
{
	const char *tier = getenv("STASIS_STORE_TIER");
	struct sched_param sp = { 0 };
	struct store *global = NULL;

	(void)arg;
	/* a store of its own: the movers commit at once */
	if (store_open(tier && *tier ? tier : NULL, getenv("STASIS_STORE_ROOT"),
		       getenv("STASIS_JOB_NAME"), &global) != 0)
		global = NULL;
	/* the ranks' CPU and I/O come first */
	pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);
	syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, (int)syscall(SYS_gettid), IOPRIO_CLASS_IDLE << 13);
	for (;;) {
		struct copy c;
		struct batch *b;
		int ret;

		pthread_mutex_lock(&M.lock);
		while (M.head == M.tail)
			pthread_cond_wait(&M.cond, &M.lock);
		c = M.q[M.head++ % COPIES_MAX];
		M.busy++;
		pthread_mutex_unlock(&M.lock);
		/* a level under way (partner, rs: node_level.c) first: it protects
		 * the checkpoint from a node's loss sooner, and the two would share
		 * the node's idle CPU and network */
		if (node_level_busy()) {
			uint64_t t = now_ms();

			while (node_level_busy())
				usleep(10 * 1000);
			log_info("node agent on %s: rank %d's image of %s waited %llu ms for the level "
				 "before its copy into the global tier", A.host, c.rank, c.name,
				 (unsigned long long)(now_ms() - t));
		} else if (node_level_over(c.name)) {
			log_info("node agent on %s: rank %d's image of %s: its level was over before "
				 "its copy into the global tier", A.host, c.rank, c.name);
		}
		err_clear();
		ret = global ? copy_rank(global, c.name, c.rank,
					 c.follow ? &(struct node_copy_wait){ batch_verdict,
									      (void *)(uintptr_t)c.batch }
						  : NULL)
			     : err_set(-EIO, "cannot open the global tier");
		if (ret && ret != -ECANCELED)   /* cancelled: its checkpoint failed */
			agent_warn("node agent on %s: rank %d's image of %s stays at level local: %s",
				 A.host, c.rank, c.name, err_msg());
		pthread_mutex_lock(&M.lock);
		b = &M.b[c.batch];
		b->ok += ret == 0;
		/* the node's images of the checkpoint are all copied: one line */
		if (--b->left == 0 && b->ok && !strcmp(b->name, c.name))
			to_coord("COPIED %s %u", b->name, b->ok);
		M.busy--;
		pthread_cond_broadcast(&M.cond);
		pthread_mutex_unlock(&M.lock);
	}
	return NULL;
}

static int movers_idle(void)
{
	int idle;

	pthread_mutex_lock(&M.lock);
	idle = M.head == M.tail && !M.busy;
	pthread_mutex_unlock(&M.lock);
	return idle;
}

/* Checkpoint name's images of ranks, at level local here (follow: being
 * written, the checkpoint's verdict awaited): copied to the global tier by
 * the movers. The batch they are in. */
static unsigned copy_ranks(const char *name, const int *ranks, unsigned n, int follow)
{
	const char *env = getenv("STASIS_STAGE_COPIES");
	unsigned movers = env ? (unsigned)atoi(env) : 1, k;
	struct batch *b;

	if (!n)
		return 0;
	if (!movers)
		movers = 1;
	if (movers > MOVERS_MAX)
		movers = MOVERS_MAX;
	pthread_mutex_lock(&M.lock);
	while (M.started < movers) {
		pthread_t th;
		sigset_t all, old;

		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		if (pthread_create(&th, NULL, mover, NULL) != 0) {
			pthread_sigmask(SIG_SETMASK, &old, NULL);
			break;
		}
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		pthread_detach(th);
		M.started++;
	}
	k = M.nb++ % BATCHES_MAX;
	b = &M.b[k];
	snprintf(b->name, sizeof(b->name), "%s", name);
	b->left = 0;
	b->ok = 0;
	b->verdict = follow ? 0 : 1;
	for (unsigned i = 0; i < n; i++) {
		if (M.tail - M.head == COPIES_MAX) {
			agent_warn("node agent on %s: too many copies queued; %s stays at level local",
				 A.host, name);
			break;
		}
		M.q[M.tail++ % COPIES_MAX] = (struct copy){ .rank = ranks[i], .batch = k,
							    .follow = follow };
		snprintf(M.q[(M.tail - 1) % COPIES_MAX].name, 64, "%s", name);
		b->left++;
	}
	pthread_cond_broadcast(&M.cond);
	pthread_mutex_unlock(&M.lock);
	return k;
}

/* Checkpoint A.ckpt is established at level local: copy the images of the
 * ranks that wrote one here */
static void copy_written(void)
{
	int ranks[A.n + 1];
	unsigned n = 0;

	for (unsigned i = 0; i < A.n; i++)
		if (A.r[i]->written)
			ranks[n++] = A.r[i]->rank;
	copy_ranks(A.ckpt, ranks, n, 0);
}

/* WRITE: the ranks of checkpoint A.ckpt write their images here; the
 * movers copy each while it is written (the copy overlaps the write, and
 * the global tier is reached sooner after the seal) and commit it once the
 * verdict says sealed (copies_verdict) */
static void copy_writing(void)
{
	int ranks[A.n + 1];
	unsigned n = 0, k;

	for (unsigned i = 0; i < A.n; i++)
		if (A.r[i]->in_ckpt)
			ranks[n++] = A.r[i]->rank;
	pthread_mutex_lock(&M.lock);
	if (M.follow)   /* no verdict came for the last one: it is over */
		M.b[M.follow - 1].verdict = -1;
	pthread_mutex_unlock(&M.lock);
	k = copy_ranks(A.ckpt, ranks, n, 1);
	pthread_mutex_lock(&M.lock);
	M.follow = n ? k + 1 : 0;
	pthread_mutex_unlock(&M.lock);
}

/* The verdict of the checkpoint written (line: RESUME..., EXIT): its
 * followed copies commit (RESUME) or are dropped. 1 if they were followed
 * and go on (no copy after the seal needed). */
static int copies_verdict(const char *line)
{
	int sealed = !strcmp(line, "RESUME"), followed;

	pthread_mutex_lock(&M.lock);
	followed = M.follow != 0;
	if (followed)
		M.b[M.follow - 1].verdict = sealed ? 1 : -1;
	M.follow = 0;
	pthread_cond_broadcast(&M.cond);
	pthread_mutex_unlock(&M.lock);
	return followed && sealed;
}

/* ---- the ranks ---- */

static void rank_free(unsigned i)
{
	int fd = A.r[i]->c.fd;

	/* out of the epoll set first: a RECOVER's dup keeps the socket open */
	epoll_ctl(A.ep, EPOLL_CTL_DEL, fd, NULL);
	close(fd);
	if (A.r[i]->park_slot >= 0)
		A.slot_used[A.r[i]->park_slot] = 0;
	free(A.r[i]);
	A.by_fd[fd] = NULL;
	A.r[i] = A.r[--A.n];
	if (i < A.n)
		A.r[i]->slot = i;    /* the last moved into the hole */
}

static struct rank *rank_by_number(int rank, enum rank_state state)
{
	for (unsigned i = 0; i < A.n; i++)
		if (A.r[i]->rank == rank && A.r[i]->state == state)
			return A.r[i];
	return NULL;
}

static void phase_answer(void);
static int done_record(struct rank *r, const char *args);

/* ---- the board (node_park.h) ---- */

/* The board and its two bells; without them every rank is told by lines */
static void board_create(void)
{
	struct node_park *p = MAP_FAILED;
	int fd = memfd_create("stasis-node-board", MFD_CLOEXEC);

	if (fd >= 0 && ftruncate(fd, sizeof(*p)) == 0)
		p = mmap(NULL, sizeof(*p), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	A.ranks_bell = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	A.agent_bell = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (p == MAP_FAILED || A.ranks_bell < 0 || A.agent_bell < 0 ||
	    epoll_ctl(A.ep, EPOLL_CTL_ADD, A.agent_bell,
		      &(struct epoll_event){ .events = EPOLLIN, .data.fd = A.agent_bell }) != 0) {
		agent_warn("node agent on %s: no board for its ranks (%s): each is told by lines",
			   A.host, strerror(errno));
		if (p != MAP_FAILED)
			munmap(p, sizeof(*p));
		for (int *f = (int[]){ fd, A.ranks_bell, A.agent_bell }, k = 0; k < 3; k++)
			if (f[k] >= 0)
				close(f[k]);
		A.ranks_bell = A.agent_bell = -1;
		return;
	}
	p->magic = NODE_PARK_MAGIC;
	p->version = NODE_PARK_VERSION;
	p->slots = NODE_PARK_SLOTS;
	A.board = p;
	A.board_fd = fd;
}

/* OK to a rank the coordinator registered: with a free slot, the board, its
 * bells, the slot and the generation the rank starts from (SCM_RIGHTS);
 * else OK alone, and the rank is told by lines */
static void rank_ok(struct rank *r)
{
	int fds[NODE_PARK_FDS] = { A.board_fd, A.ranks_bell, A.agent_bell };
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(fds))];
	} u = { 0 };
	char line[64];
	struct iovec iov = { .iov_base = line };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b,
			    .msg_controllen = sizeof(u.b) };
	unsigned s = 0;

	r->state = R_REG;
	while (A.board && s < NODE_PARK_SLOTS && A.slot_used[s])
		s++;
	if (!A.board || s == NODE_PARK_SLOTS) {
		send_line(r->c.fd, "OK");
		return;
	}
	A.board->slot[s].gen = 0;   /* never a posted generation */
	iov.iov_len = (size_t)snprintf(line, sizeof(line), "OK %u %u\n", s, A.board->gen);
	u.h.cmsg_level = SOL_SOCKET;
	u.h.cmsg_type = SCM_RIGHTS;
	u.h.cmsg_len = CMSG_LEN(sizeof(fds));
	memcpy(CMSG_DATA(&u.h), fds, sizeof(fds));
	if (sendmsg(r->c.fd, &m, MSG_NOSIGNAL) != (ssize_t)iov.iov_len)
		return;   /* the rank is gone: its connection's close comes next */
	A.slot_used[s] = 1;
	r->park_slot = (int)s;
}

/* CHECKPOINT A.ckpt to the n ranks of the checkpoint on the board: the
 * name, the count, a new generation, then one write of the ranks' bell */
static void board_post(unsigned n)
{
	static const uint64_t one = 1;
	struct node_park *p = A.board;
	uint32_t gen = p->gen + 1 ? p->gen + 1 : 1;   /* 0 is no generation's */

	snprintf(p->ckpt, sizeof(p->ckpt), "%s", A.ckpt);
	__atomic_store_n(&p->expected, n, __ATOMIC_SEQ_CST);
	__atomic_store_n(&p->answered, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&p->gen, gen, __ATOMIC_RELEASE);
	if (write(A.ranks_bell, &one, sizeof(one)) != (ssize_t)sizeof(one))
		agent_warn("node agent on %s: cannot ring its ranks' bell: %s", A.host,
			   strerror(errno));
	A.board_phase = 1;
}

static void phase_answered(struct rank *r);

/* Rank r parked for this generation: its slot says so */
static int board_parked(struct rank *r)
{
	const struct node_park_slot *s = &A.board->slot[r->park_slot];

	if (__atomic_load_n(&s->gen, __ATOMIC_ACQUIRE) != A.board->gen)
		return 0;
	if (s->us > A.max)
		A.max = s->us;
	A.sum1 += s->us;
	r->written = 0;
	phase_answered(r);
	return 1;
}

/* The ranks parked on the board since the last look. At every wake-up of
 * the loop in a PARKED phase: the agent's bell rings once for the node,
 * and a rank that died before it counted itself makes the count fall
 * short (board_missed, the loop's 1 s timeout) */
static void board_harvest(void)
{
	if (!A.board_phase || A.phase != COLLECT)
		return;
	for (unsigned i = 0; i < A.n && A.phase == COLLECT; i++) {
		struct rank *r = A.r[i];

		if (r->in_ckpt && !r->answered && r->park_slot >= 0)
			board_parked(r);
	}
}

/* The agent's bell rang: read (the loop's harvest looks at the board) */
static void board_rang(void)
{
	uint64_t rings;

	if (read(A.agent_bell, &rings, sizeof(rings)) < 0 && errno != EAGAIN)
		agent_warn("node agent on %s: its bell: %s", A.host, strerror(errno));
}

/* Rank r of the board's phase will not answer (its connection closed): it
 * parked before, or the agent counts it answered in its place, so that the
 * last of the others rings the bell */
static void board_missed(struct rank *r)
{
	if (!A.board_phase || A.phase != COLLECT || r->answered || r->park_slot < 0 ||
	    board_parked(r))
		return;
	__atomic_add_fetch(&A.board->answered, 1, __ATOMIC_SEQ_CST);
}

/* One of this checkpoint's ranks will not answer */
static void ckpt_miss(struct rank *r, const char *why)
{
	if (!r->in_ckpt)
		return;
	board_missed(r);
	r->in_ckpt = 0;
	if (A.phase != COLLECT || r->answered)
		return;
	if (!A.failed[0])
		snprintf(A.failed, sizeof(A.failed), "rank %d (pid %d on %s) %s", r->rank, r->pid,
			 r->host, why);
	A.waiting--;
	phase_answer();
}

/* Rank i's connection closed (bye: after BYE, or after EXIT) */
static void rank_gone(unsigned i, int bye)
{
	struct rank *r = A.r[i];

	if (r->state == R_REG || r->state == R_WAIT) {
		if (bye) {
			to_coord("BYE %d", r->rank);
		} else {
			/* at once: the coordinator fails a checkpoint under way, and
			 * STATUS shows it */
			agent_warn("node agent on %s: rank %d (pid %d) died", A.host, r->rank, r->pid);
			to_coord("LOST %d its connection to the node agent on %s closed without a "
				 "goodbye (killed, or crashed)", r->rank, A.host);
		}
		ckpt_miss(r, bye ? "ended during the checkpoint" : "died during the checkpoint");
	}
	rank_free(i);
}

static void forward_rank(struct rank *r)
{
	r->state = R_WAIT;
	to_coord("RANK %d %d %d %s %u", r->rank, r->size, r->pid, r->host, r->restarts);
}

/* RANK 5 <secret> <rank> <size> <pid> <host> <restarts> */
static int rank_hello(struct rank *r, const char *line)
{
	char secret[128];
	unsigned version;

	if (sscanf(line, "RANK %u %127s %d %d %d %63s %u", &version, secret, &r->rank, &r->size,
		   &r->pid, r->host, &r->restarts) != 7) {
		send_line(r->c.fd, "ERR expected RANK <version> <secret> <rank> <size> <pid> <host> "
			  "<restarts>");
		return -EPROTO;
	}
	if (version != NODE_RANK_PROTOCOL_VERSION) {
		send_line(r->c.fd, "ERR protocol version %u not supported (this node agent speaks %d)",
			  version, NODE_RANK_PROTOCOL_VERSION);
		return -EPROTO;
	}
	if (!line_secret_equal(secret, A.secret)) {
		send_line(r->c.fd, "ERR wrong secret");
		return -EACCES;
	}
	A.had_ranks = 1;
	if (A.phase != IDLE)
		r->state = R_QUEUED;
	else
		forward_rank(r);
	return 0;
}

/* The numbers of a rank's PARKED and DONE lines are read by hand: with
 * each line read printed into place and each phase's line formatted for
 * each rank, libc's scanf and printf were about a tenth of an agent's CPU
 * in a checkpoint at 65K ranks (perf) */
#define SPACES " \t\n\v\f\r"

static const char *skip_space(const char *p)
{
	return p + strspn(p, SPACES);
}

/* "<a> [<b>]" at s, as sscanf's "%llu %llu" reads them: how many (0-2);
 * *end (if end) after the last one read */
static int read_counts(const char *s, unsigned long long *a, unsigned long long *b,
		       const char **end)
{
	char *e;
	int k = 0;

	*a = strtoull(s, &e, 10);
	if (e != s) {
		k = 1;
		s = e;
		*b = strtoull(s, &e, 10);
		if (e != s) {
			k = 2;
			s = e;
		}
	}
	if (end)
		*end = s;
	return k;
}

/* A line of rank i; -1 if the rank is to go */
static int rank_said(unsigned i, const char *line)
{
	struct rank *r = A.r[i];
	unsigned long long a = 0, b = 0;
	size_t wl;
	int k;

	if (r->state == R_HELLO && !strncmp(line, "RECOVER ", 8)) {
		/* a restart's rebuild (node_level.c): not a rank of the job yet */
		node_level_recover(r->c.fd, line, A.secret);
		return -1;
	}
	if (r->state == R_HELLO)
		return rank_hello(r, line) ? -1 : 0;
	if (!strcmp(line, "BYE")) {
		rank_gone(i, 1);
		return 1;
	}
	if (r->state != R_REG)
		return 0;
	if (!strcmp(line, "REQUEST")) {
		/* MPIX_Checkpoint; during a checkpoint, that one answers it */
		if (A.phase == IDLE)
			to_coord("REQUEST");
		return 0;
	}
	if (!strncmp(line, "QUIT ", 5)) {
		/* exit without MPI_Finalize, or MPI_Abort: told at once, before
		 * the launcher ends the other ranks for it */
		to_coord("QUIT %d %.40s", r->rank, line + 5);
		send_line(r->c.fd, "QUITOK");   /* the rank ends only now */
		r->quit = 1;
		return 0;
	}
	if (A.phase != COLLECT || !r->in_ckpt || r->answered)
		return 0;
	wl = strlen(A.word);
	if (!strncmp(line, A.word, wl) && line[wl] == ' ' &&
	    (k = read_counts(line + wl, &a, &b, NULL)) >= 1) {
		if (a > A.max)
			A.max = a;
		A.sum1 += a;
		A.sum2 += k == 2 ? b : 0;
		/* a move keeps what WRITE wrote; a WRITE that did not name the
		 * rank, what an earlier one did */
		if (!strcmp(A.word, "PARKED"))
			r->written = 0;
		else if (!strcmp(A.word, "DONE"))
			r->written |= r->writing;
		if (!strcmp(A.word, "DONE") && done_record(r, line + wl) && !A.failed[0])
			snprintf(A.failed, sizeof(A.failed), "rank %d: a DONE line the node agent on %.40s "
				 "cannot read: %.200s", r->rank, A.host, line);
	} else if (!A.failed[0]) {
		snprintf(A.failed, sizeof(A.failed), "%.399s",
			 strncmp(line, "FAILED ", 7) ? line : line + 7);
	}
	phase_answered(r);
	return 0;
}

/* Rank r answered the phase (its numbers counted) */
static void phase_answered(struct rank *r)
{
	r->answered = 1;
	A.answers++;
	A.waiting--;
	phase_answer();
}

/* DONE <regions> <pages> [<file> <size> <crc> <image 0|1>]: with the
 * file, the rank committed its image without its index record
 * (store_file_commit_unrecorded) and the agent appends it (record_files).
 * -EBADMSG for a line of another form. */
static int done_record(struct rank *r, const char *args)
{
	unsigned long long regions, pages, size;
	const char *p, *name;
	unsigned crc = 0;
	size_t len, hex;
	char *e;

	r->has_rec = 0;
	if (read_counts(args, &regions, &pages, &p) != 2)
		return -EBADMSG;
	p = skip_space(p);
	if (!*p)
		return 0;     /* no file: the rank recorded its image itself */
	name = p;
	len = strcspn(p, SPACES);
	if (len >= sizeof(r->rec.info.name) || !isdigit((unsigned char)*skip_space(p + len)))
		return -EBADMSG;
	size = strtoull(p + len, &e, 10);
	p = skip_space(e);
	hex = strspn(p, "0123456789abcdefABCDEF");
	if (!hex || hex > 8 || !isspace((unsigned char)p[hex]))
		return -EBADMSG;
	for (size_t i = 0; i < hex; i++)
		crc = crc << 4 | (unsigned)(isdigit((unsigned char)p[i]) ? p[i] - '0' :
					    (p[i] | 0x20) - 'a' + 10);
	p = skip_space(p + hex);
	if ((*p != '0' && *p != '1') || p[1])
		return -EBADMSG;
	r->rec = (struct store_file_record){ .info = { .size = size, .crc = crc }, .image = *p == '1' };
	snprintf(r->rec.info.name, sizeof(r->rec.info.name), "%.*s", (int)len, name);
	r->has_rec = 1;
	return 0;
}

/* The records of the images the node's ranks left to the agent, in one
 * append to the job's index (FILES: docs/store.md) before the node's DONE,
 * so that the coordinator's seal finds them. */
static int record_files(void)
{
	const char *tier = getenv("STASIS_STORE_TIER");
	struct store_file_record *recs = calloc(A.n + 1, sizeof(*recs));
	struct store_ckpt *ck = NULL;
	unsigned n = 0;
	int ret = recs ? 0 : err_set(-ENOMEM, "out of memory");

	for (unsigned i = 0; i < A.n && !ret; i++)
		if (A.r[i]->in_ckpt && A.r[i]->written && A.r[i]->has_rec)
			recs[n++] = A.r[i]->rec;
	if (!ret && n && !A.global)
		ret = store_open(tier && *tier ? tier : NULL, getenv("STASIS_STORE_ROOT"),
				 getenv("STASIS_JOB_NAME"), &A.global);
	ret = ret || !n ? ret : store_ckpt_join_begun(A.global, A.ckpt, &ck);
	ret = ret || !n ? ret : store_ckpt_record_files(ck, recs, n);
	store_ckpt_free(&ck);
	free(recs);
	return ret;
}

/* Every rank of the checkpoint answered the phase: one line for them all */
static void phase_answer(void)
{
	if (A.phase != COLLECT || A.waiting)
		return;
	A.phase = ANSWERED;
	if (!A.failed[0] && !strcmp(A.word, "DONE") && record_files() != 0)
		snprintf(A.failed, sizeof(A.failed), "node agent on %.40s: cannot record its ranks' images: %.290s",
			 A.host, err_msg());
	if (A.failed[0])
		to_coord("FAILED %s", A.failed);
	else if (!strcmp(A.word, "PARKED"))
		to_coord("PARKED %llu %u", (unsigned long long)A.max, A.answers);
	else   /* DONE, MOVED */
		to_coord("%s %llu %llu %u", A.word, (unsigned long long)A.sum1,
			 (unsigned long long)A.sum2, A.answers);
}

/* Send line to the checkpoint's ranks and collect their answers (word);
 * CHECKPOINT goes to the ranks on the board in one post */
static void phase_begin(const char *line, const char *word)
{
	char out[LINE_MAX_LEN];
	int len = format_line(out, sizeof(out), "%s", line);
	int board = A.board && !strcmp(word, "PARKED");
	unsigned on_board = 0;

	A.phase = COLLECT;
	A.word = word;
	A.failed[0] = 0;   /* a refused MOVE's reason is not the next WRITE's */
	A.waiting = A.answers = 0;
	A.max = A.sum1 = A.sum2 = 0;
	A.board_phase = 0;
	/* every rank counted first: a send that fails takes its own off */
	for (unsigned i = 0; i < A.n; i++) {
		struct rank *r = A.r[i];

		if (!r->in_ckpt)
			continue;
		r->answered = 0;
		A.waiting++;
		on_board += board && r->park_slot >= 0;
	}
	if (on_board)
		board_post(on_board);
	for (unsigned i = 0; i < A.n; i++) {
		struct rank *r = A.r[i];

		if (r->in_ckpt && !(board && r->park_slot >= 0) && send_bytes(r->c.fd, out, len) != 0)
			ckpt_miss(r, "died during the checkpoint");
	}
	phase_answer();
}

/* ---- the coordinator ---- */

/* UPGRADE (written: the node's ranks that wrote the checkpoint join its
 * level) and STREAM (with WRITE; !written: the node's ranks in the
 * checkpoint send their images to their partners while they write them) */
static void level_call(const char *args, int written,
		       int (*call)(const char *args, const int *ranks, unsigned n, int size))
{
	int ranks[A.n + 1], size = 0;
	unsigned n = 0;

	for (unsigned i = 0; i < A.n; i++)
		if (written ? A.r[i]->written : A.r[i]->in_ckpt) {
			ranks[n++] = A.r[i]->rank;
			size = A.r[i]->size;
		}
	if (n && A.stage_dir && call(args, ranks, n, size) != 0)
		agent_warn("node agent on %s: %s", A.host, err_msg());
}

/* MOVE <to> <rank>...: the ranks' images left this node (the source
 * removed them): none to copy from here */
static void move_noted(const char *args)
{
	const char *p = strchr(args, ' ');

	while (p) {
		char *end;
		long rank = strtol(p, &end, 10);

		if (end == p)
			break;
		p = end;
		for (unsigned i = 0; i < A.n; i++)
			if (A.r[i]->rank == rank)
				A.r[i]->written = 0;
	}
}

/* RECEIVE <sources>: the receiver of a move into this node's spares,
 * started here rather than through a remote shell (docs/coordinator.md,
 * "Moving a rank into a spare"); its port goes to the coordinator as it
 * says it (RECEIVER <port> <pid> <start>), its end too (receiver_seen).
 * RECEIVE cancel: the migration stopped before its end; the receiver is
 * asked to end, killed after 5 s. */
static void receive(const char *args)
{
	struct epoll_event ev = { .events = EPOLLIN };
	unsigned sources;
	int ret;

	if (!strcmp(args, "cancel")) {
		node_receiver_cancel(&A.recv, 5000);
		return;
	}
	if (sscanf(args, "%u", &sources) != 1 || !sources) {
		send_line(A.coord.fd, "RECEIVER - bad RECEIVE line '%.40s'", args);
		return;
	}
	if (A.recv.pid) {
		send_line(A.coord.fd, "RECEIVER - a migration's receiver runs here already (pid %d)",
			  (int)A.recv.pid);
		return;
	}
	if ((ret = FAULT(NODE_AGENT_RECEIVE)) != 0)
		ret = err_set(ret, "fault point node.agent.receive");
	ret = ret ? ret : node_receiver_start(&A.recv, getenv("STASIS_JOB_DIR"), sources);
	if (ret) {
		send_line(A.coord.fd, "RECEIVER - the node agent on %s cannot start the receiver: %s",
			  A.host, err_msg());
		return;
	}
	ev.data.fd = A.recv.out;
	epoll_ctl(A.ep, EPOLL_CTL_ADD, A.recv.out, &ev);
	if (A.recv.pidfd >= 0) {
		ev.data.fd = A.recv.pidfd;
		epoll_ctl(A.ep, EPOLL_CTL_ADD, A.recv.pidfd, &ev);
	}
}

/* The receiver said something (fd: its pipe), or ended (fd: its pidfd),
 * or a look whether a cancelled one is due to be killed (fd -1) */
static void receiver_seen(int fd)
{
	char port[64];
	int st, said;

	if (fd >= 0 && fd == A.recv.out) {
		said = node_receiver_output(&A.recv, port, sizeof(port));
		if (said == 1)
			send_line(A.coord.fd, "RECEIVER %s", port);
		if (said >= 0 || A.recv.pidfd >= 0)
			return;   /* its end comes by its pidfd */
	}
	if (fd >= 0 && fd == A.recv.pidfd)   /* what it said last first: no writer is left */
		while (node_receiver_output(&A.recv, port, sizeof(port)) >= 0)
			;
	if (node_receiver_reap(&A.recv, &st))
		send_line(A.coord.fd, "RECEIVED %d %s", st, st ? A.recv.why : "");
}

/* the heartbeat while the agent's one thread sends a migration's images */
static void say_alive(void)
{
	to_coord("ALIVE");
}

static void coord_said(const char *line)
{
	int rank, pos = 0;
	struct rank *r;

	if (sscanf(line, "OK %d", &rank) == 1 && (r = rank_by_number(rank, R_WAIT))) {
		rank_ok(r);
	} else if (sscanf(line, "ERR %d %n", &rank, &pos) == 1 && pos &&
		   (r = rank_by_number(rank, R_WAIT))) {
		send_line(r->c.fd, "ERR %s", line + pos);
		for (unsigned i = 0; i < A.n; i++)
			if (A.r[i] == r)
				rank_free(i);
	} else if (!strncmp(line, "CHECKPOINT ", 11)) {
		char cmd[128];

		FAULT(NODE_AGENT_CKPT);
		snprintf(A.ckpt, sizeof(A.ckpt), "%.63s", line + 11);
		for (unsigned i = 0; i < A.n; i++) {
			A.r[i]->in_ckpt = A.r[i]->state == R_REG;
			A.r[i]->written = 0;
		}
		snprintf(cmd, sizeof(cmd), "CHECKPOINT %s", A.ckpt);
		phase_begin(cmd, "PARKED");
	} else if (!strncmp(line, "WRITE", 5) && (!line[5] || line[5] == ' ')) {
		/* WRITE [ONLY|EXCEPT <rank>...]: a move's ranks only, or the others */
		for (unsigned i = 0; i < A.n; i++)
			A.r[i]->writing = line_write_names(line + 5, A.r[i]->rank);
		phase_begin(line, "DONE");
		if (!line[5] && A.stage_dir && A.global)
			copy_writing();     /* a plain WRITE: every rank of the checkpoint */
	} else if (!strncmp(line, "MOVE ", 5)) {
		/* the ranks go into spares, the others relink (lh_agent.c) */
		move_noted(line + 5);
		phase_begin(line, "MOVED");
	} else if (!strcmp(line, "KILL")) {
		for (unsigned i = 0; i < A.n; i++) {
			struct ucred cred;
			socklen_t len = sizeof(cred);

			/* the process at the other end of the rank's connection (its
			 * lower half), as this node sees it */
			if (getsockopt(A.r[i]->c.fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 &&
			    cred.pid > 0)
				kill(cred.pid, SIGKILL);
		}
		log_info("node agent on %s: the coordinator stops the job: %u rank(s) killed", A.host,
			 A.n);
		killed = 1;
	} else if (!strncmp(line, "MIGRATE ", 8)) {
		uint64_t bytes = 0, t0 = now_ms();
		char removed[PATH_MAX] = "";

		if (FAULT(NODE_AGENT_MIGRATE) != 0) {
			agent_warn("node agent on %s: fault point node.agent.migrate: the migration "
				   "is left unanswered", A.host);
			migrate_hung = 1;
			return;
		}
		/* the ranks are parked: the agent's one thread sends (node_migrate.h) */
		if (node_migrate_send(line + 8, A.stage_dir, A.local_job, A.secret, say_alive, &bytes,
				      removed, sizeof(removed)) == 0)
			send_line(A.coord.fd, "MIGRATED %llu %llu", (unsigned long long)bytes,
				  (unsigned long long)(now_ms() - t0));
		else
			send_line(A.coord.fd, "FAILED migration from %s: %s", A.host, err_msg());
	} else if (!strncmp(line, "RECEIVE ", 8)) {
		receive(line + 8);
	} else if (!strncmp(line, "GATHERED ", 9)) {
		node_level_gathered(line + 9);
	} else if (!strncmp(line, "UPGRADE ", 8)) {
		level_call(line + 8, 1, node_level_upgrade);
	} else if (!strncmp(line, "STREAM ", 7)) {
		level_call(line + 7, 0, node_level_stream);
	} else if (!strcmp(line, "RESUME") || !strcmp(line, "RESUME failed") ||
		   !strcmp(line, "RESUME moved") || !strcmp(line, "EXIT")) {
		char out[LINE_MAX_LEN];
		int len = format_line(out, sizeof(out), "%s", line);
		int took_part = A.phase != IDLE;   /* this agent had the CHECKPOINT */

		/* before the lines: a rank that finds the checkpoint posted
		 * only after reading its verdict does not park for it */
		if (A.board)
			__atomic_store_n(&A.board->over, A.board->gen, __ATOMIC_RELEASE);
		for (unsigned i = 0; i < A.n; i++) {
			struct rank *q = A.r[i];

			if (!q->in_ckpt)
				continue;
			send_bytes(q->c.fd, out, len);
			/* after EXIT a rank ends without a goodbye of its own */
			q->leaving = !strcmp(line, "EXIT");
		}
		A.phase = IDLE;
		if (strcmp(line, "RESUME") && strcmp(line, "RESUME moved"))
			node_level_abort();     /* a STREAM's checkpoint failed, or ends the job */
		/* a move's cut (RESUME moved) is no checkpoint of the node's:
		 * its ranks wrote none here */
		if (took_part && (!strcmp(line, "RESUME") || !strcmp(line, "RESUME failed")))
			node_level_verdict(A.ckpt, !strcmp(line, "RESUME"));
		if (!copies_verdict(line) && (!strcmp(line, "RESUME") ||
					      !strcmp(line, "RESUME moved")) && A.stage_dir && A.global)
			copy_written();
		for (unsigned i = 0; i < A.n; i++) {
			A.r[i]->in_ckpt = 0;
			if (A.r[i]->state == R_QUEUED)
				forward_rank(A.r[i]);
		}
	} else {
		agent_warn("node agent on %s: unexpected line from the coordinator: %.80s", A.host, line);
	}
}

/* ---- start-up ---- */

static int read_secret(void)
{
	const char *dir = getenv("STASIS_JOB_DIR");
	char path[PATH_MAX];
	int fd;

	snprintf(path, sizeof(path), "%s/coord.secret", dir ? dir : ".");
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || read(fd, A.secret, 32) != 32) {
		if (fd >= 0)
			close(fd);
		return err_set(-EACCES, "cannot read the job's secret %s", path);
	}
	close(fd);
	A.secret[32] = 0;
	return 0;
}

static int connect_coord(void)
{
	const char *addr = getenv("STASIS_COORD_ADDR");
	char line[LINE_MAX_LEN];
	int fd = -1, ret = line_connect(addr, "the job's coordinator (STASIS_COORD_ADDR)", &fd);

	if (ret)
		return ret;
	A.coord.fd = fd;
	send_line(fd, "NODE %d %s %s %d", NODE_PROTOCOL_VERSION, A.secret, A.host, (int)getpid());
	if (coord_line(line, sizeof(line), 30000) != 0)
		return err_set(-EPROTO, "the coordinator at %s did not answer", addr);
	if (strcmp(line, "OK") != 0)
		return err_set(-EPROTO, "the coordinator at %s refused the node agent: %s", addr,
			       strncmp(line, "ERR ", 4) ? line : line + 4);
	return 0;
}

static int start(void)
{
	const char *tier = getenv("STASIS_STORE_TIER");
	int ret;

	gethostname(A.host, sizeof(A.host) - 1);
	A.stage_dir = getenv("STASIS_STAGE_DIR");
	if (A.stage_dir && !*A.stage_dir)
		A.stage_dir = NULL;
	snprintf(A.local_job, sizeof(A.local_job), "%s.%s", getenv("STASIS_JOB_NAME"),
		 getenv("STASIS_STAGE_ID") ? getenv("STASIS_STAGE_ID") : "0");
	ret = read_secret();
	ret = ret ? ret : node_sock_path(A.sock, sizeof(A.sock), NULL, 0);
	if (!ret && A.stage_dir)
		ret = store_open(tier && *tier ? tier : NULL, getenv("STASIS_STORE_ROOT"),
				 getenv("STASIS_JOB_NAME"), &A.global);
	ret = ret ? ret : connect_coord();
	if (!ret)
		node_level_init(&(struct node_level_env){ A.host, A.stage_dir, A.local_job,
							  to_coord });
	return ret ? ret : node_sock_listen(A.sock, &A.lfd);
}

static void accept_rank(void)
{
	int fd = accept4(A.lfd, NULL, NULL, SOCK_CLOEXEC);
	struct rank *r;

	if (fd < 0)
		return;
	if (A.n == A.cap) {
		void *v = realloc(A.r, (A.cap = A.cap ? A.cap * 2 : 16) * sizeof(*A.r));

		if (!v) {
			close(fd);
			return;
		}
		A.r = v;
	}
	if ((unsigned)fd >= A.fd_cap) {
		unsigned cap = (unsigned)fd * 2 + 16;
		void *v = realloc(A.by_fd, cap * sizeof(*A.by_fd));

		if (!v) {
			close(fd);
			return;
		}
		A.by_fd = v;
		memset(A.by_fd + A.fd_cap, 0, (cap - A.fd_cap) * sizeof(*A.by_fd));
		A.fd_cap = cap;
	}
	r = calloc(1, sizeof(*r));
	if (!r || epoll_ctl(A.ep, EPOLL_CTL_ADD, fd,
			    &(struct epoll_event){ .events = EPOLLIN, .data.fd = fd }) != 0) {
		free(r);
		close(fd);
		return;
	}
	r->c.fd = fd;
	r->park_slot = -1;
	r->state = R_HELLO;
	r->slot = A.n;
	A.by_fd[fd] = r;
	A.r[A.n++] = r;
}

/* The agent's loop: one epoll set (the coordinator, the socket, every
 * rank), so a wake-up costs what became ready, not a poll of the node's
 * ranks (each PARKED and DONE line wakes it) */
static int serve_setup(void)
{
	A.ep = epoll_create1(EPOLL_CLOEXEC);
	if (A.ep < 0 ||
	    epoll_ctl(A.ep, EPOLL_CTL_ADD, A.coord.fd,
		      &(struct epoll_event){ .events = EPOLLIN, .data.fd = A.coord.fd }) != 0 ||
	    epoll_ctl(A.ep, EPOLL_CTL_ADD, A.lfd,
		      &(struct epoll_event){ .events = EPOLLIN, .data.fd = A.lfd }) != 0) {
		log_error("node agent on %s: epoll: %s", A.host, strerror(errno));
		return -errno;
	}
	board_create();
	return 0;
}

/* What rank r sent (its socket was ready) */
static void rank_ready(struct rank *r)
{
	char line[LINE_MAX_LEN];
	unsigned i = r->slot;
	int gone, said = 0;

	gone = conn_fill(&r->c) != 0;
	while (i < A.n && A.r[i] == r && conn_line(&r->c, line, sizeof(line))) {
		said = rank_said(i, line);
		if (said < 0) {
			rank_free(i);
			break;
		}
		if (said > 0)
			break;   /* BYE: freed */
	}
	if (gone && !said && i < A.n && A.r[i] == r)
		rank_gone(i, r->leaving || r->quit);
}

static void serve(void)
{
	uint64_t started = now_ms(), beat_at = 0;
	const char *hb = getenv("STASIS_HEARTBEAT_MS");   /* coord/jobenv.h */
	int beat_ms = hb ? atoi(hb) : 0;
	const char *sp = getenv("STASIS_SPARES");         /* coord/jobenv.h */
	const char *sb = getenv("STASIS_STANDBY");        /* coord/jobenv.h */
	int spares = (sp && atoi(sp) > 0) || (sb && !strcmp(sb, "1"));

	if (serve_setup() != 0)
		return;
	for (;;) {
		struct epoll_event ev[64];
		char line[LINE_MAX_LEN];
		int cgone = 0, listen = 0, k;

		/* every rank gone, every copy made: the agent's work is done */
		if (A.had_ranks && !A.n && A.phase == IDLE && movers_idle() && !node_level_busy() &&
		    !migrate_hung)
			return;
		/* a node of spare ranks only (STASIS_SPARES, coord/jobenv.h) has
		 * no rank until a migration moves one into a spare, a stand-by's
		 * (STASIS_STANDBY) none until a restore: it waits as long as the
		 * job */
		if (!A.had_ranks && !spares &&
		    (now_ms() - started > FIRST_RANK_TIMEOUT_MS || FAULT(NODE_NO_RANK) != 0)) {
			agent_warn("node agent on %s: no rank came in %d s", A.host,
				 FIRST_RANK_TIMEOUT_MS / 1000);
			return;
		}
		k = epoll_wait(A.ep, ev, 64, A.recv.kill_at ? 100 :
			       beat_ms > 0 && beat_ms < 1000 ? beat_ms : 1000);
		if (k < 0 && errno != EINTR)
			return;
		if (beat_ms > 0 && now_ms() - beat_at >= (uint64_t)beat_ms) {
			/* the coordinator finds a lost node by its agent's silence */
			to_coord("ALIVE");
			beat_at = now_ms();
		}
		for (int e = 0; e < k; e++) {
			if (ev[e].data.fd == A.coord.fd)
				cgone = conn_fill(&A.coord) != 0;
			else if (ev[e].data.fd == A.agent_bell)
				board_rang();
			else if (A.recv.pid && (ev[e].data.fd == A.recv.out ||
						ev[e].data.fd == A.recv.pidfd))
				receiver_seen(ev[e].data.fd);
			listen |= ev[e].data.fd == A.lfd;
		}
		while (conn_line(&A.coord, line, sizeof(line)))
			coord_said(line);
		if (A.recv.kill_at)
			receiver_seen(-1);
		if (killed)
			return;
		if (cgone) {
			/* the job is over (or its coordinator died): the ranks run on
			 * without checkpoints */
			log_info("node agent on %s: the coordinator closed; %u rank(s) here", A.host, A.n);
			return;
		}
		/* a rank freed by an earlier line of this wake-up has no entry any
		 * more; no socket is accepted (no descriptor reused) until after */
		for (int e = 0; e < k; e++) {
			int fd = ev[e].data.fd;

			if (fd != A.coord.fd && fd != A.lfd && fd != A.agent_bell &&
			    (unsigned)fd < A.fd_cap && A.by_fd[fd])
				rank_ready(A.by_fd[fd]);
		}
		board_harvest();
		if (listen)
			accept_rank();
	}
}

int node_agent_main(int ready_fd)
{
	enum log_level level;
	const char *lv = getenv("STASIS_LOG");
	int ret;

	signal(SIGPIPE, SIG_IGN);
	if (lv && log_level_parse(lv, &level) == 0)
		log_set_level(level);
	if (cfg_load(NULL) != 0) {
		fprintf(stderr, "stasis: node agent: %s\n", err_msg());
		return 1;
	}
	ret = start();
	if (ret) {
		fprintf(stderr, "stasis: node agent: %s\n", err_msg());
		return 1;
	}
	log_info("node agent on %s (pid %d) serves job %s at %s", A.host, (int)getpid(),
		 getenv("STASIS_JOB_NAME"), A.sock);
	if (ready_fd >= 0) {
		if (write(ready_fd, "1", 1) != 1) {
			/* the rank that started it gave up waiting: serve anyway */
		}
		close(ready_fd);
	}
	serve();
	node_level_end();
	/* a receiver serves no migration without its agent */
	if (A.recv.pid) {
		kill(A.recv.pid, SIGKILL);
		waitpid(A.recv.pid, NULL, 0);
	}
	/* the copies under way stop with the process: their *.tmp never count.
	 * The socket, its lock (no rank of this run comes any more) and, when
	 * nothing went wrong, the log go: runs must not pile up files here */
	unlink(A.sock);
	{
		char path[PATH_MAX + 8];

		snprintf(path, sizeof(path), "%.*s.lock", (int)(strlen(A.sock) - 5), A.sock);
		unlink(path);
		snprintf(path, sizeof(path), "%s.log", A.sock);
		if (!warned && !log_warnings())     /* the levels' warnings too */
			unlink(path);
	}
	close(A.lfd);
	close(A.coord.fd);
	if (A.ep >= 0)
		close(A.ep);
	return 0;
}

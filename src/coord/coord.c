/* coord.c - the per-job coordinator (see coord.h, docs/coordinator.md).
 *
 * One thread, one poll loop: the listening socket, the agent's channel, a
 * signalfd (SIGCHLD, SIGTERM, SIGUSR1), an MPI job's TCP port and its node
 * agents' connections (one epoll set, however many nodes: docs/scale.md)
 * and the checkpoint interval. A
 * checkpoint runs to its end inside the loop; clients that arrive meanwhile
 * wait in the listen backlog.
 */
#include "coord/coord.h"
#include "coord/job.h"
#include "coord/relay.h"
#include "coord/jobenv.h"
#include "coord/migrate.h"
#include "coord/policy.h"

#include "common/config.h"
#include "common/err.h"
#include "common/line.h"
#include "common/log.h"
#include "image/image.h"
#include "proc/proc.h"
#include "proc/proc_format.h"
#include "proc/written.h"
#include "store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <time.h>
#include <unistd.h>

#define SECRET_LEN 32
#define CLIENT_TIMEOUT_MS 5000
#define HELLO_TIMEOUT_MS 30000
#define NOTE_SETTLE_MS 3000      /* see missing_settled() */
#define IMAGE_NAME "process.img"
#define TREE_NAME "tree"           /* a process tree: one line per process (docs/transparent.md) */
#define MOVED_TIMEOUT_MS (120 * 1000)  /* a moved rank registering from its spare */
#define HB_CHECK_MS 100               /* how often silent node agents are looked for */

/* A rank of an MPI job, registered through its node's agent
 * (docs/coordinator.md, "Node agents"). */
struct rank_conn {
	int node;                /* the id of its node agent */
	int rank, size, pid;
	unsigned restarts;
	char host[64];
};

/* A node agent: one per node of the job, speaking for the node's ranks */
struct node_conn {
	int fd, id, pid;
	int in_ckpt;             /* has ranks in the checkpoint under way */
	int dead;                /* closed during a checkpoint: removed after it */
	int silent;              /* no heartbeat for hb_timeout_ms: its node is lost */
	uint64_t seen;           /* when its last line came */
	char host[64];
};
#define NODES_MAX 4096

/* What is known of a rank that may not be registered, the latest note of
 * each kind a rank: a process of it runs without a lower half and said why
 * (UNSPLIT from the launch library: it links no MPI, or it loads MPI later
 * but another process of the rank started it), or its lower half
 * registered and ended. A checkpoint that finds the rank missing says the
 * weightiest (the last kind first). */
enum note_kind { NOTE_NOMPI, NOTE_LATE, NOTE_ENDED, NOTE_DIED };
#define NOTES_MAX 4096
struct rank_note {
	int rank, size, pid;
	enum note_kind kind;
	uint64_t at_ms;          /* when it was said (now_ms) */
	char host[64];
	char why[320];
};

#define STAGED_MAX 8             /* staged checkpoints followed at once */
#define EVENTS_MAX 64            /* events waiting for the policies */
#define HOSTS_MAX 256            /* nodes remembered per launch */

struct coord;

/* What the coordinator runs: one program under its agent, or an MPI job
 * whose ranks register through node agents. */
struct target_ops {
	const char *name;
	int (*checkpoint)(struct coord *c, int stop, char *name, size_t len);
	/* the STATUS answer after "OK " */
	void (*status)(struct coord *c, char *out, size_t len);
	/* relaunch from checkpoint dir (NULL: from the start), without the
	 * nodes lost; NULL when the target cannot be relaunched */
	int (*relaunch)(struct coord *c, const char *dir);
};

struct coord {
	const struct coord_opts *o;
	struct store *store;
	char dir[PATH_MAX - 64];
	char secret[SECRET_LEN + 1];
	int listen_fd;
	int channel;             /* to the agent; -1 when it is gone */
	struct proc_tree *tree;  /* the agents of the program's processes (proc/tree.c) */
	int sig_fd;
	pid_t child;             /* stasis run: the program */
	struct proc_child rchild; /* stasis restart: the namespace's parent */
	pid_t pid;               /* the program's pid as it sees it */
	int done, status, stopped;
	int launcher_code;       /* how the launcher (or program) ended, shell convention */
	int quit_code;           /* the first status a rank of this launch ended with itself
				  * (QUIT): the job's, whatever its launcher makes of it */
	int stopping;            /* stop_job: the ranks' ends are its doing */
	uint64_t next_ckpt_ms;
	char last[64];           /* last established checkpoint */
	unsigned taken;
	const struct target_ops *target;
	struct policy_chain *policy;
	struct coord_event events[EVENTS_MAX];   /* raised, not yet decided on */
	unsigned nevents;
	uint64_t hb_timeout_ms;  /* a node agent silent this long is lost (recover auto) */
	/* a recovery under way: its line is said once every rank registered */
	struct {
		int pending;
		uint64_t t0;
		char line[1024];
	} rec;
	char lost_hosts[HOSTS_MAX][64];   /* nodes lost by the launch (heartbeats) */
	unsigned nlost_hosts;
	/* "<checkpoint> <rank> <host>\n" lines: what the relaunches' ranks
	 * said in JOB_MISSING_FILE (missing_take) */
	char *missing;
	size_t missing_len;
	/* A relaunch that ends before every rank is back asks the host list's
	 * nodes whose agents never came whether they live (a spare that died
	 * before its agent started): the hosts that run ranks of the launch,
	 * the hosts whose agents connected */
	char expected[HOSTS_MAX][64];
	unsigned nexpected;
	char agents[HOSTS_MAX][64];
	unsigned nagents;
	char **argv;             /* the launcher's command as relaunched (owned) */
	/* MPI jobs (job.h): the program is a launcher, the ranks register */
	int tcp_fd;
	char addr[128];          /* host:port the ranks reach */
	struct rank_conn *ranks;
	unsigned nranks, size;
	unsigned *slot;          /* by rank: 1 + its index in ranks (checked: may be stale) */
	struct node_conn *nodes;
	unsigned nnodes;
	int node_ep;              /* epoll of the agents' connections (with tcp_fd) */
	int next_node;
	unsigned sent, received;  /* lines to and from node agents, this checkpoint */
	char run_id[17];          /* STASIS_RUN_ID: names the node agents' sockets */
	struct rank_note *notes;
	unsigned nnotes;
	char *const *launch;     /* the job's command, for the launch record */
	/* staging: checkpoints established at level local whose copies to the
	 * global tier are under way (COPIED from each rank) */
	int staged;
	struct {
		char name[64];
		unsigned copied;
		char level[16];  /* the agents' level reached ("": none asked or not yet) */
		int global;      /* every rank's image is in the global tier */
	} copying[STAGED_MAX];
	char next_level[16];      /* checkpoint --level: this checkpoint's level */
	/* a migration asked for (stasis migrate, stasis predict): its client */
	struct {
		int fd;               /* the client, answered once it is carried out; -1 */
		char from[64], to[64];  /* to: "" for the launcher's first spare */
		uint64_t bytes_per_s; /* measured by the last migration (0: none yet) */
		/* an application-level job asked to checkpoint and stop: the
		 * relaunch's command, until when it may take */
		int applevel;
		char **argv;
		uint64_t deadline;
		char ranks[400];
		int moved;            /* ranks went into spares: answered once back */
		uint64_t moved_by;    /* ... or lost at this time */
		/* ... and once the source's agent removed the job's directory
		 * there (its MIGRATED, read as it comes): the source's host,
		 * and until when (migrate_source_ms): an agent that hangs may
		 * keep its heartbeats */
		char leaving[64];
		uint64_t leaving_ms, leaving_by;
		/* hosts where a moved rank's old process waits for the job's
		 * end: not spares (until a relaunch ends them) */
		char (*retired)[64];
		unsigned nretired;
		/* a move into spares: the checkpoint's WRITE names the moving
		 * ranks only (" 1 3"), and the checkpoint is held unsealed: once
		 * the move is made it is dropped (a cut, not a checkpoint); should
		 * the move fail, the others write theirs and it is sealed */
		const char *only;
		struct store_ckpt *held;
		/* ... and with the receiver started on recv_host, the moving
		 * ranks stream their images to it (WRITE ONLY <ranks> TO
		 * <host:port>): what they sent, in how long */
		struct migrate_receiver *recv;
		const char *recv_host;
		/* the migration's receiver while migrate() runs (NULL
		 * otherwise): its node agent's RECEIVER and RECEIVED lines */
		struct migrate_receiver *rcv;
		uint64_t streamed_bytes, streamed_ms;
		uint64_t asked_ms;    /* the request's time: the phases' log lines */
	} mig;
	uint64_t last_bytes;      /* the image bytes of the last checkpoint (DONE's pages) */
	/* `stasis standby`: its ranks wait past MPI_Init for a RESTORE */
	struct {
		int state;            /* 0: no stand-by, 1: waiting, 2: restoring, 3: restored */
		int fd;               /* the RESTORE's client, answered once every rank runs */
		uint64_t t0;
		char lost[64];        /* waiting: the host whose node agent is gone ("": none) */
		int termed;           /* waiting: ended by SIGTERM */
	} standby;
};

/* a set of host names (lost, agents, ...): whether host is in it; add it */
static int host_in(char (*set)[64], unsigned n, const char *host)
{
	for (unsigned i = 0; i < n; i++)
		if (!strcmp(set[i], host))
			return 1;
	return 0;
}

static void host_add(char (*set)[64], unsigned *n, const char *host)
{
	if (!host_in(set, *n, host) && *n < HOSTS_MAX)
		snprintf(set[(*n)++], 64, "%.63s", host);
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- events (policy.h) ---- */

/* Queue an event for the policies (decided on in the loop, never inside a
 * checkpoint or a read); rank -1 and node NULL when they do not apply */
static void raise_event(struct coord *c, enum coord_event_kind kind, int rank, const char *node,
			int status, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static void raise_event(struct coord *c, enum coord_event_kind kind, int rank, const char *node,
			int status, const char *fmt, ...)
{
	struct coord_event *e;
	va_list ap;

	if (!c->policy || c->nevents == EVENTS_MAX)
		return;
	e = &c->events[c->nevents++];
	memset(e, 0, sizeof(*e));
	e->kind = kind;
	e->rank = rank;
	e->status = status;
	e->at_ms = now_ms();
	snprintf(e->node, sizeof(e->node), "%s", node ? node : "");
	va_start(ap, fmt);
	vsnprintf(e->detail, sizeof(e->detail), fmt, ap);
	va_end(ap);
	log_info("event: %s: %s", coord_event_name(kind), e->detail);
}

/* ---- the socket and the secret ---- */

static int sock_addr(const char *dir, struct sockaddr_un *sa, int *dirfd)
{
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	*dirfd = -1;
	if (snprintf(sa->sun_path, sizeof(sa->sun_path), "%s/coord.sock", dir) <
	    (int)sizeof(sa->sun_path))
		return 0;
	/* too long for sun_path: reach the directory through a descriptor */
	*dirfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (*dirfd < 0)
		return err_set(-errno, "cannot open %s: %s", dir, strerror(errno));
	snprintf(sa->sun_path, sizeof(sa->sun_path), "/proc/self/fd/%d/coord.sock", *dirfd);
	return 0;
}

static int connect_job(const char *dir, int *out)
{
	struct sockaddr_un sa;
	int dirfd, fd, ret;

	ret = sock_addr(dir, &sa, &dirfd);
	if (ret)
		return ret;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		ret = -errno;
	else if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		ret = -errno;
		close(fd);
	} else {
		*out = fd;
	}
	if (dirfd >= 0)
		close(dirfd);
	return ret;
}

/* The secret is in place before the socket is (listen_job): a client that
 * reaches the socket finds this coordinator's secret, never a killed one's
 * or half of it, as written through a temporary file and a rename. */
static int make_secret(struct coord *c)
{
	unsigned char raw[SECRET_LEN / 2];
	char path[PATH_MAX], tmp[PATH_MAX + 8];
	int fd;

	if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
		return err_set(-EIO, "cannot get random bytes for the job's secret");
	for (size_t i = 0; i < sizeof(raw); i++)
		snprintf(c->secret + 2 * i, 3, "%02x", raw[i]);
	snprintf(path, sizeof(path), "%s/coord.secret", c->dir);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return err_set(-errno, "cannot create %s: %s", tmp, strerror(errno));
	if (write(fd, c->secret, SECRET_LEN) != SECRET_LEN || fsync(fd) != 0) {
		close(fd);
		unlink(tmp);
		return err_set(-EIO, "cannot write %s", tmp);
	}
	close(fd);
	if (rename(tmp, path) != 0) {
		int e = errno;

		unlink(tmp);
		return err_set(-e, "cannot rename %s: %s", tmp, strerror(e));
	}
	return 0;
}

static int listen_job(struct coord *c)
{
	struct sockaddr_un sa;
	char path[PATH_MAX];
	int fd, dirfd, ret;

	if (connect_job(c->dir, &fd) == 0) {
		close(fd);
		return err_set(-EBUSY, "job %s already has a running coordinator (%s/coord.sock)",
			       c->o->job, c->dir);
	}
	ret = make_secret(c);
	if (ret)
		return ret;
	snprintf(path, sizeof(path), "%s/coord.sock", c->dir);
	unlink(path);   /* left by a coordinator that was killed */
	ret = sock_addr(c->dir, &sa, &dirfd);
	if (ret)
		return ret;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, 16) != 0 ||
	    chmod(path, 0700) != 0) {
		ret = err_set(-errno, "cannot listen on %s: %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		snprintf(path, sizeof(path), "%s/coord.secret", c->dir);
		unlink(path);
	} else {
		c->listen_fd = fd;
	}
	if (dirfd >= 0)
		close(dirfd);
	return ret;
}

static void unlisten(struct coord *c)
{
	char path[PATH_MAX];

	if (c->listen_fd < 0)
		return;
	close(c->listen_fd);
	c->listen_fd = -1;
	snprintf(path, sizeof(path), "%s/coord.sock", c->dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/coord.secret", c->dir);
	unlink(path);
}

/* ---- checkpoints ---- */

/* Establish ck (expected files) if ret is 0, else mark it FAILED with the
 * reason; then prune as configured (periodic checkpoints would fill the
 * disk). Returns ret, or the commit's error. */
static int seal(struct coord *c, struct store_ckpt *ck, int ret, unsigned expected)
{
	if (!ret)
		ret = store_ckpt_commit(ck, expected);
	if (ret) {
		char reason[512];   /* a rank's one-line refusal, whole */

		snprintf(reason, sizeof(reason), "%s", *err_msg() ? err_msg() : strerror(-ret));
		store_ckpt_abort(ck, reason);
		return err_set(ret, "%s", reason);
	}
	snprintf(c->last, sizeof(c->last), "%s", store_ckpt_name(ck));
	c->taken++;
	raise_event(c, EV_CKPT_ESTABLISHED, -1, NULL, 0, "%s", c->last);
	if (cfg_u64(CFG_KEEP)) {
		unsigned removed = 0;

		if (store_prune(c->store, (unsigned)cfg_u64(CFG_KEEP), &removed) != 0)
			log_warn("%s", err_msg());
	}
	return 0;
}

/* ---- the ranks of an MPI job ---- */

static int read_line(int fd, char *buf, size_t len, int timeout_ms);
static int line_waiting(int fd);
static void reply(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* coord_address "auto": where every node reaches this one, the address
 * its host name resolves to (a cluster's login or batch node: its cluster
 * interface), or the loopback address when the name resolves to one (a
 * workstation: every rank is here) */
static const char *auto_address(char *buf, size_t len)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *res = NULL;
	char name[256];

	snprintf(buf, len, "127.0.0.1");
	if (gethostname(name, sizeof(name)) != 0 || getaddrinfo(name, NULL, &hints, &res) != 0)
		return buf;
	for (const struct addrinfo *a = res; a; a = a->ai_next) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)a->ai_addr;

		if ((ntohl(in->sin_addr.s_addr) >> 24) != 127) {
			inet_ntop(AF_INET, &in->sin_addr, buf, (socklen_t)len);
			break;
		}
	}
	freeaddrinfo(res);
	return buf;
}

static int tcp_listen(struct coord *c)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	char chosen[INET_ADDRSTRLEN];
	const char *host = cfg_str(CFG_COORD_ADDRESS);
	int fd;

	if (!strcmp(host, "auto"))
		host = auto_address(chosen, sizeof(chosen));

	if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
		return err_set(-EINVAL, "coord_address '%s' is not an IPv4 address", host);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	/* the kernel's most (net.core.somaxconn): every node's agent connects
	 * at once when a launch starts, and a full backlog drops SYNs, which
	 * come again only after a second */
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, SOMAXCONN) != 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &len) != 0 ||
	    (c->node_ep = epoll_create1(EPOLL_CLOEXEC)) < 0) {
		int e = errno;

		if (fd >= 0)
			close(fd);
		return err_set(-e, "cannot listen for the job's ranks on %s: %s", host, strerror(e));
	}
	c->tcp_fd = fd;
	snprintf(c->addr, sizeof(c->addr), "%s:%u", host, (unsigned)ntohs(sa.sin_port));
	return 0;
}

/* Remember what is known of rank (of size, pid on host): its note of that
 * kind, replaced if it has one */
static void note_add(struct coord *c, int rank, int size, int pid, const char *host,
		     enum note_kind kind, const char *why)
{
	struct rank_note *n = NULL;

	for (unsigned i = 0; i < c->nnotes && !n; i++)
		if (c->notes[i].rank == rank && c->notes[i].kind == kind)
			n = &c->notes[i];
	if (!n) {
		if (c->nnotes == NOTES_MAX)
			return;
		if (!c->notes && !(c->notes = calloc(NOTES_MAX, sizeof(*c->notes))))
			return;
		n = &c->notes[c->nnotes++];
	}
	n->rank = rank;
	n->size = size;
	n->pid = pid;
	n->kind = kind;
	n->at_ms = now_ms();
	snprintf(n->host, sizeof(n->host), "%s", host);
	snprintf(n->why, sizeof(n->why), "%s", why);
}

static void rank_drop(struct coord *c, unsigned i)
{
	c->ranks[i] = c->ranks[--c->nranks];
	if (i < c->nranks)
		c->slot[c->ranks[i].rank] = i + 1;
}

/* O(1): a scan per RANK, BYE and LOST line made registering 65,536 ranks
 * quadratic (bench/scale) */
static int rank_index(struct coord *c, int rank)
{
	unsigned i;

	if (rank < 0 || (unsigned)rank >= c->size || !c->slot)
		return -1;
	i = c->slot[rank] - 1;
	return i < c->nranks && c->ranks[i].rank == rank ? (int)i : -1;
}

/* Rank i ended (BYE from its node agent: MPI_Finalize), or died (why) */
static void rank_ended(struct coord *c, unsigned i, const char *why)
{
	const struct rank_conn *r = &c->ranks[i];

	if (why && !c->stopping)
		log_warn("rank %d (pid %d on %s) %s", r->rank, r->pid, r->host, why);
	if (why)
		raise_event(c, EV_RANK_LOST, r->rank, r->host, 0, "rank %d (pid %d on %s) %s",
			    r->rank, r->pid, r->host, why);
	else
		raise_event(c, EV_RANK_EXITED, r->rank, r->host, 0, "rank %d (pid %d on %s) ended",
			    r->rank, r->pid, r->host);
	note_add(c, r->rank, r->size, r->pid, r->host, why ? NOTE_DIED : NOTE_ENDED,
		 why ? why : "registered above its lower half, then ended");
	rank_drop(c, i);
}

/* QUIT <rank> exit <status> | abort <code>: the program ends the rank
 * itself, without MPI_Finalize (its BYE follows) */
static void rank_quit(struct coord *c, const char *args)
{
	char how[8];
	int rank, code, i;

	if (sscanf(args, "%d %7s %d", &rank, how, &code) != 3 || (i = rank_index(c, rank)) < 0)
		return;
	raise_event(c, EV_RANK_QUIT, rank, c->ranks[i].host, code, !strcmp(how, "abort") ?
		    "rank %d (pid %d on %s) called MPI_Abort (error code %d)" :
		    "rank %d (pid %d on %s) exited with status %d without calling MPI_Finalize",
		    rank, c->ranks[i].pid, c->ranks[i].host, code);
}

/* The ranks of node n, "2, 3" */
static void node_ranks(struct coord *c, const struct node_conn *n, char *out, size_t len)
{
	size_t k = 0;

	out[0] = 0;
	for (unsigned i = 0; i < c->nranks && k + 16 < len; i++)
		if (c->ranks[i].node == n->id)
			k += (size_t)snprintf(out + k, len - k, "%s%d", k ? ", " : "",
					      c->ranks[i].rank);
}

/* The node agents' connections are one epoll set, each event pointing at
 * its node_conn: a poll of every agent for each line made registration and
 * a checkpoint quadratic in nodes (bench/scale). Removed before close: a
 * child between fork and exec holds the descriptor too. */
static int node_watch(struct coord *c, unsigned i, int op)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &c->nodes[i] };

	return epoll_ctl(c->node_ep, op, c->nodes[i].fd, &ev);
}

static void node_close(struct coord *c, unsigned i)
{
	epoll_ctl(c->node_ep, EPOLL_CTL_DEL, c->nodes[i].fd, NULL);
	close(c->nodes[i].fd);
}

static void source_left(struct coord *c, const char *host, const char *failed);
static void mig_moved_answer(struct coord *c);
static void mig_drop(struct coord *c);

/* Node agent ni's connection closed, or it fell silent (n->silent: its
 * node is lost): its ranks are lost with it */
static void node_gone(struct coord *c, unsigned ni)
{
	struct node_conn *n = &c->nodes[ni];
	char why[200];

	if (n->silent) {
		snprintf(why, sizeof(why), "was lost with its node %s (no heartbeat from its node "
			 "agent for %llu ms)", n->host, (unsigned long long)c->hb_timeout_ms);
		raise_event(c, EV_NODE_LOST, -1, n->host, 0, "node %s lost: its node agent (pid %d) "
			    "said nothing for %llu ms", n->host, n->pid,
			    (unsigned long long)(now_ms() - n->seen));
		if (c->nlost_hosts < HOSTS_MAX)
			snprintf(c->lost_hosts[c->nlost_hosts++], sizeof(c->lost_hosts[0]), "%s",
				 n->host);
	} else {
		snprintf(why, sizeof(why), "died with its node agent on %s (pid %d), whose "
			 "connection closed", n->host, n->pid);
	}
	for (unsigned i = c->nranks; i-- > 0;)
		if (c->ranks[i].node == n->id)
			rank_ended(c, i, why);
	log_info("the node agent on %s (pid %d) is gone", n->host, n->pid);
	source_left(c, n->host, "its node agent ended before it said it removed the job's "
		    "directory there");
	if (c->standby.state == 1 && !c->stopping && !c->standby.lost[0])
		snprintf(c->standby.lost, sizeof(c->standby.lost), "%s", n->host);
	node_close(c, ni);
	c->nodes[ni] = c->nodes[--c->nnodes];
	if (ni < c->nnodes)
		node_watch(c, ni, EPOLL_CTL_MOD);   /* its event points at its new place */
}

/* UNSPLIT <version> <secret> <rank> <size> <pid> <host> nompi|late <why...>: a
 * process of a rank that runs without a lower half, and why (launch.c). No
 * answer. */
static void unsplit(struct coord *c, const char *line)
{
	char secret[128], host[64], kind[16];
	unsigned version;
	int rank, size, pid, pos = 0;

	if (sscanf(line, "UNSPLIT %u %127s %d %d %d %63s %15s %n", &version, secret, &rank, &size,
		   &pid, host, kind, &pos) != 7 || !pos || !line_secret_equal(secret, c->secret) ||
	    rank < 0 || (size > 0 && rank >= size))
		return;
	if (version != COORD_PROTOCOL_VERSION) {
		/* it has no answer to refuse with: said here, or the checkpoint
		 * would name the rank without its reason and nobody know why */
		log_warn("rank %d (pid %d on %s) said UNSPLIT in protocol version %u, not %d: "
			 "ignored", rank, pid, host, version, COORD_PROTOCOL_VERSION);
		return;
	}
	log_info("rank %d (pid %d on %s) runs without a lower half: %s", rank, pid, host, line + pos);
	note_add(c, rank, size, pid, host, strcmp(kind, "late") ? NOTE_NOMPI : NOTE_LATE,
		 line + pos);
}

/* The message of a checkpoint that finds ranks of the job unregistered:
 * the counts, then what is known of each missing rank (its weightiest
 * note), ranks with the same reason together; within err.c's 512 bytes. */
static int unregistered(struct coord *c)
{
	unsigned size = c->size, shown = 0, silent = 0;
	const struct rank_note **best;
	char msg[512], *reg;
	size_t n = 0;

#define ADD(...) \
	(n += n < sizeof(msg) ? (size_t)snprintf(msg + n, sizeof(msg) - n, __VA_ARGS__) : 0)
	if (!c->nranks)
		for (unsigned i = 0; i < c->nnotes; i++)
			if (c->notes[i].size > 0 && (unsigned)c->notes[i].size > size)
				size = (unsigned)c->notes[i].size;
	if (!size)
		size = 1;
	ADD("%u of %u ranks of the job are registered", c->nranks, size);
	best = calloc(size, sizeof(*best));
	reg = calloc(size, 1);
	for (unsigned i = 0; reg && i < c->nranks; i++)
		if ((unsigned)c->ranks[i].rank < size)
			reg[c->ranks[i].rank] = 1;
	for (unsigned i = 0; best && reg && i < c->nnotes; i++) {
		const struct rank_note *o = &c->notes[i];

		if ((unsigned)o->rank < size && !reg[o->rank] &&
		    (!best[o->rank] || o->kind > best[o->rank]->kind))
			best[o->rank] = o;
	}
	for (unsigned r = 0; best && reg && r < size; r++)
		silent += !best[r] && !reg[r];
	for (unsigned r = 0; best && reg && r < size; r++) {
		const struct rank_note *o = best[r];
		unsigned k = 0;

		if (!o || n >= sizeof(msg))
			continue;
		ADD("; rank");
		for (unsigned q = r; q < size; q++) {
			const struct rank_note *p = best[q];

			if (!p || strcmp(p->why, o->why))
				continue;
			best[q] = NULL;
			if (k++ < 4)
				ADD("%s %d (pid %d on %s)", k > 1 ? "," : "", p->rank, p->pid, p->host);
			else if (k == 5)
				ADD(", ...");
		}
		ADD(": %s", o->why);
		shown++;
	}
	free(best);
	free(reg);
	if (!shown)
		ADD(" (not started yet, or ended)");
	else if (silent)
		ADD("; no word from %u other rank%s (not started yet, or ended)", silent,
		    silent > 1 ? "s" : "");
#undef ADD
	return err_set(-ENOTCONN, "%s", msg);
}

static void mig_answer(struct coord *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* RANK <rank> <size> <pid> <host> <restarts> from node agent n, for one of
 * its ranks: OK <rank> | ERR <rank> <why> */
static void register_rank(struct coord *c, struct node_conn *n, const char *line)
{
	struct rank_conn r = { .node = n->id };

	if (sscanf(line, "RANK %d %d %d %63s %u", &r.rank, &r.size, &r.pid, r.host,
		   &r.restarts) != 5) {
		reply(n->fd, "ERR -1 expected RANK <rank> <size> <pid> <host> <restarts>");
		return;
	}
	if (r.size <= 0 || r.rank < 0 || r.rank >= r.size || (c->nranks && (unsigned)r.size != c->size)) {
		reply(n->fd, "ERR %d rank %d of %d does not belong to this job of %u ranks", r.rank,
		      r.rank, r.size, c->size);
		return;
	}
	if (rank_index(c, r.rank) >= 0) {
		reply(n->fd, "ERR %d rank %d is registered already", r.rank, r.rank);
		return;
	}
	if (!c->nranks) {
		free(c->ranks);
		free(c->slot);
		c->ranks = calloc((size_t)r.size, sizeof(*c->ranks));
		c->slot = calloc((size_t)r.size, sizeof(*c->slot));
		if (!c->ranks || !c->slot) {
			reply(n->fd, "ERR %d out of memory", r.rank);
			return;
		}
		c->size = (unsigned)r.size;
	}
	c->ranks[c->nranks++] = r;
	c->slot[r.rank] = c->nranks;
	reply(n->fd, "OK %d", r.rank);
	log_info("rank %d of %d registered (pid %d on %s)", r.rank, r.size, r.pid, r.host);
	if (c->nranks == c->size) {
		c->nexpected = 0;
		for (unsigned i = 0; i < c->nranks; i++)
			host_add(c->expected, &c->nexpected, c->ranks[i].host);
	}
	if (c->standby.state == 2 && c->nranks == c->size) {
		c->standby.state = 3;
		if (c->o->interval_ms)   /* the interval runs from the restore, not the launch */
			c->next_ckpt_ms = now_ms() + c->o->interval_ms;
		log_info("stand-by: %s restored into its %u ranks in %.3f s", c->last, c->size,
			 (double)(now_ms() - c->standby.t0) / 1000.0);
		reply(c->standby.fd, "OK %s %u ranks %.3f s", c->last, c->size,
		      (double)(now_ms() - c->standby.t0) / 1000.0);
		close(c->standby.fd);
		c->standby.fd = -1;
	}
	if (c->rec.pending && c->nranks == c->size) {
		/* the recovery's one line: every rank of the relaunch is back */
		fprintf(stderr, "stasis: %s; %.1f s\n", c->rec.line,
			(double)(now_ms() - c->rec.t0) / 1000.0);
		c->rec.pending = 0;
		policy_running(c->policy);
		mig_moved_answer(c);
	}
}

/* A connection on the job's TCP port: NODE <version> <secret> <host> <pid> (a
 * node agent, which stays), or UNSPLIT (one line) */
static void accept_conn(struct coord *c)
{
	struct node_conn n = { .fd = -1 };
	char line[512], secret[128];
	unsigned version;
	int fd = accept4(c->tcp_fd, NULL, NULL, SOCK_CLOEXEC), one = 1;

	if (fd < 0)
		return;
	/* every line at once, as from the agent's end (line_connect): with
	 * Nagle's algorithm a line that follows one the agent has not answered
	 * (STREAM after WRITE, UPGRADE after RESUME) waited for its delayed
	 * ACK, about 40 ms */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (read_line(fd, line, sizeof(line), CLIENT_TIMEOUT_MS) != 0)
		line[0] = 0;
	if (!strncmp(line, "UNSPLIT ", 8)) {
		unsplit(c, line);
		close(fd);
		return;
	}
	if (sscanf(line, "NODE %u %127s %63s %d", &version, secret, n.host, &n.pid) != 4) {
		reply(fd, "ERR expected NODE <version> <secret> <host> <pid>");
		close(fd);
		return;
	}
	if (version != COORD_PROTOCOL_VERSION || !line_secret_equal(secret, c->secret)) {
		reply(fd, "ERR %s", version != COORD_PROTOCOL_VERSION ? "protocol version not supported"
								       : "wrong secret");
		close(fd);
		return;
	}
	if (c->nnodes == NODES_MAX || (!c->nodes && !(c->nodes = calloc(NODES_MAX, sizeof(*c->nodes))))) {
		reply(fd, "ERR too many node agents");
		close(fd);
		return;
	}
	n.fd = fd;
	n.id = ++c->next_node;
	n.seen = now_ms();
	c->nodes[c->nnodes] = n;
	if (node_watch(c, c->nnodes, EPOLL_CTL_ADD) != 0) {
		reply(fd, "ERR %s", strerror(errno));
		close(fd);
		return;
	}
	c->nnodes++;
	reply(fd, "OK");
	if (c->stopping)
		reply(fd, "KILL");   /* a rank of the job being stopped, late */
	host_add(c->agents, &c->nagents, n.host);
	log_info("node agent on %s (pid %d) connected", n.host, n.pid);
}

/* Every connection waiting, not one a wake-up (a launch's agents connect
 * at once), at most ACCEPT_BURST before the rest of the loop has its turn */
#define ACCEPT_BURST 64
static void accept_conns(struct coord *c)
{
	for (int i = 0; i < ACCEPT_BURST; i++) {
		struct pollfd p = { c->tcp_fd, POLLIN, 0 };

		if (poll(&p, 1, 0) <= 0)
			break;
		accept_conn(c);
	}
}

/* What a staged checkpoint reached: the agents' level (partner, rs) and the
 * global copies, "partner+global" when both; why is the agents' failure */
static void record_level(struct coord *c, unsigned i, const char *why)
{
	char level[32];
	const char *l = c->copying[i].level;

	if (l[0] && strcmp(l, "single") && strcmp(l, "local"))
		snprintf(level, sizeof(level), "%s%s", l, c->copying[i].global ? "+global" : "");
	else
		snprintf(level, sizeof(level), "%s", c->copying[i].global ? "global" : "local");
	if (store_ckpt_level(c->store, c->copying[i].name, level, why) != 0)
		log_warn("checkpoint %s: %s", c->copying[i].name, err_msg());
	else
		log_info("checkpoint %s: level %s%s%s", c->copying[i].name, level, why ? ": " : "",
			 why ? why : "");
}

/* A node's images of a staged checkpoint are in the global tier (COPIED
 * <name> <ranks>): once every rank's is, the checkpoint reaches level
 * global. */
static void copied(struct coord *c, const char *args)
{
	char name[64];
	unsigned n = 0;

	if (sscanf(args, "%63s %u", name, &n) != 2)
		return;
	for (unsigned i = 0; i < STAGED_MAX; i++) {
		if (strcmp(c->copying[i].name, name) != 0)
			continue;
		c->copying[i].copied += n;
		if (c->copying[i].copied < c->size)
			return;
		c->copying[i].global = 1;
		record_level(c, i, NULL);
		log_info("checkpoint %s: every rank's image is in the global tier", name);
		return;
	}
}

/* The node agents' level of a staged checkpoint (LEVEL <name> <level> ok|<why>,
 * from the agent of rank 0): recorded with the global copies' progress */
static void leveled(struct coord *c, const char *args)
{
	char name[64], level[16];
	int pos = 0;

	if (sscanf(args, "%63s %15s %n", name, level, &pos) != 2 || !pos)
		return;
	for (unsigned i = 0; i < STAGED_MAX; i++)
		if (!strcmp(c->copying[i].name, name)) {
			snprintf(c->copying[i].level, sizeof(c->copying[i].level), "%s", level);
			record_level(c, i, strcmp(args + pos, "ok") ? args + pos : NULL);
			return;
		}
}

/* A staged checkpoint was established: follow its copies (the oldest one
 * followed makes room; it stays at level local) */
static void staged(struct coord *c, const char *name)
{
	unsigned slot = 0;

	for (unsigned i = 0; i < STAGED_MAX; i++)
		if (!c->copying[i].name[0]) {
			slot = i;
			break;
		} else if (store_ckpt_name_cmp(c->copying[i].name, c->copying[slot].name) < 0) {
			slot = i;
		}
	snprintf(c->copying[slot].name, sizeof(c->copying[slot].name), "%s", name);
	c->copying[slot].copied = 0;
	c->copying[slot].level[0] = 0;
	c->copying[slot].global = 0;
}

static void send_nodes(struct coord *c, const char *line);

/* After RESUME (word UPGRADE): the node agents bring a staged checkpoint
 * to level partner or rs (checkpoint --level, else the configuration's
 * `level`). With WRITE (word STREAM): they send the images to the
 * partners, or encode rs parity, while the ranks write them
 * (docs/levels.md) */
static void upgrade(struct coord *c, const char *word, const char *name)
{
	const char *level = c->next_level[0] ? c->next_level : cfg_str(CFG_LEVEL);
	char line[160];

	if (strcmp(level, "partner") && strcmp(level, "rs"))
		return;
	snprintf(line, sizeof(line), "%s %s %s %llu %llu", word, name, level,
		 (unsigned long long)cfg_u64(CFG_GROUP_SIZE), (unsigned long long)cfg_u64(CFG_RS_PARITY));
	send_nodes(c, line);
}

/* RECEIVER <port> <pid> <start> | RECEIVER - <why> | RECEIVED <status>
 * [<why>] from the agent of node n, which started the migration's
 * receiver there (recv_start); a late one (the migration over) is
 * dropped */
static void receiver_said(struct coord *c, struct node_conn *n, const char *line)
{
	struct migrate_receiver *r = c->mig.rcv;
	int pos = 0;

	if (!r || !r->by_agent || r->ended || strcmp(n->host, r->host))
		return;
	if (!strncmp(line, "RECEIVER - ", 11)) {
		r->ended = 1;
		r->status = -1;
		snprintf(r->why, sizeof(r->why), "%s", line + 11);
	} else if (line[7] == 'R') {
		sscanf(line + 9, "%d %d %llu", &r->port, &r->rpid, &r->rstart);
	} else if (sscanf(line + 9, "%d %n", &r->status, &pos) >= 1) {
		r->ended = 1;
		snprintf(r->why, sizeof(r->why), "%s", pos ? line + 9 + pos : "");
	}
}

/* The client of a move into spares is answered once the moved ranks
 * registered from their spares and the source's agent removed the job's
 * directory there (nothing of the job is left on it) */
static void mig_moved_answer(struct coord *c)
{
	if (!c->mig.moved || c->rec.pending || c->mig.leaving[0])
		return;
	c->mig.moved = 0;
	/* the cut recorded FAILED (an fsync of the index on the global
	 * tier: 9 ms at load 11) once the moved ranks run: not before */
	mig_drop(c);
	mig_answer(c, "OK %s", c->rec.line);
}

/* MIGRATED <bytes> <ms> or FAILED <why> from the source's agent of a move
 * (or its end): the directory removal move_into_spares asked for */
static void source_left(struct coord *c, const char *host, const char *failed)
{
	if (!c->mig.leaving[0] || strcmp(host, c->mig.leaving))
		return;
	if (failed)
		log_warn("migration: ranks%s moved from %s, but %s", c->mig.ranks, host, failed);
	else
		log_info("migration: the source's directory removed %llu ms after the request",
			 (unsigned long long)(now_ms() - c->mig.asked_ms));
	c->mig.leaving[0] = 0;
	mig_moved_answer(c);
}

/* A line of node agent n outside a phase's answer: a registration, a
 * node's copies done, a rank that ended or died. Returns 1 for REQUEST
 * (MPIX_Checkpoint asks for a checkpoint), 2 when a rank was lost (*why
 * says which), else 0. */
static int node_line(struct coord *c, struct node_conn *n, const char *line, char *why, size_t len)
{
	int rank, pos = 0, i;

	n->seen = now_ms();
	if (!strcmp(line, "ALIVE")) {
		/* a heartbeat: n->seen is all it says */
	} else if (!strncmp(line, "RANK ", 5)) {
		register_rank(c, n, line);
	} else if (!strncmp(line, "COPIED ", 7)) {
		copied(c, line + 7);
	} else if (!strncmp(line, "LEVEL ", 6)) {
		leveled(c, line + 6);
	} else if (!strncmp(line, "GATHER ", 7)) {
		if (coord_relay_gather(n->fd, line + 7) != 0)
			log_warn("node agent on %s: bad line '%.64s'", n->host, line);
	} else if (!strncmp(line, "RECEIVER ", 9) || !strncmp(line, "RECEIVED ", 9)) {
		receiver_said(c, n, line);
	} else if (!strncmp(line, "MIGRATED ", 9) || !strncmp(line, "FAILED migration", 16)) {
		source_left(c, n->host, line[0] == 'F' ? line + 7 : NULL);
	} else if (!strcmp(line, "REQUEST")) {
		return 1;
	} else if (sscanf(line, "BYE %d", &rank) == 1) {
		/* (a rank moved into a spare says it from its old node, once
		 * out of the table: the rank of that number runs elsewhere) */
		if ((i = rank_index(c, rank)) >= 0 && c->ranks[i].node == n->id)
			rank_ended(c, (unsigned)i, NULL);
	} else if (!strncmp(line, "QUIT ", 5)) {
		rank_quit(c, line + 5);
	} else if (sscanf(line, "LOST %d %n", &rank, &pos) == 1 && pos &&
		   (i = rank_index(c, rank)) >= 0) {
		if (why)
			snprintf(why, len, "rank %d (pid %d on %s) ended during the checkpoint: %s",
				 rank, c->ranks[i].pid, c->ranks[i].host, line + pos);
		{
			char died[400];

			snprintf(died, sizeof(died), "died: %.300s", line + pos);
			rank_ended(c, (unsigned)i, died);
		}
		return 2;
	} else {
		log_warn("node agent on %s: unexpected line '%.64s'", n->host, line);
	}
	return 0;
}

static void send_nodes(struct coord *c, const char *line)
{
	for (unsigned i = 0; i < c->nnodes; i++)
		if (c->nodes[i].in_ckpt && !c->nodes[i].dead) {
			reply(c->nodes[i].fd, "%s", line);
			c->sent++;
		}
}

/* Every node agent's answer for its ranks: "<word> <n> [<n>] <ranks>"
 * (PARKED <max us> <ranks>, DONE <regions> <pages> <ranks>), or FAILED
 * <why>; a node agent that closes or stays silent, or a rank it reports
 * dead, fails the checkpoint. *max gets the largest first number, *sum the
 * sum of the second. */
static int collect_nodes(struct coord *c, const char *word, uint64_t *max, uint64_t *sum)
{
	uint64_t timeout_ms = cfg_u64(CFG_RANK_TIMEOUT) * 1000, deadline = now_ms() + timeout_ms;
	unsigned left = 0, nn = c->nnodes;
	char *done = calloc(nn ? nn : 1, 1);
	size_t wl = strlen(word);
	int ret = 0, ep = epoll_create1(EPOLL_CLOEXEC);

	/* the agents yet to answer, an epoll set of their own: each wake-up
	 * brings the ones with something to say (a poll of every agent for
	 * each answer made a checkpoint quadratic in nodes, bench/scale) */
	if (!done || ep < 0) {
		free(done);
		if (ep >= 0)
			close(ep);
		return err_set(-ENOMEM, "checkpoint: %s", strerror(done ? errno : ENOMEM));
	}
	for (unsigned i = 0; i < nn; i++) {
		struct epoll_event e = { .events = EPOLLIN, .data.u32 = i };

		done[i] = !c->nodes[i].in_ckpt || c->nodes[i].dead;
		if (!done[i] && epoll_ctl(ep, EPOLL_CTL_ADD, c->nodes[i].fd, &e) != 0) {
			if (!ret)
				ret = err_set(-errno, "checkpoint: epoll: %s", strerror(errno));
			done[i] = 1;
		}
		left += !done[i];
	}
	while (left) {
		struct epoll_event ev[64];
		uint64_t t = now_ms();
		int n;

		int wait = t < deadline ? (int)(deadline - t) : 0;

		if (c->hb_timeout_ms && wait > HB_CHECK_MS)
			wait = HB_CHECK_MS;
		n = epoll_wait(ep, ev, 64, wait);
		if (n < 0 && errno == EINTR)
			continue;
		if (n == 0 && now_ms() < deadline) {
			/* heartbeats: a node that fell silent is lost, not slow */
			for (unsigned i = 0; i < nn; i++) {
				struct node_conn *nd = &c->nodes[i];
				char ranks[200];

				if (done[i] || now_ms() - nd->seen <= c->hb_timeout_ms)
					continue;
				node_ranks(c, nd, ranks, sizeof(ranks));
				if (!ret)
					ret = err_set(-EHOSTDOWN, "the node agent on %s (pid %d; ranks %s) "
						      "fell silent during the checkpoint: no heartbeat for "
						      "%llu ms", nd->host, nd->pid, ranks,
						      (unsigned long long)(now_ms() - nd->seen));
				nd->dead = nd->silent = 1;
				epoll_ctl(ep, EPOLL_CTL_DEL, nd->fd, NULL);
				done[i] = 1;
				left--;
			}
			continue;
		}
		if (n <= 0) {
			for (unsigned i = 0; i < nn && !ret; i++)
				if (!done[i]) {
					char ranks[200];

					node_ranks(c, &c->nodes[i], ranks, sizeof(ranks));
					ret = err_set(-ETIMEDOUT, "the node agent on %s (ranks %s) did not "
						      "answer within %llu s", c->nodes[i].host, ranks,
						      (unsigned long long)timeout_ms / 1000);
				}
			break;
		}
		for (int k = 0; k < n; k++) {
			unsigned i = ev[k].data.u32;
			struct node_conn *nd = &c->nodes[i];
			int answered = 0;

			/* every line the agent has sent, up to its answer */
			do {
				char line[512], why[400];
				unsigned long long a = 0, b = 0;
				int rl = read_line(nd->fd, line, sizeof(line), CLIENT_TIMEOUT_MS);

				if (rl == 0 && strcmp(line, "ALIVE"))
					c->received++;
				answered = 1;
				if (rl != 0) {
					char ranks[200];

					node_ranks(c, nd, ranks, sizeof(ranks));
					if (!ret)
						ret = err_set(-EPIPE, "the node agent on %s (pid %d; ranks %s) "
							      "ended during the checkpoint", nd->host, nd->pid,
							      ranks);
					nd->dead = 1;
				} else if (!strncmp(line, word, wl) && line[wl] == ' ' &&
					   sscanf(line + wl, "%llu %llu", &a, &b) >= 1) {
					if (a > *max)
						*max = a;
					*sum += b;
				} else if (!strncmp(line, "FAILED ", 7)) {
					if (!ret)
						ret = err_set(-EIO, "%s", line + 7);
				} else {
					if (node_line(c, nd, line, why, sizeof(why)) == 2 && !ret)
						ret = err_set(-EPIPE, "%s", why);
					answered = 0;   /* its answer is still to come */
				}
			} while (!answered && line_waiting(nd->fd));
			if (!answered)
				continue;
			epoll_ctl(ep, EPOLL_CTL_DEL, nd->fd, NULL);
			done[i] = 1;
			left--;
		}
	}
	close(ep);
	free(done);
	return ret;
}

/* Node agents that closed during a checkpoint go, their ranks with them */
static void reap_nodes(struct coord *c)
{
	for (unsigned i = c->nnodes; i-- > 0;)
		if (c->nodes[i].dead)
			node_gone(c, i);
}

static int node_on(struct coord *c, const char *host);

/* The receiver of a migration to host `to`, taking `sources` streams:
 * into spares, started by to's node agent, there already (RECEIVE: no
 * remote shell's start on the way, 17-30 ms of a move's), else through
 * migrate_shell (a relaunch's target has no agent) */
static int recv_start(struct coord *c, const char *to, unsigned sources, int into,
		      struct migrate_receiver *r)
{
	int t = into ? node_on(c, to) : -1;

	if (t < 0)
		return migrate_receiver_start(to, job_lh_dir(), c->dir, sources, r);
	*r = (struct migrate_receiver){ .pid = -1, .out = -1, .by_agent = 1 };
	snprintf(r->host, sizeof(r->host), "%s", to);
	reply(c->nodes[t].fd, "RECEIVE %u", sources);
	return 0;
}

/* The lines of the receiver's node agent (only), until its port is known
 * (port) or it ended, at most timeout_ms */
static int recv_wait(struct coord *c, struct migrate_receiver *r, int port, int timeout_ms)
{
	uint64_t end = now_ms() + (uint64_t)timeout_ms;

	while (!r->ended && (!port || r->port <= 0)) {
		int t = node_on(c, r->host);
		uint64_t now = now_ms();
		struct pollfd p;
		char line[512];

		if (t < 0)
			return err_set(-EHOSTDOWN, "the node agent on %s went away", r->host);
		if (now >= end)
			return err_set(-ETIMEDOUT, "the receiver on %s did not %s within %d s", r->host,
				       port ? "start" : "end", timeout_ms / 1000);
		p = (struct pollfd){ c->nodes[t].fd, POLLIN, 0 };
		if (poll(&p, 1, (int)(end - now)) <= 0)
			continue;
		if (read_line(p.fd, line, sizeof(line), CLIENT_TIMEOUT_MS) != 0) {
			c->nodes[t].dead = 1;   /* reaped by the caller's reap_nodes */
			return err_set(-EHOSTDOWN, "the node agent on %s went away", r->host);
		}
		node_line(c, &c->nodes[t], line, NULL, 0);
	}
	return 0;
}

/* Wait for the receiver's port; on failure it is ended */
static int recv_port(struct coord *c, struct migrate_receiver *r)
{
	int ret;

	if (!r->by_agent)
		return r->port > 0 ? 0 : migrate_receiver_port(r->host, r);
	ret = recv_wait(c, r, 1, 30000);
	if (!ret && r->port <= 0)
		ret = err_set(-EHOSTUNREACH, "the receiver on %s did not start: %s", r->host,
			      r->why[0] ? r->why : "it ended");
	return ret;
}

static void recv_cancel(struct coord *c, struct migrate_receiver *r);

/* Wait for the receiver's end (timeout_ms; then it is cancelled, killed
 * if it does not end): 0 when it received and checked every image */
static int recv_end(struct coord *c, struct migrate_receiver *r, int timeout_ms)
{
	if (!r->by_agent)
		return migrate_receiver_end(r, timeout_ms);
	if (recv_wait(c, r, 0, timeout_ms) != 0)
		recv_cancel(c, r);
	return r->ended && r->status == 0 ? 0 : -EIO;
}

/* Cancel the receiver (the migration stopped before its end): it is
 * asked to end and waited for; its agent kills it after 5 s */
static void recv_cancel(struct coord *c, struct migrate_receiver *r)
{
	int t;

	if (!r->by_agent) {
		migrate_receiver_cancel(r->host, r);
		return;
	}
	if (r->ended || (t = node_on(c, r->host)) < 0)
		return;
	reply(c->nodes[t].fd, "RECEIVE cancel");
	if (recv_wait(c, r, 0, 7000) != 0)
		log_warn("migration: the receiver on %s: %s", r->host, err_msg());
}

/* Some rank the job still lacks died, or went with its node agent: no
 * use waiting for it */
static int missing_died(struct coord *c)
{
	for (unsigned i = 0; i < c->nnotes; i++)
		if (c->notes[i].kind == NOTE_DIED && rank_index(c, c->notes[i].rank) < 0)
			return 1;
	return 0;
}

/* Every rank the job still lacks said it runs without a lower half
 * (UNSPLIT), the last of them NOTE_SETTLE_MS ago or more: a wrapper that
 * execs the program has done so by then, so no use waiting the whole
 * HELLO_TIMEOUT_MS for it. Only with the job's size known. */
static int missing_settled(struct coord *c)
{
	unsigned size = c->size, missing, said = 0;
	uint64_t last = 0;
	char *seen;

	for (unsigned i = 0; i < c->nnotes; i++)
		if (c->notes[i].size > 0 && (unsigned)c->notes[i].size > size)
			size = (unsigned)c->notes[i].size;
	missing = size - (c->nranks < size ? c->nranks : size);
	if (!missing || missing > c->nnotes || !(seen = calloc(size, 1)))
		return 0;
	for (unsigned i = 0; i < c->nnotes; i++) {
		const struct rank_note *o = &c->notes[i];

		if ((o->kind != NOTE_NOMPI && o->kind != NOTE_LATE) || o->rank < 0 ||
		    (unsigned)o->rank >= size || rank_index(c, o->rank) >= 0)
			continue;
		said += !seen[o->rank];
		seen[o->rank] = 1;
		last = o->at_ms > last ? o->at_ms : last;
	}
	free(seen);
	return said == missing && now_ms() - last >= NOTE_SETTLE_MS;
}

/* The lines of the node agents with something to say, outside a
 * checkpoint: registrations, copies done, ranks that ended or died. Every
 * line an agent has sent, not one a wake-up. Returns the index of an agent
 * that said REQUEST (MPIX_Checkpoint asks for a checkpoint), else -1. Stops
 * at an agent gone (the array changed); the rest, level-triggered, come
 * at the next call. */
static int node_events(struct coord *c)
{
	struct epoll_event ev[64];
	int n = epoll_wait(c->node_ep, ev, 64, 0);

	for (int k = 0; k < n; k++) {
		unsigned i = (unsigned)((struct node_conn *)ev[k].data.ptr - c->nodes);
		char line[512];
		int said = 0, gone, fd = c->nodes[i].fd, cork = 1;

		/* the answers to the lines read here (OK <rank> to each RANK) in
		 * as few segments as fit: TCP_NODELAY sends each write at once,
		 * which cost a fifth more of the coordinator's CPU at 20,480
		 * ranks' registration */
		setsockopt(fd, IPPROTO_TCP, TCP_CORK, &cork, sizeof(cork));
		do {
			gone = read_line(fd, line, sizeof(line), CLIENT_TIMEOUT_MS) != 0;
			said = gone ? 0 : node_line(c, &c->nodes[i], line, NULL, 0);
		} while (!gone && said != 1 && line_waiting(fd));
		cork = 0;
		setsockopt(fd, IPPROTO_TCP, TCP_CORK, &cork, sizeof(cork));
		if (gone) {
			node_gone(c, i);
			return -1;
		}
		if (said == 1)
			return (int)i;
	}
	return -1;
}

/* One round of the node agents' traffic outside a checkpoint (new
 * connections, registrations, ends), for at most timeout_ms. Returns 1
 * when a node agent said REQUEST. */
static int serve_nodes(struct coord *c, int timeout_ms)
{
	struct pollfd p[2] = { { c->tcp_fd, POLLIN, 0 }, { c->node_ep, POLLIN, 0 } };
	int request = 0;

	if (poll(p, 2, timeout_ms) <= 0)
		return 0;
	if (p[1].revents)
		request = node_events(c) >= 0;
	if (p[0].revents)
		accept_conns(c);
	return request;
}

/* Which node agents take part: those with a registered rank. Ranks, then
 * nodes (a scan of the ranks for each node was 5% of the coordinator's
 * checkpoint at 65,536 ranks on 1,024 nodes) */
static int nodes_with_ranks(struct coord *c)
{
	char *has = calloc((size_t)c->next_node + 1, 1);

	if (!has)
		return err_set(-ENOMEM, "out of memory");
	for (unsigned k = 0; k < c->nranks; k++)
		if (c->ranks[k].node > 0 && c->ranks[k].node <= c->next_node)
			has[c->ranks[k].node] = 1;
	for (unsigned i = 0; i < c->nnodes; i++)
		c->nodes[i].in_ckpt = has[c->nodes[i].id];
	free(has);
	return 0;
}

static int job_checkpoint(struct coord *c, int stop, char *name, size_t len)
{
	struct store_ckpt *ck = NULL;
	uint64_t pages = 0, parked_us = 0, t0 = 0, ignored = 0, t_write = 0, t_parked = 0;
	int ret, files = 0;

	/* ranks still starting (or restarting) are waited for, not those that
	 * died */
	for (uint64_t end = now_ms() + HELLO_TIMEOUT_MS;
	     (!c->nranks || c->nranks < c->size) && !missing_died(c) && !missing_settled(c);) {
		uint64_t t = now_ms();

		if (t >= end)
			break;
		/* a REQUEST: this checkpoint answers it; back within a second to
		 * see whether the missing ranks have settled */
		serve_nodes(c, (int)(end - t < 1000 ? end - t : 1000));
	}
	if (!c->nranks || c->nranks < c->size)
		return unregistered(c);
	c->sent = c->received = 0;
	ret = nodes_with_ranks(c);
	if (ret)
		return ret;
	ret = store_ckpt_begin(c->store, &ck);
	if (ret)
		return ret;
	snprintf(name, len, "%s", store_ckpt_name(ck));
	{
		char line[128];
		int lret;

		snprintf(line, sizeof(line), "CHECKPOINT %s", name);
		/* two phases: every rank stopped, then every rank written */
		t0 = now_ms();
		send_nodes(c, line);
		/* the launch record while the ranks park: its fsyncs on the
		 * global tier were the cut's wait before it began. A move's cut
		 * has one only once it becomes a checkpoint (mig_complete): the
		 * ranks parked before it was written (6-9 ms at load 8) */
		lret = c->mig.only ? 0 : job_launch_write(ck, c->launch);
		ret = collect_nodes(c, "PARKED", &parked_us, &ignored);
		t_parked = now_ms();
		ret = ret ? ret : lret;
		if (!ret) {
			char write[sizeof(c->mig.ranks) + 100] = "WRITE";

			if (c->mig.recv)
				ret = recv_port(c, c->mig.recv);
			if (c->mig.recv && !ret)
				snprintf(write, sizeof(write), "WRITE ONLY%s TO %s:%d", c->mig.only,
					 c->mig.recv_host, c->mig.recv->port);
			else if (c->mig.only)
				snprintf(write, sizeof(write), "WRITE ONLY%s", c->mig.only);
			t_write = now_ms();
			/* STREAM before WRITE: an agent counts the stream's members
			 * busy before WRITE hands its movers the images, so their
			 * global copies wait for the level instead of reading and
			 * CRCing each image beside the stream (they did on 2 of 4
			 * nodes when STREAM came second) */
			if (!stop && c->staged)
				upgrade(c, "STREAM", name);
			if (!ret)
				send_nodes(c, write);
			/* while the ranks write: what a restart reads ahead (a
			 * restart without it reads the files when it needs them);
			 * a move's cut, as its launch record: its CPU and I/O
			 * (24 ms at load 8) were beside the moving ranks' streams */
			files = !c->mig.only && job_files_write(ck, (int)c->child) == 0;
			if (!files && !c->mig.only)
				log_warn("checkpoint %s: the job's file list: %s", name, err_msg());
			ret = ret ? ret : collect_nodes(c, "DONE", &ignored, &pages);
		}
	}
	if (!ret && c->mig.only) {
		c->mig.streamed_bytes = pages * 4096;
		c->mig.streamed_ms = now_ms() - t_write;
		/* the moving ranks' images only: held for mig_complete or mig_drop;
		 * the phases in ms from the request: the cut asked, every rank
		 * parked, the receiver's port known, the moving ranks' DONE */
		log_info("migration: the moving ranks parked and written, the others parked, after "
			 "%llu ms (phases: asked %llu, parked %llu, port %llu, written %llu)",
			 (unsigned long long)(now_ms() - t0),
			 (unsigned long long)(t0 - c->mig.asked_ms),
			 (unsigned long long)(t_parked - c->mig.asked_ms),
			 (unsigned long long)(t_write - c->mig.asked_ms),
			 (unsigned long long)(now_ms() - c->mig.asked_ms));
		c->mig.held = ck;
		reap_nodes(c);
		return 0;
	}
	/* staged: the images are on the nodes, the launch record and the file
	 * list here; established at level local */
	ret = seal(c, ck, ret, c->staged ? 1 + (unsigned)files : c->size + 1 + (unsigned)files);
	if (!ret && c->staged) {
		if (store_ckpt_level(c->store, name, "local", NULL) == 0)
			staged(c, name);
		else
			log_warn("checkpoint %s: %s", name, err_msg());
	}
	store_ckpt_free(&ck);
	/* ranks wait parked for this verdict: all resume together */
	/* stop 2 (a migration): the ranks stay parked, the caller decides */
	if (stop != 2 || ret)
		send_nodes(c, stop && !ret ? "EXIT" : ret ? "RESUME failed" : "RESUME");
	if (!ret && !stop && c->staged)
		upgrade(c, "UPGRADE", name);
	if (!ret) {
		unsigned nodes = 0;

		for (unsigned i = 0; i < c->nnodes; i++)
			nodes += c->nodes[i].in_ckpt;
		/* coordination: until the slowest rank had its program stopped;
		 * the messages grow with the nodes, not the ranks */
		log_info("checkpoint %s: %u ranks on %u nodes, %llu pages, coordination %.1f ms, "
			 "established after %llu ms, messages to node agents %u, from them %u",
			 name, c->nranks, nodes, (unsigned long long)pages, (double)parked_us / 1000.0,
			 (unsigned long long)(now_ms() - t0), c->sent, c->received);
	}
	reap_nodes(c);
	if (!ret)
		c->last_bytes = pages * 4096;
	if (stop == 1 && !ret)
		c->stopped = 1;
	if (c->o->interval_ms)
		c->next_ckpt_ms = now_ms() + c->o->interval_ms;
	return ret;
}

/* ranks=<rank>:<pid>@<host>,... nodes=<host>:<agent pid>,...
 * lost=<rank>:<pid>@<host>,... (ranks that died, alone or with their
 * node agent, and did not register again); "-" for none */
static int job_status(struct coord *c, char *out, size_t len)
{
	size_t n = 0, k;

#define ADD(...) (n += n < len ? (size_t)snprintf(out + n, len - n, __VA_ARGS__) : 0)
	/* each list within its third of out, a cut one ending in ",...": the
	 * ranks of a large job filled it all, and nodes= and lost= read "-"
	 * (bench/scale) */
	unsigned i;

	ADD("ranks=");
	k = n;
	for (i = 0; i < c->nranks && n + 80 < len / 3; i++)
		ADD("%s%d:%d@%s", i ? "," : "", c->ranks[i].rank, c->ranks[i].pid, c->ranks[i].host);
	if (i < c->nranks)
		ADD("%s...", n > k ? "," : "");
	if (n == k)
		ADD("-");
	ADD(" nodes=");
	k = n;
	for (i = 0; i < c->nnodes && n + 80 < 2 * len / 3; i++)
		ADD("%s%s:%d", i ? "," : "", c->nodes[i].host, c->nodes[i].pid);
	if (i < c->nnodes)
		ADD("%s...", n > k ? "," : "");
	if (n == k)
		ADD("-");
	ADD(" lost=");
	k = n;
	for (i = 0; i < c->nnotes; i++) {
		if (c->notes[i].kind != NOTE_DIED || rank_index(c, c->notes[i].rank) >= 0)
			continue;
		if (n + 80 >= len) {
			ADD("%s...", n > k ? "," : "");
			break;
		}
		ADD("%s%d:%d@%s", n > k ? "," : "", c->notes[i].rank, c->notes[i].pid,
		    c->notes[i].host);
	}
	if (n == k)
		ADD("-");
#undef ADD
	return 0;
}


/* One program under its agent, with the children it forks (proc/tree.c):
 * an image per process, the first one's IMAGE_NAME, the others'
 * process.<pid>.img, and the tree's description (TREE_NAME).
 *
 * Each file commits as soon as its dump ended, on the thread that read it
 * and beside the others (fsync, rename, fsync of the directory:
 * store_file_commit_unrecorded), and its record waits in recs; the seal
 * appends them all in one FILES record, then COMPLETE. One file committed
 * after another, with a FILE record each, held the last dump's end for
 * three fsyncs per process: 0.17 s of a 0.93 s checkpoint of 8 processes
 * (docs/transparent.md, "Process trees"). Nothing is established before
 * the seal, which counts only recorded files, so every guarantee of one
 * file at a time holds. */
struct tree_sink {
	struct coord *c;
	struct store_ckpt *ck;
	pthread_mutex_t lock;                   /* recs, nrecs, cap */
	struct store_file_record *recs;         /* committed files, not yet recorded */
	unsigned nrecs, cap;
};

/* One file per process: open is called one at a time, close from the
 * threads that read the processes' dumps at once (proc/tree.c). With
 * several at once, those threads are the parallelism: a writer's own
 * workers would only add a copy of every chunk and thread switches on the
 * same CPUs (with none, a whole chunk goes from the reader's buffer to the
 * file), so each writer checksums inline. */
static int sink_open(void *arg, pid_t pid, int root, unsigned at_once, void **file,
		     struct img_writer **w)
{
	struct tree_sink *k = arg;
	struct img_writer_opts opts;
	char name[64], num[32];
	int ret;

	if (root)
		snprintf(name, sizeof(name), "%s", IMAGE_NAME);
	else
		snprintf(name, sizeof(name), "process.%d.img", (int)pid);
	img_writer_opts_default(&opts);
	if (at_once > 1)
		opts.threads = 0;
	ret = store_file_create(k->ck, name, (struct store_file **)file);
	if (!ret)
		ret = img_writer_create(store_file_write, *file, &opts, w);
	/* the file's CRC from the chunks' own, not a second pass over them */
	if (!ret)
		img_writer_sink_crc(*w, store_file_write_crc);
	if (!ret)
		ret = img_writer_meta(*w, "producer", "stasis proc");
	if (!ret)
		ret = img_writer_meta(*w, "job", k->c->o->job);
	if (!ret) {
		snprintf(num, sizeof(num), "%d", (int)pid);
		ret = img_writer_meta(*w, "pid", num);
	}
	return ret;
}

/* Commit f without its record and keep the record for the seal. */
static int sink_commit(struct tree_sink *k, struct store_file *f)
{
	struct store_file_record rec;
	int ret = store_file_commit_unrecorded(f, &rec);

	if (ret)
		return ret;
	pthread_mutex_lock(&k->lock);
	if (k->nrecs == k->cap) {
		unsigned cap = k->cap ? 2 * k->cap : 16;
		void *p = realloc(k->recs, cap * sizeof(*k->recs));

		if (p) {
			k->recs = p;
			k->cap = cap;
		}
	}
	if (k->nrecs < k->cap)
		k->recs[k->nrecs++] = rec;
	else
		ret = err_set(-ENOMEM, "out of memory");
	pthread_mutex_unlock(&k->lock);
	return ret;
}

static int sink_close(void *arg, void *file, struct img_writer *w, int ret)
{
	struct tree_sink *k = arg;
	struct store_file *f = file;

	if (!ret)
		ret = img_writer_finish(w, NULL);
	if (!ret)
		ret = sink_commit(k, f);
	img_writer_free(&w);
	store_file_free(&f);
	return ret;
}

static int sink_tree(void *arg, const char *text, size_t len)
{
	struct tree_sink *k = arg;
	struct store_file *f = NULL;
	int ret = store_file_create(k->ck, TREE_NAME, &f);

	if (!ret)
		ret = store_file_write(f, text, len);
	if (!ret)
		ret = sink_commit(k, f);
	store_file_free(&f);
	return ret;
}

static int sink_done(void *arg, int ret)
{
	struct tree_sink *k = arg;

	if (!ret && k->nrecs)
		ret = store_ckpt_record_files(k->ck, k->recs, k->nrecs);
	return seal(k->c, k->ck, ret, k->nrecs);
}

static int process_checkpoint(struct coord *c, int stop, char *name, size_t len)
{
	struct tree_sink k = { .c = c };
	struct proc_tree_sink s = { &k, sink_open, sink_close, sink_tree, sink_done };
	struct proc_tree_info info;
	int ret;

	if (!proc_tree_size(c->tree))
		return err_set(-ENOTCONN, "the program has no Stasis agent (it ended, or was not "
			       "started under `stasis run`)");
	ret = store_ckpt_begin(c->store, &k.ck);
	if (ret)
		return ret;
	pthread_mutex_init(&k.lock, NULL);
	snprintf(name, len, "%s", store_ckpt_name(k.ck));
	/* every process waits for the verdict (sink_done: sealed, or marked
	 * FAILED); a failed checkpoint never stops the program */
	ret = proc_tree_checkpoint(c->tree, &s, stop, &info);
	if (!ret)
		log_info("checkpoint %s: %u processes, %u threads, %u regions, %llu bytes of pages",
			 name, info.processes, info.threads, info.regions,
			 (unsigned long long)info.stored_bytes);
	if (stop && !ret)
		c->stopped = 1;
	pthread_mutex_destroy(&k.lock);
	free(k.recs);
	store_ckpt_free(&k.ck);
	if (c->o->interval_ms)
		c->next_ckpt_ms = now_ms() + c->o->interval_ms;
	return ret;
}

static void process_status(struct coord *c, char *out, size_t len)
{
	snprintf(out, len, "job=%s pid=%d agent=%s checkpoints=%u last=%s", c->o->job, (int)c->pid,
		 proc_tree_size(c->tree) ? "yes" : "no", c->taken, c->last[0] ? c->last : "-");
}

static int standby_ready(struct coord *c);

static void mpi_status(struct coord *c, char *out, size_t len)
{
	static const char *const states[] = { "", "waiting", "restoring", "restored" };
	char ranks[900], sb[100] = "";

	job_status(c, ranks, sizeof(ranks));
	/* a stand-by: standby=waiting:<ranks past MPI_Init>, lost:<host>, restoring, restored */
	if (c->standby.state == 1 && c->standby.lost[0])
		snprintf(sb, sizeof(sb), " standby=lost:%.63s", c->standby.lost);
	else if (c->standby.state == 1)
		snprintf(sb, sizeof(sb), " standby=waiting:%d", standby_ready(c));
	else if (c->standby.state)
		snprintf(sb, sizeof(sb), " standby=%s", states[c->standby.state & 3]);
	snprintf(out, len, "job=%s launcher=%d ranks=%u/%u checkpoints=%u last=%s%s %s", c->o->job,
		 (int)c->pid, c->nranks, c->size, c->taken, c->last[0] ? c->last : "-", sb, ranks);
}

static int mpi_relaunch(struct coord *c, const char *dir);

static const struct target_ops process_target = {
	.name = "process", .checkpoint = process_checkpoint, .status = process_status,
};
static const struct target_ops mpi_target = {
	.name = "mpi-job", .checkpoint = job_checkpoint, .status = mpi_status,
	.relaunch = mpi_relaunch,
};

static int checkpoint(struct coord *c, int stop, char *name, size_t len)
{
	err_clear();
	if (c->standby.state == 1)   /* not the 30 s wait for ranks that register later */
		return err_set(-EAGAIN, "job %s is a stand-by: nothing to checkpoint before a "
			       "restore", c->o->job);
	return c->target->checkpoint(c, stop, name, len);
}

/* ---- clients ---- */

static int read_line(int fd, char *buf, size_t len, int timeout_ms)
{
	size_t n = 0;

	while (n + 1 < len) {
		struct pollfd p = { fd, POLLIN, 0 };
		ssize_t r;
		char *nl;

		if (poll(&p, 1, timeout_ms) <= 0)
			return -ETIMEDOUT;
		/* what has come, read up to the line's end and no further (a byte
		 * a read took two system calls a byte) */
		buf[n] = 0;
		r = recv(fd, buf + n, len - 1 - n, MSG_PEEK);
		if (r < 0 && errno == ENOTSOCK)
			r = 1;   /* not a socket: a byte at a time */
		if (r <= 0)
			return -EPIPE;
		nl = memchr(buf + n, '\n', (size_t)r);
		r = read(fd, buf + n, nl ? (size_t)(nl - (buf + n)) + 1 : (size_t)r);
		if (r <= 0)
			return -EPIPE;
		n += (size_t)r;
		if (buf[n - 1] == '\n') {
			buf[n - 1] = 0;
			return 0;
		}
	}
	return -E2BIG;
}

/* fd has more to read now */
static int line_waiting(int fd)
{
	char b;

	return recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 1;
}

static void reply(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void reply(int fd, const char *fmt, ...)
{
	char buf[1024];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = line_vformat(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if (write(fd, buf, (size_t)n) < 0) {
		/* the client went away; nothing to tell it */
	}
}

static int redundancy_level(const char *level)
{
	return !strcmp(level, "single") || !strcmp(level, "partner") || !strcmp(level, "rs") ||
	       !strcmp(level, "global");
}

static int migrate_asked(struct coord *c, char *line, char *err, size_t len);

static void read_ahead(struct coord *c, const char *dir);

/* The stand-by's rank count, once rank 0 said every rank is past
 * MPI_Init (lh_standby.c); 0 before */
static int standby_ready(struct coord *c)
{
	char path[PATH_MAX], buf[32] = "";
	int fd, n = 0;

	snprintf(path, sizeof(path), "%s/" JOBENV_STANDBY_READY_FILE, c->dir);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	if (read(fd, buf, sizeof(buf) - 1) > 0)
		n = atoi(buf);
	close(fd);
	return n;
}

/* The stand-by's word that its ranks are ready is stale once they leave
 * the wait (a restore, a relaunch, the stand-by's end) */
static void standby_unready(struct coord *c)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/" JOBENV_STANDBY_READY_FILE, c->dir);
	unlink(path);
}

/* A checkpoint a stand-by of ready ranks can restore: COMPLETE in the
 * index, with as many ranks' images recorded there (none recorded: a
 * staged one's are in its nodes' indexes; its stored launcher command
 * then gives the count, when it does); -1 with why */
static int standby_usable(struct coord *c, const char *name, int ready, char *why, size_t len)
{
	struct store_ckpt_info *list = NULL;
	struct store_file_info *files = NULL;
	size_t n = 0, nf = 0, i = 0;
	char **argv = NULL;
	int images = 0, ret = -1;
	unsigned r;

	if (store_list(c->store, &list, &n, NULL) == 0)
		for (i = 0; i < n && strcmp(list[i].name, name); i++)
			;
	if (!list || i == n) {
		snprintf(why, len, "no checkpoint %s in job %s", name, c->o->job);
	} else if (list[i].state != STORE_COMPLETE) {
		snprintf(why, len, "%s of job %s %s%s%s%s: restore an established checkpoint "
			 "(stasis ls)", name, c->o->job, list[i].state == STORE_FAILED ? "failed" :
			 "was never established", list[i].reason[0] ? " (" : "", list[i].reason,
			 list[i].reason[0] ? ")" : "");
	} else if (store_ckpt_files(c->store, name, &files, &nf) != 0 ||
		   job_launch_read(c->store, name, NULL, &argv) != 0) {
		snprintf(why, len, "%s is no MPI job's checkpoint of job %s", name, c->o->job);
	} else {
		for (i = 0; i < nf; i++)
			if (strlen(files[i].name) == 14 && sscanf(files[i].name, "rank-%5u.img", &r) == 1)
				images++;
		if (!images)
			images = job_launch_ranks(argv);
		if (images > 0 && images != ready)
			snprintf(why, len, "%s has %d ranks, the stand-by %d: start one with as many",
				 name, images, ready);
		else
			ret = 0;
	}
	free(argv);
	free(files);
	free(list);
	return ret;
}

/* RESTORE <checkpoint>: the stand-by's ranks told to restore it (the
 * checkpoint's directory written aside, renamed in); -1 with why */
static int standby_restore(struct coord *c, const char *name, char *why, size_t len)
{
	char path[PATH_MAX], go[PATH_MAX], tmp[PATH_MAX + 8];
	int ready = standby_ready(c), fd, n;

	if (c->standby.state != 1)
		return snprintf(why, len, c->standby.state ? "the stand-by restored %s already" :
				"job %s is no stand-by (`stasis standby`)", c->standby.state ? c->last :
				c->o->job), -1;
	if (c->standby.lost[0])
		return snprintf(why, len, "the stand-by lost its node agent on %s before a restore: "
				"end it and start another", c->standby.lost), -1;
	if (c->nranks)
		return snprintf(why, len, "the stand-by's ranks run already (%u registered): it "
				"restores nothing", c->nranks), -1;
	if (!ready)
		return snprintf(why, len, "not ready: the stand-by's ranks are not all past "
				"MPI_Init yet"), -1;
	if (standby_usable(c, name, ready, why, len) != 0)
		return -1;
	if (store_ckpt_path(c->store, name, NULL, path, sizeof(path)) != 0)
		return snprintf(why, len, "no checkpoint %s in job %s", name, c->o->job), -1;
	snprintf(go, sizeof(go), "%s/" JOBENV_STANDBY_GO_FILE, c->dir);
	snprintf(tmp, sizeof(tmp), "%s.tmp", go);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	n = fd < 0 ? -1 : dprintf(fd, "%s\n", path);
	if (fd < 0 || n != (int)strlen(path) + 1 || close(fd) != 0 || rename(tmp, go) != 0)
		return snprintf(why, len, "cannot write %s: %s", go, strerror(errno)), -1;
	log_info("stand-by: restoring %s into %d ranks", name, ready);
	standby_unready(c);
	c->standby.state = 2;
	c->standby.t0 = now_ms();
	snprintf(c->last, sizeof(c->last), "%.63s", name);
	read_ahead(c, path);
	return 0;
}

static void serve_client(struct coord *c)
{
	char line[256], name[64];
	unsigned version = 0;
	char secret[128] = "";
	int fd = accept4(c->listen_fd, NULL, NULL, SOCK_CLOEXEC);

	if (fd < 0)
		return;
	reply(fd, "STASIS-COORD %d", COORD_PROTOCOL_VERSION);
	if (read_line(fd, line, sizeof(line), CLIENT_TIMEOUT_MS) != 0)
		goto out;
	if (sscanf(line, "HELLO %u %127s", &version, secret) != 2) {
		reply(fd, "ERR expected HELLO <version> <secret>");
		goto out;
	}
	if (version != COORD_PROTOCOL_VERSION) {
		reply(fd, "ERR protocol version %u not supported (this coordinator speaks %d)",
		      version, COORD_PROTOCOL_VERSION);
		goto out;
	}
	if (!line_secret_equal(secret, c->secret)) {
		reply(fd, "ERR wrong secret");
		goto out;
	}
	reply(fd, "OK");
	if (read_line(fd, line, sizeof(line), CLIENT_TIMEOUT_MS) != 0)
		goto out;
	c->next_level[0] = 0;
	if (!strncmp(line, "CHECKPOINT ", 11) && strstr(line, " level=")) {
		char *lv = strstr(line, " level=");

		/* CHECKPOINT [stop] level=<level> */
		snprintf(c->next_level, sizeof(c->next_level), "%.15s", lv + 7);
		*lv = 0;
		if (!redundancy_level(c->next_level)) {
			reply(fd, "ERR checkpoint failed: unknown level '%s' (single, partner, rs, "
			      "global)", c->next_level);
			goto out;
		}
	}
	if (strcmp(line, "CHECKPOINT") == 0 || strcmp(line, "CHECKPOINT stop") == 0) {
		int stop = line[10] != 0;

		if (checkpoint(c, stop, name, sizeof(name)) == 0)
			reply(fd, "OK %s", name);
		else
			reply(fd, "ERR checkpoint failed: %s", err_msg());
	} else if (!strncmp(line, "MIGRATE ", 8) || !strncmp(line, "PREDICT ", 8)) {
		char err[300];

		/* answered when carried out (decide) */
		if (migrate_asked(c, line, err, sizeof(err)) != 0) {
			reply(fd, "ERR %s", err);
		} else {
			c->mig.fd = fd;
			fd = -1;
		}
	} else if (!strncmp(line, "RESTORE ", 8)) {
		char err[PATH_MAX + 200];

		/* answered once every rank runs (register_rank) */
		if (standby_restore(c, line + 8, err, sizeof(err)) != 0) {
			reply(fd, "ERR %s", err);
		} else {
			c->standby.fd = fd;
			fd = -1;
		}
	} else if (strcmp(line, "STATUS") == 0) {
		char status[1000];

		c->target->status(c, status, sizeof(status));
		reply(fd, "OK %s", status);
	} else {
		reply(fd, "ERR unknown request '%.64s'", line);
	}
out:
	if (fd >= 0)
		close(fd);
}

/* ---- the loop ---- */

static int exit_code(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return 1;
}

/* ---- failures: stopping, recovering (policy.h) ---- */

/* Node agents silent for hb_timeout_ms: their nodes are lost */
static void check_heartbeats(struct coord *c)
{
	if (!c->hb_timeout_ms)
		return;
	for (unsigned i = c->nnodes; i-- > 0;)
		/* (lines waiting unread: it spoke while a checkpoint read only
		 * the agents of its ranks, a node of spares' among those left) */
		if (now_ms() - c->nodes[i].seen > c->hb_timeout_ms &&
		    !line_waiting(c->nodes[i].fd)) {
			c->nodes[i].silent = 1;
			node_gone(c, i);   /* moves the last node into i: visited already */
		}
}

/* Until every node agent has gone, at most a heartbeat timeout and 2 s:
 * an agent that ends closes its connection, a lost node's stays silent
 * and is found lost by its heartbeats (within the wait). Their lines
 * (LOST, BYE) are read as usual meanwhile. Agents still speaking stay. */
static void wait_agents(struct coord *c)
{
	uint64_t end = now_ms() + c->hb_timeout_ms + 2000;

	while (c->nnodes && now_ms() < end) {
		serve_nodes(c, HB_CHECK_MS);
		check_heartbeats(c);
	}
}

/* The launcher (or the program) ended: the event. A launcher that ended
 * badly while a policy recovers is examined first: the node agents' ends
 * and silences say which ranks and nodes went with it (Open MPI's mpirun
 * exits about a second after a node dies, before the heartbeats tell). */
static void launcher_ended(struct coord *c, int status)
{
	int code = exit_code(status);

	c->launcher_code = code;
	if (c->standby.fd >= 0) {
		reply(c->standby.fd, "ERR the stand-by is gone: its launcher ended with status %d "
		      "before every rank ran", code);
		close(c->standby.fd);
		c->standby.fd = -1;
	}
	if (code && c->hb_timeout_ms)
		wait_agents(c);
	raise_event(c, EV_LAUNCHER_ENDED, -1, NULL, code, "the %s ended with status %d",
		    c->target == &mpi_target ? "launcher" : "program", code);
}

/* Stop the job: every node agent kills its ranks and ends (a lost node's
 * is found silent), and the launcher's process tree is killed and reaped
 * (a launcher may hang after a node died, docs/cluster.md); its status,
 * or its own if it had ended, in launcher_code */
static void stop_job(struct coord *c)
{
	c->stopping = 1;
	for (unsigned i = 0; i < c->nnodes; i++)
		reply(c->nodes[i].fd, "KILL");
	if (c->child > 0) {
		uint64_t end = now_ms() + (c->launch ? (uint64_t)job_stop_grace_ms(c->launch[0]) : 0);
		int st = 0, ended = waitpid(c->child, &st, WNOHANG) == c->child;

		if (!ended && now_ms() < end) {
			/* a launcher that must end by itself, not signalled (srun:
			 * job_stop_grace_ms) */
			log_info("recovery: waiting for %s to end its ranks' step", c->launch[0]);
			while (!ended && now_ms() < end) {
				serve_nodes(c, HB_CHECK_MS);
				ended = waitpid(c->child, &st, WNOHANG) == c->child;
			}
		}
		if (!ended) {
			job_kill_tree(c->child);
			waitpid(c->child, &st, 0);
		}
		c->launcher_code = exit_code(st);
		c->child = -1;
	}
	wait_agents(c);
	/* agents that neither ended nor fell silent: no longer the job's (an
	 * agent ends when its coordinator closes) */
	for (unsigned i = c->nnodes; i-- > 0;)
		node_gone(c, i);
	c->stopping = 0;
}

static void missing_unlink(struct coord *c)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/" JOB_MISSING_FILE, c->dir);
	unlink(path);
}

/* What the last relaunch's ranks said in JOB_MISSING_FILE, kept for the
 * run's later recoveries; the file goes: it is this run's, and a later
 * run (or restart) must not pass over a checkpoint for it */
static void missing_take(struct coord *c)
{
	char path[PATH_MAX], line[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/" JOB_MISSING_FILE, c->dir);
	f = fopen(path, "re");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		size_t n = strlen(line);
		char *m = realloc(c->missing, c->missing_len + n + 1);

		if (!m)
			break;
		memcpy(m + c->missing_len, line, n + 1);
		c->missing = m;
		c->missing_len += n;
	}
	fclose(f);
	unlink(path);
}

/* Whether a relaunch's rank said it has no copy of its image of name */
static int missing_has(const struct coord *c, const char *name)
{
	size_t n = strlen(name);

	for (const char *p = c->missing; p && *p;) {
		const char *nl = strchr(p, '\n');

		if (!strncmp(p, name, n) && p[n] == ' ')
			return 1;
		p = nl ? nl + 1 : "";
	}
	return 0;
}

/* The newest established checkpoint the relaunch can use: with nodes
 * lost, one that does not need their node-local copies: not staged, or
 * staged and at a level that survives a node (global, partner, rs: the
 * lost ranks' images are then rebuilt from their partners or parity by
 * the node agents at the restart, lh_stage_rebuild). A staged one still
 * at level local (or single) lost its images on those nodes. Never one
 * that a relaunch's rank found no copy of (JOB_MISSING_FILE). "" when
 * none. */
static void choose_checkpoint(struct coord *c, struct store *s, char *name, size_t len)
{
	struct store_ckpt_info *list = NULL;
	size_t n = 0;

	name[0] = 0;
	missing_take(c);
	if (store_list(s, &list, &n, NULL) != 0)
		return;
	for (size_t i = n; i-- > 0 && !name[0];) {
		const struct store_ckpt_info *k = &list[i];

		if (k->state != STORE_COMPLETE)
			continue;
		if (missing_has(c, k->name)) {
			log_info("recovery: %s passed over: a rank of a relaunch from it found no "
				 "copy of its image", k->name);
			continue;
		}
		if (c->nlost_hosts && (!strcmp(k->level, "local") || !strcmp(k->level, "single"))) {
			log_info("recovery: %s passed over: level %s, and node %s was lost", k->name,
				 k->level, c->lost_hosts[0]);
			continue;
		}
		snprintf(name, len, "%s", k->name);
	}
	free(list);
}

/* Where libstasis's rank 0 says that the job checkpoints at the
 * application level (jobenv.h) */
static const char *applevel_path(struct coord *c, char *path, size_t len)
{
	snprintf(path, len, "%s/%s", c->dir, JOBENV_APPLEVEL_FILE);
	return path;
}

/* What libstasis's rank 0 wrote (jobenv.h): its job's checkpoint
 * directory in the global tier and its local_dir. -ENOENT if the job does
 * not checkpoint at the application level. */
struct applevel {
	char global[PATH_MAX];
	char local[PATH_MAX];
};

static int applevel_read(struct coord *c, struct applevel *a)
{
	char path[PATH_MAX], line[PATH_MAX + 16], *slash;
	FILE *f = fopen(applevel_path(c, path, sizeof(path)), "re");

	if (!f)
		return err_set(-ENOENT, "%s: %s", path, strerror(errno));
	a->global[0] = a->local[0] = 0;
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = 0;
		if (!strncmp(line, "global ", 7))
			snprintf(a->global, sizeof(a->global), "%.*s", (int)sizeof(a->global) - 1,
				 line + 7);
		else if (!strncmp(line, "local ", 6))
			snprintf(a->local, sizeof(a->local), "%.*s", (int)sizeof(a->local) - 1,
				 line + 6);
	}
	fclose(f);
	/* <global dir>/<job>: its callers cut at the last slash */
	slash = strrchr(a->global, '/');
	if (!slash || slash == a->global || !slash[1])
		return err_set(-ENOENT, "%s: no line 'global <directory>/<job>'", path);
	return 0;
}

/* An application-level job: the relaunch starts the program afresh and
 * libstasis recovers from the newest checkpoint whose every rank's copy
 * it can verify; from names the newest established one (the choice is the
 * library's: a copy lost with a node or still under way when the job
 * stopped sends it further back). 0 if the job is not one. */
static int applevel_choice(struct coord *c, char *from, size_t len)
{
	struct store_ckpt_info *list = NULL;
	struct store *s = NULL;
	struct applevel a;
	const char *name = NULL;
	char *slash;
	size_t n = 0;

	if (applevel_read(c, &a) != 0)
		return 0;
	slash = strrchr(a.global, '/');
	*slash = 0;
	if (store_open("global", a.global, slash + 1, &s) != 0)
		return 0;
	if (store_list(s, &list, &n, NULL) == 0)
		for (size_t i = n; i-- > 0 && !name;)
			if (list[i].state == STORE_COMPLETE)
				name = list[i].name;
	if (name)
		snprintf(from, len, "%s or older (libstasis recovers the newest it can verify)", name);
	else
		snprintf(from, len, "the start (libstasis has no checkpoint established)");
	free(list);
	store_close(&s);
	return 1;
}

/* The hosts that ran ranks of the launch that ended (every rank is a note
 * by now: ended, or died) */
static unsigned used_hosts(struct coord *c, char (*used)[64])
{
	unsigned n = 0;

	for (unsigned i = 0; i < c->nnotes; i++) {
		unsigned k = 0;

		while (k < n && strcmp(used[k], c->notes[i].host))
			k++;
		if (k == n && n < HOSTS_MAX)
			snprintf(used[n++], 64, "%s", c->notes[i].host);
	}
	return n;
}

/* What the launch that ended leaves behind goes: its ranks, notes, node
 * agents, followed copies */
static void launch_reset(struct coord *c)
{
	c->nranks = 0;
	c->nnotes = 0;
	for (unsigned i = 0; i < c->nnodes; i++)
		node_close(c, i);
	c->nnodes = 0;
	memset(c->copying, 0, sizeof(c->copying));
	c->mig.nretired = 0;
	c->nlost_hosts = 0;
	c->nagents = 0;
}

static void give_up(struct coord *c, const char *msg)
{
	fprintf(stderr, "stasis: %s\n", msg);
	stop_job(c);
	c->done = 1;
	c->status = c->launcher_code ? c->launcher_code : 1;
}

/* The relaunch ended before every rank was back: a node of its host list
 * may have died before its agent started (Open MPI's mpirun starts a
 * daemon on every node of the list, spares too, and fails when one does
 * not answer). The nodes whose agents did not come are asked through the
 * remote shell; those that do not answer are lost. The hosts that run
 * ranks are not spares (the failed launch registered none). */
static void dead_hosts(struct coord *c, char (*used)[64], unsigned *nused)
{
	char hosts[HOSTS_MAX][64], ask[HOSTS_MAX][64];
	int alive[HOSTS_MAX];
	unsigned n = job_hosts(c->launch, hosts, HOSTS_MAX), nask = 0;

	for (unsigned i = 0; i < n; i++)
		if (!host_in(c->agents, c->nagents, hosts[i]))
			host_add(ask, &nask, hosts[i]);
	migrate_hosts_alive(ask, nask, alive, (int)(c->hb_timeout_ms + 2000));
	for (unsigned i = 0; i < nask; i++)
		if (alive[i] < 0)
			log_warn("recovery: cannot ask whether %s answers (%s): kept", ask[i],
				 strerror(-alive[i]));
		else if (!alive[i]) {
			log_warn("recovery: %s does not answer (%s %s true): taken for lost", ask[i],
				 cfg_str(CFG_MIGRATE_SHELL), ask[i]);
			host_add(c->lost_hosts, &c->nlost_hosts, ask[i]);
		}
	for (unsigned i = 0; i < c->nexpected; i++)
		host_add(used, nused, c->expected[i]);
}

static void mig_answer(struct coord *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void applevel_unhalt(struct coord *c);

/* The job is relaunched with argv (owned from now on) */
static void take_launch(struct coord *c, char **argv)
{
	free(c->argv);
	c->argv = argv;
	c->launch = argv;
}

/* A relaunch (a recovery's or a migration's) was made (ret 0) or failed
 * (the job ends, said with c->rec.line): the old launch's events are
 * stale; ret */
static int relaunched(struct coord *c, int ret)
{
	c->nevents = 0;
	policy_launched(c->policy);
	if (ret) {
		fprintf(stderr, "stasis: %s; the relaunch failed: %s\n", c->rec.line, err_msg());
		c->done = 1;
		c->status = c->launcher_code ? c->launcher_code : 1;
	}
	return ret;
}

/* Relaunch the job from the newest usable checkpoint, without the nodes
 * lost; said in one line once every rank registered again */
static void recover(struct coord *c, const struct coord_event *ev)
{
	char used[HOSTS_MAX][64], name[64], dir[PATH_MAX], note[300], **argv = NULL, from[160];
	uint64_t backoff;
	unsigned nused;
	int ret;

	if (c->mig.applevel) {
		applevel_unhalt(c);
		mig_answer(c, "ERR migration: %s; automatic recovery takes over", ev->detail);
	}
	if (c->mig.moved) {   /* a moved rank lost before it registered again */
		c->mig.moved = 0;
		mig_answer(c, "ERR migration: %s; automatic recovery takes over", ev->detail);
	}
	c->mig.leaving[0] = 0;
	mig_drop(c);   /* a move's cut, dropped once the moved ranks ran */
	stop_job(c);
	name[0] = 0;
	if (c->standby.state == 1) {
		/* a stand-by restores only what `restart --standby` names: a new one */
		standby_unready(c);
		c->standby.lost[0] = 0;
	} else {
		choose_checkpoint(c, c->store, name, sizeof(name));
	}
	if (name[0] && store_ckpt_path(c->store, name, NULL, dir, sizeof(dir)) != 0)
		name[0] = 0;
	if (name[0] || c->standby.state == 1)
		snprintf(from, sizeof(from), "%s", name[0] ? name : "a new stand-by");
	else if (!applevel_choice(c, from, sizeof(from)))
		snprintf(from, sizeof(from), "the start (no checkpoint established)");
	backoff = policy_backoff_ms(c->policy);
	if (backoff) {
		struct timespec ts = { (time_t)(backoff / 1000), (long)(backoff % 1000) * 1000000 };

		log_info("recovery: waiting %llu ms before relaunching", (unsigned long long)backoff);
		nanosleep(&ts, NULL);
	}
	policy_recovered(c->policy);
	nused = used_hosts(c, used);
	if (c->rec.pending)
		dead_hosts(c, used, &nused);
	ret = job_launch_without(c->launch, c->lost_hosts, c->nlost_hosts, used, nused, &argv,
				 note, sizeof(note));
	snprintf(c->rec.line, sizeof(c->rec.line), "recovery %u of %u: %s; from %s%s%s",
		 policy_restarts(c->policy), c->o->max_restarts, ev->detail, from,
		 note[0] ? "; " : "", note);
	c->rec.t0 = ev->at_ms;
	c->rec.pending = 1;
	launch_reset(c);
	if (!ret) {
		take_launch(c, argv);
		ret = c->target->relaunch(c, name[0] ? dir : NULL);
	}
	if (!relaunched(c, ret) && c->standby.state == 1) {
		/* no rank registers before a restore: said now */
		fprintf(stderr, "stasis: %s\n", c->rec.line);
		c->rec.pending = 0;
		policy_running(c->policy);
	}
}

/* ---- migration (docs/coordinator.md, "Migration") ---- */

static void mig_answer(struct coord *c, const char *fmt, ...)
{
	char buf[900];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (c->mig.fd >= 0) {
		reply(c->mig.fd, "%s", buf);
		close(c->mig.fd);
	}
	c->mig.fd = -1;
}

/* The ranks a host runs, " 1 3" (and how many) */
static unsigned host_ranks(struct coord *c, const char *host, char *out, size_t len)
{
	unsigned n = 0;
	size_t k = 0;

	out[0] = 0;
	for (unsigned i = 0; i < c->nranks; i++)
		if (!strcmp(c->ranks[i].host, host)) {
			k += (size_t)snprintf(out + k, k < len ? len - k : 0, " %d", c->ranks[i].rank);
			n++;
		}
	return n;
}

/* The launcher's command with from replaced by to (*to empty: the first
 * spare of its host list, named in to) */
static int migrate_placement(struct coord *c, const char *from, char *to, size_t tlen,
			     char ***argv, char *note, size_t nlen)
{
	char (*used)[64] = calloc(HOSTS_MAX, 64), lost[1][64];
	unsigned nused = 0;
	int ret = used ? 0 : err_set(-ENOMEM, "out of memory");

	snprintf(lost[0], sizeof(lost[0]), "%s", from);
	for (unsigned i = 0; used && i < c->nranks; i++) {
		unsigned k = 0;

		while (k < nused && strcmp(used[k], c->ranks[i].host))
			k++;
		if (k == nused && nused < HOSTS_MAX)
			snprintf(used[nused++], 64, "%s", c->ranks[i].host);
	}
	for (unsigned i = 0; used && i < c->mig.nretired && nused < HOSTS_MAX; i++)
		snprintf(used[nused++], 64, "%s", c->mig.retired[i]);
	while (!ret) {
		const char *by;

		ret = job_launch_without(c->launch, lost, 1, used, nused, argv, note, nlen);
		if (ret)
			break;
		by = strstr(note, " replaced by ");
		if (!by || nused == HOSTS_MAX) {
			free(*argv);
			*argv = NULL;
			ret = strstr(note, "names no host list") ?
				err_set(-ENOSPC, "no spare node for %s's ranks: the launcher's command "
					"names no host list (Open MPI's --host, Hydra's -hosts)", from) :
				to[0] ? err_set(-ENOENT, "%s is not a spare of the launcher's host list "
					      "(a host named in it on which no rank runs)", to) :
				err_set(-ENOSPC, "no spare node for %s's ranks: the launcher's host list "
					"names none on which no rank runs", from);
			break;
		}
		by += 13;
		if (!to[0] || !strcmp(by, to)) {
			snprintf(to, tlen, "%s", by);
			break;
		}
		free(*argv);
		*argv = NULL;
		snprintf(used[nused++], 64, "%s", by);   /* another spare: not this one */
	}
	free(used);
	return ret;
}

/* MIGRATE <node> <to|-> [rank=R] or PREDICT <node> <within ms>: checked,
 * then an event for the policies; err gets the one line of a refusal */
static int migrate_asked(struct coord *c, char *line, char *err, size_t len)
{
	char from[64] = "", to[64] = "", ranks[400], note[300], path[PATH_MAX], **argv = NULL;
	unsigned long long within = 0;
	int rank = -1, predict = !strncmp(line, "PREDICT ", 8), applevel;
	const char *base;

	if (predict ? sscanf(line + 8, "%63s %llu", from, &within) != 2 :
	    sscanf(line + 8, "%63s %63s rank=%d", from, to, &rank) < 2) {
		snprintf(err, len, "bad request '%.80s'", line);
		return -1;
	}
	if (!strcmp(to, "-"))
		to[0] = 0;
	if (c->target != &mpi_target) {
		snprintf(err, len, "migration moves the ranks of an MPI job; this job is one program");
		return -1;
	}
	applevel = access(applevel_path(c, path, sizeof(path)), F_OK) == 0;
	if (applevel && predict) {
		snprintf(err, len, "a predicted fault of an application-level job (libstasis) is not "
			 "handled: its ranks cannot be checkpointed from outside (stasis migrate "
			 "asks it to stop and moves it; --recover auto recovers it)");
		return -1;
	}
	if (c->mig.fd >= 0 || c->rec.pending || c->nranks < c->size || !c->nranks) {
		snprintf(err, len, "the job is not running with every rank registered (starting, "
			 "recovering, or migrating): try again");
		return -1;
	}
	if (rank >= 0) {
		int i = rank_index(c, rank);

		if (i < 0) {
			snprintf(err, len, "rank %d is not a rank of the job (0-%u)", rank, c->size - 1);
			return -1;
		}
		snprintf(from, sizeof(from), "%s", c->ranks[i].host);
	}
	if (!host_ranks(c, from, ranks, sizeof(ranks))) {
		char hosts[300] = "";

		for (unsigned i = 0; i < c->nnodes; i++)
			snprintf(hosts + strlen(hosts), sizeof(hosts) - strlen(hosts), "%s%s",
				 i ? ", " : "", c->nodes[i].host);
		snprintf(err, len, "node %s runs no rank of the job (its ranks run on %s)", from, hosts);
		return -1;
	}
	if (strlen(ranks) >= sizeof(ranks) - 1) {   /* (cut: the lines name them all) */
		snprintf(err, len, "node %s runs more ranks than a migration moves (their numbers "
			 "take at most %zu characters)", from, sizeof(ranks) - 2);
		return -1;
	}
	if (!applevel && !c->staged) {
		snprintf(err, len, "migration moves the ranks' node-local images: run the job with "
			 "staging = on");
		return -1;
	}
	if (to[0] && host_ranks(c, to, note, sizeof(note))) {
		snprintf(err, len, "%s runs ranks of the job already: the target must be a spare", to);
		return -1;
	}
	base = strrchr(c->launch[0], '/') ? strrchr(c->launch[0], '/') + 1 : c->launch[0];
	if (!strncmp(base, "srun", 4)) {
		snprintf(err, len, "migration under srun is not built: Slurm, not the coordinator, "
			 "places the relaunched step (use --recover auto)");
		return -1;
	}
	if (migrate_placement(c, from, to, sizeof(to), &argv, note, sizeof(note)) != 0) {
		snprintf(err, len, "%s", err_msg());
		return -1;
	}
	free(argv);
	snprintf(c->mig.from, sizeof(c->mig.from), "%s", from);
	snprintf(c->mig.to, sizeof(c->mig.to), "%s", to);
	if (predict) {
		unsigned n = host_ranks(c, from, ranks, sizeof(ranks));
		uint64_t bytes = c->last_bytes / c->nranks * n;

		raise_event(c, EV_FAULT_PREDICTED, rank, from, 0, "a fault of %s predicted within "
			    "%.1f s", from, (double)within / 1000.0);
		c->events[c->nevents - 1].bound_ms = within;
		c->events[c->nevents - 1].expect_ms = migrate_expected_ms(bytes, c->mig.bytes_per_s);
	} else {
		raise_event(c, EV_MIGRATE_ASKED, rank, from, 0, "ranks%s of %s to %s asked to migrate",
			    ranks, from, to);
	}
	return 0;
}

/* A prediction the migration would not beat: a checkpoint now (what the
 * chain does when the fault comes is its own) */
static void predicted_checkpoint(struct coord *c, const char *why)
{
	char name[64];

	fprintf(stderr, "stasis: %s\n", why);
	if (checkpoint(c, 0, name, sizeof(name)) == 0)
		mig_answer(c, "OK checkpoint %s (%s)", name, why);
	else
		mig_answer(c, "ERR %s; and the checkpoint failed: %s", why, err_msg());
}

/* A migration's relaunch was made (ret 0) or failed: the client is
 * answered with the line (c->rec.line) */
static void mig_relaunched(struct coord *c, int ret)
{
	if (relaunched(c, ret))
		mig_answer(c, "ERR %s; the relaunch failed: %s", c->rec.line, err_msg());
	else
		mig_answer(c, "OK %s", c->rec.line);
}

/* ---- migration of an application-level job ---- */

#define APPLEVEL_STOP_MS (600 * 1000)   /* for the program to reach stasis_should_exit */
#define APPLEVEL_MOVE_MS (300 * 1000)   /* for its node cache to move */

static const char *halt_path(const struct applevel *a, char *path, size_t len)
{
	snprintf(path, len, "%s/halt", a->global);
	return path;
}

/* libstasis's job cannot be checkpointed from outside: it is asked to
 * checkpoint and stop (stasis_should_exit sees the halt file in its global
 * directory, docs/applevel.md), and the migration goes on when its
 * launcher ends (applevel_migrated). -1: nothing relaunched yet. */
static int applevel_stop(struct coord *c)
{
	char path[PATH_MAX + 8], note[300], to[64];
	struct applevel a;
	int fd;

	snprintf(to, sizeof(to), "%s", c->mig.to);
	if (applevel_read(c, &a) != 0 ||
	    migrate_placement(c, c->mig.from, to, sizeof(to), &c->mig.argv, note, sizeof(note))) {
		mig_answer(c, "ERR migration: %s", err_msg());
		return -1;
	}
	snprintf(c->mig.to, sizeof(c->mig.to), "%s", to);
	host_ranks(c, c->mig.from, c->mig.ranks, sizeof(c->mig.ranks));
	fd = open(halt_path(&a, path, sizeof(path)), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0) {
		mig_answer(c, "ERR migration: cannot ask the program to stop: %s: %s", path,
			   strerror(errno));
		free(c->mig.argv);
		c->mig.argv = NULL;
		return -1;
	}
	close(fd);
	c->mig.applevel = 1;
	c->mig.deadline = now_ms() + APPLEVEL_STOP_MS;
	log_info("migration: the program is asked to checkpoint and stop (%s)", path);
	return -1;
}

/* The asked stop is over: the halt file goes, the request is answered */
static void applevel_unhalt(struct coord *c)
{
	char path[PATH_MAX + 8];
	struct applevel a;

	if (applevel_read(c, &a) == 0)
		unlink(halt_path(&a, path, sizeof(path)));
	c->mig.applevel = 0;
	free(c->mig.argv);
	c->mig.argv = NULL;
}

/* A program that never stops (it does not call stasis_should_exit) */
static void applevel_check(struct coord *c)
{
	if (!c->mig.applevel || now_ms() < c->mig.deadline)
		return;
	applevel_unhalt(c);
	mig_answer(c, "ERR migration: the program did not stop within %d s: libstasis stops it "
		   "only where it calls stasis_should_exit", APPLEVEL_STOP_MS / 1000);
}

/* The launcher of the job asked to stop ended. Ended well: the source
 * node's libstasis cache moves to the target through the remote shell,
 * and the job is relaunched with the target in the source's place (its
 * ranks find their images in their node's cache); should the move fail,
 * where it was. 0 when relaunched; -1: the event is the chain's (the
 * program ended badly, not as asked). */
static int applevel_migrated(struct coord *c, const struct coord_event *ev)
{
	char local_from[PATH_MAX + 64], local_to[PATH_MAX + 64], from[160], *job;
	uint64_t t0 = now_ms();
	struct applevel a;
	int ret;

	if (ev->status != 0 || applevel_read(c, &a) != 0) {
		applevel_unhalt(c);
		mig_answer(c, "ERR migration: the program ended with status %d before it stopped",
			   ev->status);
		return -1;
	}
	/* libstasis takes the halt file when it tells the program to stop:
	 * still there, the program came to its own end first (relaunching it
	 * would run it again from its last checkpoint) */
	if (access(halt_path(&a, local_from, sizeof(local_from)), F_OK) == 0) {
		applevel_unhalt(c);
		mig_answer(c, "ERR migration: the program ended by itself before it saw the "
			   "request to stop");
		return -1;
	}
	job = strrchr(a.global, '/') + 1;
	snprintf(local_from, sizeof(local_from), "%s/%s", a.local, c->mig.from);
	snprintf(local_to, sizeof(local_to), "%s/%s", a.local, c->mig.to);
	ret = a.local[0] ? migrate_move_dir(c->mig.from, local_from, c->mig.to, local_to, job,
					    APPLEVEL_MOVE_MS) :
		err_set(-ENOENT, "libstasis did not say where its node caches are");
	stop_job(c);
	launch_reset(c);
	applevel_choice(c, from, sizeof(from));
	if (ret) {
		fprintf(stderr, "stasis: migration of ranks%s from %s to %s failed: %s; the job goes "
			"on where it was\n", c->mig.ranks, c->mig.from, c->mig.to, err_msg());
		mig_answer(c, "ERR migration of ranks%s from %s to %s failed: %s; the job goes on "
			   "where it was", c->mig.ranks, c->mig.from, c->mig.to, err_msg());
		snprintf(c->rec.line, sizeof(c->rec.line), "relaunched where it was; from %s", from);
	} else {
		take_launch(c, c->mig.argv);
		c->mig.argv = NULL;
		snprintf(c->rec.line, sizeof(c->rec.line), "migration: ranks%s from %s to %s, "
			 "libstasis's node cache moved in %.2f s; from %s", c->mig.ranks, c->mig.from,
			 c->mig.to, (double)(now_ms() - t0) / 1000.0, from);
	}
	applevel_unhalt(c);
	c->rec.t0 = ev->at_ms;
	c->rec.pending = 1;
	mig_relaunched(c, c->target->relaunch(c, NULL));
	return 0;
}

/* The migration's checkpoint held with the moving ranks' images only (a
 * move that failed): the others write theirs, still parked, and it is
 * sealed as any checkpoint, for the relaunch or the recovery that follows.
 * 0 when sealed or none was held. */
static int mig_complete(struct coord *c, const char *name)
{
	struct store_ckpt *ck = c->mig.held;
	char line[sizeof(c->mig.ranks) + 16];
	uint64_t ignored = 0, pages = 0;
	int ret, lret, files = 0;

	if (!ck)
		return 0;
	c->mig.held = NULL;
	ret = nodes_with_ranks(c);
	if (!ret) {
		snprintf(line, sizeof(line), "WRITE EXCEPT%s", c->mig.ranks);
		send_nodes(c, line);
		/* while they write: what the cut lacks to be a checkpoint
		 * (job_checkpoint leaves them out of a move's cut) */
		lret = job_launch_write(ck, c->launch);
		files = job_files_write(ck, (int)c->child) == 0;
		if (!files)
			log_warn("checkpoint %s: the job's file list: %s", name, err_msg());
		ret = collect_nodes(c, "DONE", &ignored, &pages);
		ret = ret ? ret : lret;
	}
	ret = seal(c, ck, ret, 1 + (unsigned)files);
	if (!ret && store_ckpt_level(c->store, name, "local", NULL) == 0)
		staged(c, name);
	else if (!ret)
		log_warn("checkpoint %s: %s", name, err_msg());
	store_ckpt_free(&ck);
	reap_nodes(c);
	return ret;
}

/* The move was made: the held checkpoint is a cut that only the moved
 * ranks wrote, which no restart can use */
static void mig_drop(struct coord *c)
{
	if (!c->mig.held)
		return;
	store_ckpt_abort(c->mig.held, "a migration into spares: only the moved ranks' images "
			 "were written");
	store_ckpt_free(&c->mig.held);
}

/* A migration that failed once its cut was taken (the transfer, the
 * source's agent, the receiver): the cut completed for the recovery or the
 * job resumed, the client told; -1 */
static int mig_failed(struct coord *c, const char *ranks, const char *from, const char *to,
		      char *name, size_t len)
{
	char why[700];
	int cut;

	snprintf(why, sizeof(why), "migration of ranks%s from %s to %s failed: %s", ranks, from,
		 to, err_msg());
	fprintf(stderr, "stasis: %s\n", why);
	/* the others' images too, for the recovery (the source kept its
	 * ranks'): failing that, from the last checkpoint established */
	cut = mig_complete(c, name);
	if (cut != 0)
		snprintf(name, len, "%s", c->last[0] ? c->last : "the start");
	if (policy_recovers(c->policy)) {
		mig_answer(c, "ERR %s; automatic recovery from %s takes over", why, name);
		raise_event(c, EV_RANK_LOST, -1, from, 0, "%s", why);
	} else {
		/* every node with ranks: in the checkpoint's phases again */
		if (nodes_with_ranks(c) != 0)
			log_warn("migration: %s", err_msg());
		/* the cut stands, or is no checkpoint (the node agents keep
		 * the one before it: node_level_verdict); the job goes on */
		send_nodes(c, cut ? "RESUME failed" : "RESUME");
		mig_answer(c, "ERR %s; the job goes on where it was", why);
	}
	return -1;
}

/* The node agent on host, or -1 */
static int node_on(struct coord *c, const char *host)
{
	for (unsigned i = 0; i < c->nnodes; i++)
		if (!c->nodes[i].dead && !strcmp(c->nodes[i].host, host))
			return (int)i;
	return -1;
}

/* MIGRATE to from's agent: it sends ranks' images to the receiver at
 * to:port (none when they were streamed) and removes the job's node-local
 * directory (source_answer has its MIGRATED). The agent's index, or
 * -EHOSTDOWN. */
static int source_tell(struct coord *c, const char *from, const char *to, int port,
		       const char *name, const char *ranks)
{
	int src = node_on(c, from);

	if (src < 0)
		return err_set(-EHOSTDOWN, "the node agent on %s went away", from);
	reply(c->nodes[src].fd, "MIGRATE %s:%d %s%s", to, port, name, ranks);
	return src;
}

/* The MIGRATED of agent src: *bytes, *ms. Only it answers; the other
 * agents' part in the phase is as it was. */
static int source_answer(struct coord *c, int src, uint64_t *bytes, uint64_t *ms)
{
	char *was = calloc(c->nnodes + 1, 1);
	int ret;

	if (!was)
		return err_set(-ENOMEM, "out of memory");
	for (unsigned i = 0; i < c->nnodes; i++) {
		was[i] = (char)c->nodes[i].in_ckpt;
		c->nodes[i].in_ckpt = (int)i == src;
	}
	ret = collect_nodes(c, "MIGRATED", bytes, ms);
	for (unsigned i = 0; i < c->nnodes; i++)
		c->nodes[i].in_ckpt = was[i];
	free(was);
	return ret;
}

static int source_leaves(struct coord *c, const char *from, const char *to, int port,
			 const char *name, const char *ranks, uint64_t *bytes, uint64_t *ms)
{
	int src = source_tell(c, from, to, port, name, ranks);

	return src < 0 ? src : source_answer(c, src, bytes, ms);
}

/* Into spares: the end of the receiver, which confirmed every image
 * already (a bad end is only said) */
static void receiver_ended(struct coord *c, const struct coord_event *ev)
{
	if (!c->mig.rcv)
		return;
	if (recv_end(c, c->mig.rcv, 30000) == 0)
		log_info("migration: the receiver ended, %llu ms after the request",
			 (unsigned long long)(now_ms() - ev->at_ms));
	else
		log_warn("migration: the receiver on %s ended badly after it confirmed every image "
			 "(%s)", c->mig.rcv->host, c->mig.rcv->why[0] ? c->mig.rcv->why : "status");
}

/* The images of from's ranks on to, every rank parked: the ranks go into
 * the spares waiting on to, the others keep their processes and make
 * their communicators again (docs/coordinator.md, "Moving a rank into a
 * spare"). 0 when done: the moved ranks left the table, the client is
 * answered once they registered again from to. -1: the ranks refused (a
 * window, a file, no spare there...) and are still parked: relaunch. */
static int move_into_spares(struct coord *c, const char *from, const char *to, int port,
			    const char *ranks, const char *name, uint64_t bytes, uint64_t ms,
			    const struct coord_event *ev)
{
	char line[600];
	uint64_t a = 0, b = 0;
	int ret, src;

	if (nodes_with_ranks(c) != 0)
		return -1;
	snprintf(line, sizeof(line), "MOVE %s%s", to, ranks);
	send_nodes(c, line);
	receiver_ended(c, ev);
	ret = collect_nodes(c, "MOVED", &a, &b);
	reap_nodes(c);
	if (!ret)
		log_info("migration: every rank moved or relinked %llu ms after the request",
			 (unsigned long long)(now_ms() - ev->at_ms));
	if (ret) {
		log_info("migration: not into a spare (%s): the job is relaunched", err_msg());
		return -1;
	}
	/* from keeps their old processes until the job ends */
	if (!c->mig.retired)
		c->mig.retired = calloc(HOSTS_MAX, sizeof(*c->mig.retired));
	if (c->mig.retired && c->mig.nretired < HOSTS_MAX)
		snprintf(c->mig.retired[c->mig.nretired++], 64, "%s", from);
	/* they register again from to (register_rank answers the client) */
	for (unsigned i = c->nranks; i-- > 0;)
		if (!strcmp(c->ranks[i].host, from))
			rank_drop(c, i);
	/* the moved ranks compute already (a spare does not wait for RESUME),
	 * but wait for the others: they resume now, while the source's
	 * directory goes (8 ms of a move at load 8 when they waited for it);
	 * the source's agent has its MIGRATE before RESUME moved, since it
	 * ends once its ranks' old processes left. The move stands whatever
	 * happens. */
	src = source_tell(c, from, to, port, name, "");
	send_nodes(c, "RESUME moved");
	log_info("migration: the ranks that stay resumed %.1f s after the request (%llu ms)",
		 (double)(now_ms() - ev->at_ms) / 1000.0,
		 (unsigned long long)(now_ms() - ev->at_ms));
	/* its MIGRATED is read as it comes (source_left): the spares'
	 * registrations, which their programs wait for, are not held up by
	 * the removal (8-11 ms at load 12); the client's answer waits for
	 * both */
	if (src >= 0) {
		snprintf(c->mig.leaving, sizeof(c->mig.leaving), "%s", from);
		c->mig.leaving_ms = migrate_source_ms(bytes);
		c->mig.leaving_by = now_ms() + c->mig.leaving_ms;
	} else
		log_warn("migration: ranks%s moved from %s to %s, but %s", ranks, from, to, err_msg());
	snprintf(c->rec.line, sizeof(c->rec.line), "migration: ranks%s from %s to %s, %.1f MiB "
		 "node to node in %.2f s; from %s; into spares", ranks, from, to,
		 (double)bytes / 1048576.0, (double)ms / 1000.0, name);
	c->rec.t0 = ev->at_ms;
	c->rec.pending = 1;
	c->mig.moved = 1;
	c->mig.moved_by = now_ms() + MOVED_TIMEOUT_MS;
	snprintf(c->mig.to, sizeof(c->mig.to), "%s", to);
	return 0;
}

/* A moved rank that never registers from its spare (it hangs, or cannot
 * reach the target's agent): lost, so that the recovery (or the end)
 * follows instead of a migration pending for good */
static void moved_check(struct coord *c)
{
	if (!c->mig.moved || now_ms() < c->mig.moved_by)
		return;
	c->mig.moved = 0;
	c->rec.pending = 0;
	mig_answer(c, "ERR migration: the moved ranks did not register from their spares within "
		   "%d s", MOVED_TIMEOUT_MS / 1000);
	raise_event(c, EV_RANK_LOST, -1, c->mig.to, 0, "the moved ranks did not register from "
		    "their spares on %s within %d s", c->mig.to, MOVED_TIMEOUT_MS / 1000);
}

/* The source's agent of a move into spares that does not say it removed
 * the job's directory there in time (it hangs, its heartbeats perhaps
 * going on): the move fails as the other migration faults do, to
 * automatic recovery from the last established checkpoint (the source is
 * no longer the job's: the relaunch leaves it out), the client told in
 * one line; without recovery the job goes on where it was moved */
static void leaving_check(struct coord *c)
{
	char why[800], from[64];

	if (!c->mig.leaving[0] || now_ms() < c->mig.leaving_by)
		return;
	snprintf(from, sizeof(from), "%s", c->mig.leaving);
	snprintf(why, sizeof(why), "migration of ranks%s from %s to %s failed: the node agent on "
		 "%s did not say within %llu s that it removed the job's directory there",
		 c->mig.ranks, from, c->mig.to, from,
		 (unsigned long long)(c->mig.leaving_ms + 999) / 1000);
	fprintf(stderr, "stasis: %s\n", why);
	c->mig.leaving[0] = 0;
	c->mig.moved = 0;
	if (policy_recovers(c->policy)) {
		mig_answer(c, "ERR %s; automatic recovery from %s takes over", why,
			   c->last[0] ? c->last : "the start");
		raise_event(c, EV_RANK_LOST, -1, from, 0, "%s", why);
	} else {
		mig_drop(c);
		mig_answer(c, "ERR %s; the job goes on, moved", why);
	}
}

/* Whether a recovery after a move into spares still finds every image: the
 * move removes the source's node-local directory, so the newest
 * established checkpoint (the one a recovery takes; its name in name, ""
 * when none) must have its images in the global tier */
static int recoverable_after_move(struct coord *c, char *name, size_t len)
{
	struct store_ckpt_info *list = NULL;
	size_t n = 0;
	int ok = 1;

	name[0] = 0;
	if (store_list(c->store, &list, &n, NULL) != 0) {
		snprintf(name, len, "-");
		return 0;   /* unknown: the relaunch, which writes every image */
	}
	for (size_t i = n; i-- > 0;)
		if (list[i].state == STORE_COMPLETE) {
			snprintf(name, len, "%s", list[i].name);
			ok = job_level_in_global(list[i].level);
			break;
		}
	free(list);
	return ok;
}

/* Move c->mig.from's ranks to c->mig.to: a checkpoint that leaves the
 * ranks parked, the source's agent sends their images to a receiver on the
 * target, the job stopped and relaunched with the target in the source's
 * place. 0 once relaunched; a failure after the checkpoint raises a rank
 * lost for the chain (autor recovers) or, without recovery, resumes. */
static int migrate_with(struct coord *c, const struct coord_event *ev, struct migrate_receiver *r)
{
	char name[64], dir[PATH_MAX], line[640], ranks[400], note[300], why[700], **argv = NULL;
	char from[64], to[64], newest[64];
	uint64_t bytes = 0, ms = 0, t0 = now_ms();
	unsigned nmoving;
	int ret, rret, src = -1, into;

	if (access(applevel_path(c, dir, sizeof(dir)), F_OK) == 0)
		return applevel_stop(c);
	c->mig.asked_ms = ev->at_ms;
	snprintf(from, sizeof(from), "%s", c->mig.from);
	snprintf(to, sizeof(to), "%s", c->mig.to);
	ret = migrate_placement(c, from, to, sizeof(to), &argv, note, sizeof(note));
	if (ret) {
		mig_answer(c, "ERR %s", err_msg());
		return -1;
	}
	nmoving = host_ranks(c, from, ranks, sizeof(ranks));
	/* into spares (not for a node about to fail: a move leaves the old
	 * processes there, whose death would end the job): only the moving
	 * ranks write their images */
	into = c->o->spares && ev->kind != EV_FAULT_PREDICTED && nmoving <= LINE_MOVE_RANKS_MAX;
	if (into && !recoverable_after_move(c, newest, sizeof(newest))) {
		/* a recovery would need the source's copies the move removes */
		log_info("migration: not into a spare (%s is not in the global tier yet): the job "
			 "is relaunched", newest);
		into = 0;
	}
	snprintf(c->mig.ranks, sizeof(c->mig.ranks), "%s", ranks);
	c->mig.only = into ? c->mig.ranks : NULL;
	/* the receiver starts on the target while the ranks park; into spares
	 * the moving ranks stream their images to it as they write them */
	rret = recv_start(c, to, into ? nmoving : 1, into, r);
	c->mig.recv = into && !rret ? r : NULL;
	c->mig.recv_host = to;
	ret = job_checkpoint(c, 2, name, sizeof(name));
	c->mig.only = NULL;
	c->mig.recv = NULL;
	if (ret) {
		snprintf(why, sizeof(why), "%s", err_msg());
		if (!rret)
			recv_cancel(c, r);   /* gone before the answer */
		free(argv);
		if (into && policy_recovers(c->policy)) {
			/* streamed, the cut fails with its transfer (the receiver
			 * froze, refused or went): a migration's failure */
			snprintf(line, sizeof(line), "%.200s", why);
			snprintf(why, sizeof(why), "migration of ranks%.80s from %s to %s failed: %.400s",
				 ranks, from, to, line);
			fprintf(stderr, "stasis: %s\n", why);
			mig_answer(c, "ERR %s; automatic recovery from %s takes over", why,
				   c->last[0] ? c->last : "the start");
			raise_event(c, EV_RANK_LOST, -1, from, 0, "%s", why);
			return -1;
		}
		fprintf(stderr, "stasis: migration of ranks%s from %s to %s failed: the checkpoint "
			"failed: %s\n", ranks, from, to, why);
		mig_answer(c, "ERR migration: the checkpoint failed: %s", why);
		return -1;   /* the ranks resumed (RESUME failed) */
	}
	for (unsigned i = 0; i < c->nnodes; i++) {
		c->nodes[i].in_ckpt = !strcmp(c->nodes[i].host, from);
		if (c->nodes[i].in_ckpt)
			src = (int)i;
	}
	if (src < 0) {
		if (!rret)
			recv_cancel(c, r);
		ret = err_set(-EHOSTDOWN, "the node agent on %s went away", from);
	} else {
		ret = rret ? err_set(rret, "cannot start the receiver on %s: %s", to,
				     strerror(-rret)) : recv_port(c, r);
	}
	if (!ret) {
		/* the images to the receiver and the source's directory removed;
		 * streamed into spares, the receiver has them already and the
		 * directory goes once the move is made (move_into_spares): the
		 * moved ranks do not wait for it */
		if (!into)
			ret = source_leaves(c, from, to, r->port, name, ranks, &bytes, &ms);
		reap_nodes(c);
		/* into spares the receiver answered OK to each image before
		 * its rank said DONE: its end is seen as the ranks move
		 * (receiver_ended), not before */
		if (ret)
			recv_end(c, r, 0);
		else if (!into && recv_end(c, r, 30000) != 0)
			ret = err_set(-EIO, "the receiver on %s did not confirm every image", to);
		if (!ret && !into)
			log_info("migration: the source's directory removed, the receiver ended, %llu "
				 "ms after the request", (unsigned long long)(now_ms() - ev->at_ms));
	}
	if (ret) {
		free(argv);
		return mig_failed(c, ranks, from, to, name, sizeof(name));
	}
	if (into) {   /* streamed as they were written */
		bytes = c->mig.streamed_bytes;
		ms = c->mig.streamed_ms;
	}
	if (ms)
		c->mig.bytes_per_s = bytes * 1000 / ms;
	/* a node about to fail: the relaunch, which leaves nothing there (a
	 * move leaves the old processes, whose death would end the job) */
	if (c->o->spares && ev->kind == EV_FAULT_PREDICTED)
		log_info("migration: a predicted fault: the job is relaunched, not moved into "
			 "spares (their old processes would stay on %s)", from);
	else if (c->o->spares && nmoving > LINE_MOVE_RANKS_MAX)
		log_info("migration: not into a spare (%u ranks, more than the %d a move takes): the "
			 "job is relaunched", nmoving, LINE_MOVE_RANKS_MAX);
	else if (into && move_into_spares(c, from, to, r->port, ranks, name, bytes, ms, ev) == 0) {
		/* the moved ranks' images are on to only: a recovery launches
		 * them there */
		take_launch(c, argv);
		return 0;
	}
	/* not moved: the receiver's end (move_into_spares may have seen it)
	 * and the source's directory before the relaunch */
	if (into)
		recv_end(c, r, 30000);
	if (into && (ret = source_leaves(c, from, to, r->port, name, "", &bytes, &ms)) != 0) {
		reap_nodes(c);
		free(argv);
		return mig_failed(c, ranks, from, to, name, sizeof(name));
	}
	reap_nodes(c);
	if (into) {   /* streamed as they were written */
		bytes = c->mig.streamed_bytes;
		ms = c->mig.streamed_ms;
	}
	/* refused: the others write theirs for the relaunch */
	if ((ret = mig_complete(c, name)) != 0) {
		snprintf(why, sizeof(why), "migration of ranks%s from %s to %s failed: the others' "
			 "images: %s", ranks, from, to, err_msg());
		free(argv);
		fprintf(stderr, "stasis: %s\n", why);
		mig_answer(c, "ERR %s; automatic recovery takes over", why);
		raise_event(c, EV_RANK_LOST, -1, from, 0, "%s", why);
		return -1;
	}
	/* every image on the target, the source's directory removed */
	stop_job(c);
	launch_reset(c);
	take_launch(c, argv);
	snprintf(c->rec.line, sizeof(c->rec.line), "migration: ranks%s from %s to %s, %.1f MiB "
		 "node to node in %.2f s; from %s", ranks, from, to, (double)bytes / 1048576.0,
		 (double)ms / 1000.0, name);
	c->rec.t0 = ev->at_ms;
	c->rec.pending = 1;
	ret = store_ckpt_path(c->store, name, NULL, dir, sizeof(dir));
	ret = ret ? ret : c->target->relaunch(c, dir);
	if (!ret)
		log_info("migration: relaunched %.1f s after the request",
			 (double)(now_ms() - t0) / 1000.0);
	mig_relaunched(c, ret);
	return 0;
}

/* A migration (migrate_with), its receiver's lines taken while it runs */
static int migrate(struct coord *c, const struct coord_event *ev)
{
	struct migrate_receiver r = { .pid = -1, .out = -1 };
	int ret;

	c->mig.rcv = &r;
	ret = migrate_with(c, ev, &r);
	c->mig.rcv = NULL;
	return ret;
}

/* The policies' decisions on the events raised, carried out in order; after
 * a recovery the rest are stale (the old launch's) */
static void decide(struct coord *c)
{
	/* a rank the program ended comes first: the losses that arrived with
	 * it (from other nodes' agents) are its consequences */
	for (unsigned i = 1; i < c->nevents; i++)
		for (unsigned k = i; k > 0 && c->events[k].kind == EV_RANK_QUIT &&
		     c->events[k - 1].kind != EV_RANK_QUIT; k--) {
			struct coord_event t = c->events[k - 1];

			c->events[k - 1] = c->events[k];
			c->events[k] = t;
		}
	for (unsigned i = 0; i < c->nevents && !c->done; i++) {
		struct coord_event ev = c->events[i];
		char msg[600];

		if (ev.kind == EV_LAUNCHER_ENDED && c->mig.applevel && applevel_migrated(c, &ev) == 0)
			return;   /* relaunched: the rest are the old launch's */

		if (ev.kind == EV_RANK_QUIT && !c->quit_code)
			c->quit_code = ev.status;
		switch (policy_decide(c->policy, &ev, msg, sizeof(msg))) {
		case POLICY_RECOVER:
			c->quit_code = 0;
			recover(c, &ev);
			return;
		case POLICY_END:
			c->done = 1;
			/* a rank's exit(3) or MPI_Abort(3): the job ends with 3, as
			 * it does natively, though Hydra may report the SIGKILL it
			 * sent a rank whose lower half ignored its SIGTERM */
			c->status = c->stopped ? 0 : ev.kind == EV_LAUNCHER_ENDED && ev.status &&
				    c->quit_code ? c->quit_code : ev.status;
			break;
		case POLICY_GIVE_UP:
			give_up(c, msg);
			break;
		case POLICY_MIGRATE:
			if (migrate(c, &ev) != 0)
				break;        /* failed: its event (autor's) follows */
			if (!c->mig.moved)
				return;   /* relaunched: the rest are the old launch's */
			/* moved into spares: the job's other processes are the same,
			 * the events after this one still stand */
			memmove(c->events, c->events + i + 1,
				(c->nevents - i - 1) * sizeof(*c->events));
			c->nevents -= i + 1;
			i = UINT_MAX;   /* (the loop's i++: from the first again) */
			continue;
		case POLICY_CHECKPOINT:
			predicted_checkpoint(c, msg);
			break;
		default:
			if (msg[0])
				fprintf(stderr, "stasis: %s\n", msg);
			break;
		}
	}
	c->nevents = 0;
}

static void on_signal(struct coord *c)
{
	struct signalfd_siginfo si;
	char name[64];

	while (read(c->sig_fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		if (si.ssi_signo == SIGCHLD) {
			int status;

			if (c->child > 0 && waitpid(c->child, &status, WNOHANG) == c->child) {
				c->child = -1;
				launcher_ended(c, status);
			}
		} else if (c->standby.state == 1 && si.ssi_signo == SIGTERM) {
			/* nothing to checkpoint yet: the stand-by ends */
			c->standby.termed = 1;
			if (c->child > 0)
				kill(c->child, SIGTERM);
		} else if (c->o->signal_checkpoint && (si.ssi_signo == SIGTERM || si.ssi_signo == SIGUSR1)) {
			int stop = si.ssi_signo == SIGTERM;

			if (checkpoint(c, stop, name, sizeof(name)) == 0)
				fprintf(stderr, "stasis: checkpoint %s taken on %s\n", name,
					stop ? "SIGTERM" : "SIGUSR1");
			else
				fprintf(stderr, "stasis: checkpoint on signal failed: %s\n", err_msg());
		} else if (si.ssi_signo == SIGTERM) {
			/* passed on: to the program, or down the restart's namespace */
			if (c->child > 0)
				kill(c->child, SIGTERM);
			else if (c->rchild.pid > 0)
				kill(c->rchild.pid, SIGTERM);
		}
	}
}

static void serve(struct coord *c)
{
	char name[64];

	if (c->o->interval_ms)
		c->next_ckpt_ms = now_ms() + c->o->interval_ms;
	while (!c->done) {
		unsigned nt = proc_tree_size(c->tree);
		struct pollfd p[5 + nt];
		int n = 0, timeout = -1, ichan = -1, istat = -1, itcp = -1, asked;
		unsigned nn = c->nnodes;

		p[n++] = (struct pollfd){ c->listen_fd, POLLIN, 0 };
		p[n++] = (struct pollfd){ c->sig_fd, POLLIN, 0 };
		if (nt) {
			ichan = n;
			n += (int)proc_tree_poll(c->tree, p + n, nt);
		}
		if (c->rchild.status_fd >= 0) {
			istat = n;
			p[n++] = (struct pollfd){ c->rchild.status_fd, POLLIN, 0 };
		}
		if (c->tcp_fd >= 0) {
			itcp = n;
			p[n++] = (struct pollfd){ c->tcp_fd, POLLIN, 0 };
			p[n++] = (struct pollfd){ c->node_ep, POLLIN, 0 };
		}
		if (c->o->interval_ms && (nt || c->nranks)) {
			uint64_t t = now_ms();

			timeout = c->next_ckpt_ms > t ? (int)(c->next_ckpt_ms - t) : 0;
		}
		if (c->hb_timeout_ms && nn && (timeout < 0 || timeout > HB_CHECK_MS))
			timeout = HB_CHECK_MS;
		if ((c->mig.moved || c->mig.leaving[0]) && (timeout < 0 || timeout > 1000))
			timeout = 1000;   /* moved_check, leaving_check */
		if (poll(p, (nfds_t)n, timeout) < 0 && errno != EINTR)
			break;
		if (p[1].revents)
			on_signal(c);
		if (istat >= 0 && p[istat].revents) {
			int status;

			proc_child_wait(&c->rchild, &status);
			launcher_ended(c, status);
			decide(c);
			continue;
		}
		if (ichan >= 0)
			/* children announced, hellos, agents that ended */
			proc_tree_serve(c->tree, p + ichan, nt);
		/* node agents: registrations, copies done, ranks that ended or
		 * died, a checkpoint asked for (MPIX_Checkpoint) */
		if (itcp >= 0 && p[itcp + 1].revents && (asked = node_events(c)) >= 0) {
			log_info("the program asks for a checkpoint (MPIX_Checkpoint, through the node "
				 "agent on %s)", c->nodes[asked].host);
			if (checkpoint(c, 0, name, sizeof(name)) != 0)
				fprintf(stderr, "stasis: checkpoint asked for by the program failed: %s\n",
					err_msg());
		}
		if (itcp >= 0 && p[itcp].revents)
			accept_conns(c);
		if (p[0].revents)
			serve_client(c);
		if (c->o->interval_ms && (proc_tree_size(c->tree) || c->nranks) && now_ms() >= c->next_ckpt_ms &&
		    checkpoint(c, 0, name, sizeof(name)) != 0)
			fprintf(stderr, "stasis: periodic checkpoint failed: %s\n", err_msg());
		check_heartbeats(c);
		applevel_check(c);
		moved_check(c);
		leaving_check(c);
		decide(c);
	}
}

static int coord_init(struct coord *c, const struct coord_opts *o)
{
	char path[PATH_MAX];
	sigset_t set;
	int ret;

	memset(c, 0, sizeof(*c));
	c->o = o;
	c->listen_fd = c->channel = c->sig_fd = c->tcp_fd = -1;
	c->target = &process_target;
	c->child = -1;
	c->rchild.pid = -1;
	c->rchild.status_fd = -1;
	c->mig.fd = -1;
	c->standby.fd = -1;
	ret = policy_chain_create(o->recover ? o->recover : "none", o->max_restarts, &c->policy);
	if (ret)
		return ret;
	if (policy_recovers(c->policy))
		c->hb_timeout_ms = o->heartbeat_timeout_ms ? o->heartbeat_timeout_ms : 3000;
	ret = store_open(o->tier, o->root, o->job, &c->store);
	if (ret)
		return ret;
	snprintf(c->dir, sizeof(c->dir), "%s", store_job_dir(c->store));
	ret = listen_job(c);
	if (ret)
		return ret;
	/* a former run's: this one's ranks say it again */
	unlink(applevel_path(c, path, sizeof(path)));
	missing_unlink(c);
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGUSR1);
	sigprocmask(SIG_BLOCK, &set, NULL);
	c->sig_fd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	if (c->sig_fd < 0)
		return err_set(-errno, "signalfd: %s", strerror(errno));
	/* the terminal's ^C and ^\ are for the program */
	signal(SIGINT, SIG_IGN);
	signal(SIGQUIT, SIG_IGN);
	signal(SIGPIPE, SIG_IGN);
	return 0;
}

static void coord_fini(struct coord *c)
{
	if (c->mig.applevel)
		applevel_unhalt(c);   /* a later run must not stop at once */
	unlisten(c);
	if (c->channel >= 0)
		close(c->channel);
	proc_tree_free(&c->tree);
	if (c->sig_fd >= 0)
		close(c->sig_fd);
	for (unsigned i = 0; i < c->nnodes; i++)
		close(c->nodes[i].fd);
	free(c->nodes);
	free(c->ranks);
	free(c->slot);
	free(c->notes);
	free(c->argv);
	mig_drop(c);   /* a move's cut the job ended before it was dropped */
	free(c->mig.retired);
	free(c->missing);
	policy_chain_free(&c->policy);
	if (c->tcp_fd >= 0) {
		close(c->tcp_fd);
		close(c->node_ep);
	}
	store_close(&c->store);
}

/* In the forked child: the signals the coordinator blocks or ignores are
 * the program's again. */
static void child_reset(void)
{
	sigset_t none;

	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGINT, SIG_DFL);
	signal(SIGQUIT, SIG_DFL);
	signal(SIGPIPE, SIG_DFL);
}

/* Start an MPI job's launcher with the launch library preloaded; the
 * ranks register as they start. */
static int job_spawn(struct coord *c, char *const *argv, const char *restore_dir)
{
	char root[PATH_MAX], jdir[PATH_MAX], rdir[PATH_MAX], **spawn = NULL;
	int ret;

	c->target = &mpi_target;
	c->staged = !strcmp(cfg_str(CFG_STAGING), "on");
	c->launch = argv;
	/* the ranks may run elsewhere: absolute paths */
	if (!realpath(c->o->root, root) || !realpath(c->dir, jdir) ||
	    (restore_dir && !realpath(restore_dir, rdir)))
		return err_set(-errno, "cannot resolve the job's directories: %s", strerror(errno));
	if (job_program_index(argv) < 0)
		return err_set(-EINVAL, "%s: no MPI program among its operands (an executable "
			       "file, found like the launcher would)", argv[0]);
	ret = c->tcp_fd < 0 ? tcp_listen(c) : 0;   /* a relaunch keeps the port */
	if (ret)
		return ret;
	/* the stored command keeps the program's count: the spares are this
	 * launch's (a restart chooses its own) */
	if (c->o->spares && (ret = job_launch_spares(argv, c->o->spares, &spawn)) != 0)
		return ret;
	{
		unsigned char r[8];

		if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
			return err_set(-EIO, "cannot get random bytes for the run's id");
		for (int i = 0; i < 8; i++)
			snprintf(c->run_id + 2 * i, 3, "%02x", r[i]);
	}
	c->child = fork();
	if (c->child < 0) {
		free(spawn);
		return err_set(-errno, "fork: %s", strerror(errno));
	}
	if (c->child == 0) {
		child_reset();
		/* before job_child_env, which passes it on to Open MPI's ranks */
		char beat[24];

		snprintf(beat, sizeof(beat), "%llu", (unsigned long long)(c->hb_timeout_ms / 5));
		if (c->hb_timeout_ms)
			setenv(JOBENV_HEARTBEAT_MS, beat, 1);
		else
			unsetenv(JOBENV_HEARTBEAT_MS);
		if (c->o->spares) {
			char n[16];

			snprintf(n, sizeof(n), "%u", c->o->spares);
			setenv(JOBENV_SPARES, n, 1);
			/* a moved rank's old process then ends without
			 * ending the job (Open MPI; the user's choice kept) */
			setenv(JOBENV_OMPI_EXIT_NO_SYNC, "1", 0);
		} else {
			unsetenv(JOBENV_SPARES);
		}
		if (c->standby.state == 1)
			setenv(JOBENV_STANDBY, "1", 1);
		else
			unsetenv(JOBENV_STANDBY);
		if (setenv(JOBENV_RUN_ID, c->run_id, 1) != 0 ||
		    job_child_env(c->addr, jdir, root, c->o->tier, c->o->job,
				  restore_dir ? rdir : NULL) != 0) {
			fprintf(stderr, "stasis: %s\n", err_msg());
			_exit(127);
		}
		job_child_exec(spawn ? spawn : argv);
		fprintf(stderr, "stasis: cannot execute %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	free(spawn);
	c->pid = c->child;
	return 0;
}

/* Whether the ranks of a restart from checkpoint name look for their
 * node-local copies first: staging on, and the checkpoint staged (a level
 * of staging recorded: local, global, partner, ...) */
static int restart_staged(struct coord *c, const char *name)
{
	struct store_ckpt_info *list = NULL;
	size_t n = 0;
	int staged = 0;

	if (strcmp(cfg_str(CFG_STAGING), "on") != 0 ||
	    store_list(c->store, &list, &n, NULL) != 0)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!strcmp(list[i].name, name))
			staged = list[i].level[0] && strcmp(list[i].level, "single") != 0;
	free(list);
	return staged;
}

/* Start reading ahead what the restart from checkpoint directory dir
 * reads (job_prefetch): the job's files, and the rank images only when
 * the checkpoint is not staged. A staged one's ranks read their node's
 * copy where the node still has it, and the coordinator sees no node's
 * local directory nor, before the ranks register, which node runs which
 * rank: it reads none of the global copies ahead, and a rank whose node
 * lost its copy reads its global one itself. */
static void read_ahead(struct coord *c, const char *dir)
{
	const char *name = strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir;
	int staged = restart_staged(c, name), images = 0;
	int files = job_prefetch(dir, !staged, &images);

	if (files || images || staged)
		log_info("restart: reading %d files and %d rank images of %s ahead%s", files,
			 images, name, staged ? " (staged: the ranks read their node-local copies, "
			 "or their global ones themselves)" : "");
}

static int mpi_relaunch(struct coord *c, const char *dir)
{
	if (dir)
		read_ahead(c, dir);
	return job_spawn(c, c->launch, dir);
}

int coord_run(const struct coord_opts *o, char **argv, int *status)
{
	struct coord c;
	char preload[PATH_MAX * 2], fdv[16], wfdv[16], wpath[PATH_MAX + 32];
	uint32_t version = 0;
	int sv[2] = { -1, -1 }, ret, written = -1;

	ret = coord_init(&c, o);
	if (ret)
		goto out;
	if (job_is_launcher(argv[0])) {
		ret = job_spawn(&c, argv, NULL);
		if (!ret) {
			serve(&c);
			*status = c.status;
		}
		/* what its relaunches' ranks said is this run's (a restart's
		 * stays for `stasis restart`, which reads it once it ended) */
		missing_unlink(&c);
		goto out;
	}
	if (o->spares) {
		ret = err_set(-EINVAL, "--spares holds ranks of an MPI job in reserve (a launcher "
			      "such as mpirun), not of a single program");
		goto out;
	}
	if (policy_recovers(c.policy)) {
		ret = err_set(-EINVAL, "--recover auto relaunches MPI jobs (a launcher such as mpirun "
			      "or srun), not a single program");
		goto out;
	}
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
		ret = err_set(-errno, "socketpair: %s", strerror(errno));
		goto out;
	}
	ret = proc_agent_env(sv[1], preload, sizeof(preload), fdv, sizeof(fdv));
	if (ret)
		goto out;
	/* the list of the files every process of the tree writes
	 * (docs/transparent.md, "Files written and closed"); without it each
	 * process's own list is saved, as before */
	snprintf(wpath, sizeof(wpath), "%s/" PROC_WRITTEN_LOG_FILE, c.dir);
	written = proc_written_log_create(wpath);
	if (written < 0)
		log_warn("%s", err_msg());
	snprintf(wfdv, sizeof(wfdv), "%d", written);
	c.child = fork();
	if (c.child < 0) {
		ret = err_set(-errno, "fork: %s", strerror(errno));
		goto out;
	}
	if (c.child == 0) {
		child_reset();
		if (fcntl(sv[1], F_SETFD, 0) != 0)
			_exit(127);
		setenv("LD_PRELOAD", preload, 1);
		setenv("STASIS_COORD_FD", fdv, 1);
		if (written >= 0 && fcntl(written, F_SETFD, 0) == 0)
			setenv(PROC_ENV_WRITTEN, wfdv, 1);
		execvp(argv[0], argv);
		fprintf(stderr, "stasis: run: cannot execute %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(sv[1]);
	sv[1] = -1;
	c.channel = sv[0];
	sv[0] = -1;
	ret = proc_agent_hello(c.channel, HELLO_TIMEOUT_MS, &c.pid, &version);
	if (!ret) {
		ret = proc_tree_create(c.channel, c.pid, version, &c.tree);
		c.channel = -1;   /* the tree's (closed on failure) */
	}
	if (!ret && written >= 0) {
		proc_tree_written_log(c.tree, written);
		written = -1;
	}
	if (ret) {
		/* the program runs on, without checkpoints; one that already ended
		 * (or could not be executed, and said so) needs no warning */
		if (ret != -EPIPE)
			log_warn("%s", err_msg());
		ret = 0;
		if (c.channel >= 0)
			close(c.channel);
		c.channel = -1;
		c.pid = c.child;
	}
	serve(&c);
	*status = c.status;
out:
	if (written >= 0)
		close(written);
	if (sv[0] >= 0)
		close(sv[0]);
	if (sv[1] >= 0)
		close(sv[1]);
	coord_fini(&c);
	return ret;
}

int coord_restart(const struct coord_opts *o, const char *ckpt, int *status)
{
	struct coord c;
	struct img_reader *img = NULL;
	char name[64], path[PATH_MAX], **launch = NULL, wpath[PATH_MAX + 32], *wold = NULL;
	int sv[2] = { -1, -1 }, ret, written = -1;
	size_t wlen = 0;

	ret = coord_init(&c, o);
	if (ret)
		goto out;
	if (ckpt)
		snprintf(name, sizeof(name), "%s", ckpt);
	else if ((ret = store_select(c.store, name, sizeof(name))) != 0)
		goto out;
	ret = job_launch_read(c.store, name, o->launcher, &launch);
	if (ret == 0) {
		/* an MPI job: its launcher again, each rank from its image */
		ret = store_ckpt_path(c.store, name, NULL, path, sizeof(path));
		if (!ret)
			read_ahead(&c, path);
		ret = ret ? ret : job_spawn(&c, launch, path);
		if (!ret) {
			snprintf(c.last, sizeof(c.last), "%s", name);
			serve(&c);
			*status = c.status;
		}
		goto out;
	}
	if (ret != -ENOENT)
		goto out;
	/* what a single process's restore needs (its pid back in new user and
	 * PID namespaces, ...); an MPI job's lower halves need none of it */
	ret = proc_kernel_check();
	if (ret)
		goto out;
	if (o->launcher) {
		ret = err_set(-EINVAL, "checkpoint %s is not an MPI job's: --launcher does not apply",
			      name);
		goto out;
	}
	if (policy_recovers(c.policy)) {
		ret = err_set(-EINVAL, "checkpoint %s is not an MPI job's: --recover auto does not "
			      "apply", name);
		goto out;
	}
	ret = store_ckpt_path(c.store, name, NULL, path, sizeof(path));
	if (ret)
		goto out;
	/* the tree's list of written files, started again from the images';
	 * the run before's tells which files it made after the checkpoint */
	snprintf(wpath, sizeof(wpath), "%s/" PROC_WRITTEN_LOG_FILE, c.dir);
	if (proc_written_log_old(wpath, &wold, &wlen) != 0)
		log_warn("%s", err_msg());
	written = proc_written_log_create(wpath);
	if (written >= 0 && proc_restore_written_log(written, wold, wlen) != 0) {
		close(written);
		written = -1;
	}
	if (written < 0)
		log_warn("%s", err_msg());
	/* every process of the checkpoint (proc/tree.c), each from its image */
	ret = proc_tree_restart(path, name, log_get_level() >= LOG_DEBUG ? "debug" : "warn", &c.rchild,
				&c.tree);
	if (written >= 0)
		close(PROC_WRITTEN_ORIGIN);   /* the restored processes have theirs */
	if (ret && written >= 0 && wold && ftruncate(written, 0) == 0)
		(void)!write(written, wold, wlen);   /* for the next attempt */
	if (ret)
		goto out;
	if (written >= 0) {
		proc_tree_written_log(c.tree, written);
		written = -1;
	}
	c.pid = proc_tree_pid(c.tree);
	snprintf(c.last, sizeof(c.last), "%s", name);
	serve(&c);
	*status = c.status;
out:
	if (written >= 0)
		close(written);
	free(wold);
	free(launch);
	img_close(&img);
	if (sv[0] >= 0)
		close(sv[0]);
	if (sv[1] >= 0)
		close(sv[1]);
	coord_fini(&c);
	return ret;
}

int coord_standby(const struct coord_opts *o, int *status)
{
	struct coord c;
	char name[64], path[PATH_MAX], **launch = NULL;
	int ret;

	ret = coord_init(&c, o);
	if (ret)
		goto out;
	ret = store_select(c.store, name, sizeof(name));
	if (!ret && (ret = job_launch_read(c.store, name, o->launcher, &launch)) == -ENOENT)
		ret = err_set(-EINVAL, "%s of job %s is no MPI job's checkpoint: a stand-by holds "
			      "an MPI job's ranks", name, o->job);
	if (ret)
		goto out;
	for (unsigned i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "%s/%s", c.dir,
			 i ? JOBENV_STANDBY_GO_FILE : JOBENV_STANDBY_READY_FILE);
		unlink(path);   /* a former stand-by's */
	}
	c.standby.state = 1;
	ret = job_spawn(&c, launch, NULL);
	if (!ret) {
		log_info("stand-by: %s started; `stasis restart --standby` restores a checkpoint "
			 "of job %s into its ranks", launch[0], o->job);
		serve(&c);
		*status = c.status;
	}
	if (c.standby.state)
		standby_unready(&c);
	if (!ret && c.standby.state == 1)
		/* its own word: a launcher's end may say nothing, or only mpirun's banner */
		fprintf(stderr, "stasis: the stand-by of job %s ended before a restore: %s%d\n", o->job,
			c.standby.termed ? "on SIGTERM, its launcher's status " :
			"its launcher ended with status ", c.status);
out:
	free(launch);
	coord_fini(&c);
	return ret;
}

/* ---- client ---- */

int coord_alive(const char *job_dir)
{
	int fd = -1;

	if (connect_job(job_dir, &fd) != 0)
		return 0;
	close(fd);
	return 1;
}

/* The job's secret, read once the coordinator greeted: a coordinator
 * starting where a killed one's files are (its secret, its socket) listens
 * only once its own secret is in place, so one read before connecting
 * could find the killed one's (docs/coordinator.md, "Files"). */
static int read_secret(const char *job_dir, char secret[SECRET_LEN + 1])
{
	char path[PATH_MAX];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "%s/coord.secret", job_dir);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return err_set(-ENOENT, "no running coordinator in %s", job_dir);
	n = read(fd, secret, SECRET_LEN);
	close(fd);
	if (n != SECRET_LEN)
		return err_set(-EACCES, "cannot read the job's secret %s", path);
	secret[SECRET_LEN] = 0;
	return 0;
}

int coord_request(const char *job_dir, const char *request, int timeout_ms, char *out, size_t len)
{
	char secret[SECRET_LEN + 1], line[1024];
	int fd = -1, ret;

	ret = connect_job(job_dir, &fd);
	if (ret)
		return err_set(ret, "no running coordinator in %s (%s)", job_dir, strerror(-ret));
	/* a coordinator greets once it is free: after a checkpoint or a restore */
	ret = read_line(fd, line, sizeof(line), timeout_ms);
	if (!ret && strncmp(line, "STASIS-COORD ", 13) != 0)
		ret = -EPROTO;
	if (!ret && (ret = read_secret(job_dir, secret)) != 0) {
		close(fd);
		return ret;
	}
	if (!ret) {
		dprintf(fd, "HELLO %d %s\n", COORD_PROTOCOL_VERSION, secret);
		ret = read_line(fd, line, sizeof(line), CLIENT_TIMEOUT_MS);
	}
	if (!ret && strcmp(line, "OK") != 0) {
		snprintf(out, len, "%s", strncmp(line, "ERR ", 4) == 0 ? line + 4 : line);
		close(fd);
		return err_set(-EREMOTEIO, "coordinator refused: %s", out);
	}
	if (!ret) {
		dprintf(fd, "%s\n", request);
		ret = read_line(fd, line, sizeof(line), timeout_ms);
	}
	close(fd);
	if (ret)
		return err_set(ret, "no answer from the coordinator in %s (%s)", job_dir, strerror(-ret));
	if (strncmp(line, "OK", 2) == 0) {
		snprintf(out, len, "%s", line[2] == ' ' ? line + 3 : "");
		return 0;
	}
	snprintf(out, len, "%s", strncmp(line, "ERR ", 4) == 0 ? line + 4 : line);
	return -EREMOTEIO;
}
